"""A memory provider that records every hook call, for tests of code that drives providers.

Example::

    from memstrata import MemoryManager
    from memstrata.testing import RecordingProvider

    provider = RecordingProvider(recall="The user's cat is called Tom.")
    manager = MemoryManager()
    manager.add_provider(provider)
    manager.initialize_all("s1")
    assert "Tom" in manager.prefetch_all("what is my cat called?")
    assert provider.hooks() == ["initialize", "prefetch"]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from memstrata.errors import ToolArgumentError
from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata

__all__ = ["HookCall", "RecordingProvider", "tool_schema"]

ToolReply = Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]]


def tool_schema(name: str, description: str = "", **properties: str) -> dict[str, Any]:
    """An OpenAI function-tool definition whose arguments are the named JSON types.

    ``tool_schema("notes_search", query="string")`` declares one string argument.
    """
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or f"The {name} tool.",
            "parameters": {
                "type": "object",
                "properties": {key: {"type": kind} for key, kind in properties.items()},
            },
        },
    }


@dataclass(frozen=True)
class HookCall:
    """One hook the provider received: its name and its arguments by name."""

    hook: str
    args: dict[str, Any] = field(default_factory=dict)


class RecordingProvider(MemoryProvider):
    """An external provider answering from fixed values and recording every hook call.

    Args:
        name: the provider's name (default ``"recorder"``).
        recall: what :meth:`prefetch` returns each turn (or a function of the query).
        block: the system-prompt block.
        tools: function-tool definitions it offers (see :func:`tool_schema`).
        replies: per tool name, the result dict or a function of the arguments (which
            may raise, as a real tool does). A tool without a reply answers
            ``{"success": true, "handled_by": name, "tool": tool, "args": args}``.
        keep: what :meth:`on_pre_compress` asks to keep through compression (or a
            function of the messages).
        fail: hook names that raise ``RuntimeError`` (to test that a failing provider
            never breaks a turn).

    :attr:`calls` lists every :class:`HookCall` in order (thread-safe: sync and write
    hooks arrive on the manager's worker thread); :attr:`writes` and
    :attr:`write_metadata` hold the mirrored memory writes.
    """

    name: ClassVar[str] = "recorder"
    description: ClassVar[str] = "Records every hook call (memstrata.testing)"

    def __init__(
        self,
        name: str | None = None,
        *,
        recall: str | Callable[[str], str] = "",
        block: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        replies: Mapping[str, ToolReply] | None = None,
        keep: str | Callable[[Sequence[Mapping[str, Any]]], str] = "",
        fail: Sequence[str] = (),
    ) -> None:
        if name is not None:
            # An instance attribute shadows the class default, so several recorders
            # with different names can run side by side.
            self.name = name  # type: ignore[misc]
        self.recall = recall
        self.block = block
        self.tools = [dict(t) for t in tools]
        self.replies = dict(replies or {})
        self.keep = keep
        self.fail = frozenset(fail)
        self.calls: list[HookCall] = []
        self.writes: list[tuple[str, str, str]] = []
        self.write_metadata: list[MemoryWriteMetadata | None] = []
        self.session_id = ""
        self.home: Path | None = None
        self._lock = threading.Lock()

    # -- what was recorded ------------------------------------------------------------

    def _record(self, hook: str, **args: Any) -> None:
        with self._lock:
            self.calls.append(HookCall(hook, args))
        if hook in self.fail:
            raise RuntimeError(f"{self.name}: {hook} failed (RecordingProvider fail={hook!r})")

    def hooks(self) -> list[str]:
        """The names of the hooks received, in order."""
        with self._lock:
            return [call.hook for call in self.calls]

    def calls_to(self, hook: str) -> list[dict[str, Any]]:
        """The arguments of every call to ``hook``, in order."""
        with self._lock:
            return [call.args for call in self.calls if call.hook == hook]

    # -- the provider contract --------------------------------------------------------

    def is_available(self) -> bool:
        """Always available: nothing to install."""
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
        """Record the session and its context."""
        self.session_id = session_id
        self.home = home
        self._record(
            "initialize",
            session_id=session_id,
            home=home,
            platform=platform,
            agent_context=agent_context,
            user_id=user_id,
            session_title=session_title,
            extra=dict(extra),
        )

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The tools given at construction."""
        return [dict(t) for t in self.tools]

    def system_prompt_block(self) -> str:
        """The fixed block."""
        self._record("system_prompt_block")
        return self.block

    def prefetch(self, query: str, *, session_id: str) -> str:
        """The fixed recall text, or what the recall function makes of ``query``."""
        self._record("prefetch", query=query, session_id=session_id)
        return self.recall(query) if callable(self.recall) else self.recall

    def queue_prefetch(self, query: str, *, session_id: str) -> None:
        """Recorded only."""
        self._record("queue_prefetch", query=query, session_id=session_id)

    def sync_turn(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Recorded with a copy of the messages."""
        self._record(
            "sync_turn",
            user=user,
            assistant=assistant,
            session_id=session_id,
            messages=list(messages) if messages is not None else None,
        )

    def handle_tool_call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The scripted reply of tool ``name``; an unknown tool raises, as a real one does."""
        self._record("handle_tool_call", name=name, args=dict(args))
        if name not in {t.get("function", t).get("name") for t in self.tools}:
            raise ToolArgumentError(f"{self.name} has no tool {name!r}.")
        reply = self.replies.get(name)
        if reply is None:
            return {"success": True, "handled_by": self.name, "tool": name, "args": dict(args)}
        return dict(reply(args) if callable(reply) else reply)

    def on_turn_start(self, turn_number: int, message: str) -> None:
        """Recorded only."""
        self._record("on_turn_start", turn_number=turn_number, message=message)

    def on_session_end(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Recorded with a copy of the transcript."""
        self._record("on_session_end", messages=list(messages))

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None,
        reset: bool,
        reason: str,
    ) -> None:
        """Recorded; the provider follows the new session id."""
        self.session_id = new_session_id
        self._record(
            "on_session_switch",
            new_session_id=new_session_id,
            parent_session_id=parent_session_id,
            reset=reset,
            reason=reason,
        )

    def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The fixed ``keep`` text, or what the keep function makes of ``messages``."""
        self._record("on_pre_compress", messages=list(messages))
        return self.keep(messages) if callable(self.keep) else self.keep

    def on_delegation(self, task: str, result: str, *, child_session_id: str) -> None:
        """Recorded only."""
        self._record("on_delegation", task=task, result=result, child_session_id=child_session_id)

    def on_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        *,
        metadata: MemoryWriteMetadata | None = None,
    ) -> None:
        """Recorded in :attr:`writes` and :attr:`write_metadata` too."""
        with self._lock:
            self.writes.append((action, target, content))
            self.write_metadata.append(metadata)
        self._record(
            "on_memory_write", action=action, target=target, content=content, metadata=metadata
        )

    def shutdown(self) -> None:
        """Recorded only."""
        self._record("shutdown")
