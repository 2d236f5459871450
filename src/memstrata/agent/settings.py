"""What an :class:`~memstrata.agent.loop.Agent` is told, apart from the parts it runs on.

The parts (a chat client, a session store, a memory manager) are constructor arguments;
everything else (the session to open, the prompt's context, the limits of a turn) is one
frozen :class:`AgentSettings` value, so an agent's set-up reads on one line and can be
shared between agents or changed with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Final

from memstrata.agent.turn import Pricing

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOOL_ITERATIONS",
    "SETTING_NAMES",
    "AgentSettings",
]

DEFAULT_MAX_TOOL_ITERATIONS: Final = 25
DEFAULT_CONTEXT_WINDOW: Final = 128_000


@dataclass(frozen=True)
class AgentSettings:
    """The settings of one agent (every field has a default).

    Example::

        from memstrata import AgentSettings

        settings = AgentSettings(title="Trip planning", context_window=32_000, stream=False)
    """

    system_message: str | None = None
    """The caller's system message (the prompt's context tier)."""
    session_id: str | None = None
    """Resume this session if it exists, else create it with this id (None: a new id)."""
    title: str | None = None
    """The title of a new session."""
    source: str = "cli"
    """The session's source label (``cli``, ``api``, ...)."""
    platform: str = "cli"
    """The platform hint of the prompt and of ``initialize_all``."""
    cwd: Path | None = None
    """Where context files (AGENTS.md, CLAUDE.md) are looked for; None: nowhere."""
    context_files: tuple[Path, ...] | None = None
    """Explicit context files instead of searching ``cwd``."""
    context_window: int = DEFAULT_CONTEXT_WINDOW
    """The model's window in tokens (compression threshold, file caps)."""
    max_tool_iterations: int = DEFAULT_MAX_TOOL_ITERATIONS
    """Rounds of tool calls run per user turn; past it the model is told to answer."""
    stream: bool = True
    """Stream replies (text reaches ``on_text`` as it arrives)."""
    pricing: Pricing | None = None
    """Prices for the recorded cost (None: the ``llm.*_price_per_mtok`` settings)."""
    temperature: float | None = None
    max_tokens: int | None = None
    clock: Callable[[], datetime] = field(default=datetime.now, compare=False)
    """The time source of the prompt's date line."""

    def __post_init__(self) -> None:
        if isinstance(self.max_tool_iterations, bool) or int(self.max_tool_iterations) < 1:
            raise ValueError("max_tool_iterations must be at least 1")
        if isinstance(self.context_window, bool) or int(self.context_window) < 1:
            raise ValueError("context_window must be a positive number of tokens")
        object.__setattr__(self, "max_tool_iterations", int(self.max_tool_iterations))
        object.__setattr__(self, "context_window", int(self.context_window))
        if self.context_files is not None:
            # A list is accepted too; stored as a tuple so the settings stay immutable.
            object.__setattr__(self, "context_files", tuple(self.context_files))


SETTING_NAMES: Final = frozenset(f.name for f in fields(AgentSettings))
"""The field names, which 0.1's ``Agent(...)`` took as keyword arguments."""
