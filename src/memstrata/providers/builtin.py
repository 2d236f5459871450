"""The built-in provider: the curated files (L1) seen through the provider lifecycle.

It is registered first by every :class:`~memstrata.providers.manager.MemoryManager` and
cannot be removed. Kept apart from :mod:`memstrata.providers.base` because its prefetch
reads the facts saved with the ``remember`` tool, and the facts package itself builds on
the :class:`~memstrata.providers.base.MemoryProvider` contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from memstrata.memory.core import CuratedMemory
from memstrata.memory.tool import MEMORY_TOOL_SCHEMA, MemoryTool
from memstrata.providers.base import BUILTIN_PROVIDER_NAME, MemoryProvider
from memstrata.providers.facts.remembered import RememberedRecall

__all__ = ["BuiltinMemoryProvider"]


class BuiltinMemoryProvider(MemoryProvider):
    """The curated files (L1) as a provider: always first, never removed.

    Its system-prompt block is the frozen :meth:`FileMemory.snapshot`, and its one tool is
    ``memory``. Its prefetch recalls the facts saved with the ``remember`` tool. Its turn
    hooks reset the memory tool's per-turn consolidation counter.
    """

    name: ClassVar[str] = BUILTIN_PROVIDER_NAME
    description: ClassVar[str] = "MEMORY.md and USER.md with the memory tool"

    def __init__(self, memory: CuratedMemory, *, tool: MemoryTool | None = None) -> None:
        self.memory = memory
        self._tool = tool
        self.session_id = ""
        self._remembered = RememberedRecall(memory.home)

    @property
    def tool(self) -> MemoryTool:
        """The ``memory`` tool over :attr:`memory`, created on first use."""
        if self._tool is None:
            self._tool = MemoryTool(self.memory)
        return self._tool

    def is_available(self) -> bool:
        """Always true: the files need nothing but the home folder."""
        return True

    def initialize(
        self,
        session_id: str,
        *,
        home: Path,
        platform: str = "cli",
        agent_context: str = "primary",
        user_id: str | None = None,
        session_title: str | None = None,
        **extra: Any,
    ) -> None:
        """Remember the session id; the snapshot was frozen when the memory loaded."""
        self.session_id = session_id

    def system_prompt_block(self) -> str:
        """The frozen snapshot of MEMORY.md and USER.md."""
        return self.memory.snapshot()

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The ``memory`` tool's schema."""
        return [MEMORY_TOOL_SCHEMA]

    def handle_tool_call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run the ``memory`` tool."""
        if name != "memory":
            return super().handle_tool_call(name, args)  # type: ignore[return-value]
        return self.tool.handle(args)

    def prefetch(self, query: str, *, session_id: str) -> str:
        """Facts saved with the ``remember`` tool that are relevant to ``query``, or ""."""
        return self._remembered.recall(query)

    def shutdown(self) -> None:
        """Close the facts store the recall keeps open (PostgreSQL)."""
        self._remembered.close()

    def on_turn_start(self, turn_number: int, message: str) -> None:
        """Reset the tool's consolidation-failure counter for the new turn."""
        if self._tool is not None:
            self._tool.reset_turn()
