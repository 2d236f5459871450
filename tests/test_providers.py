"""The MemoryProvider contract, the built-in provider and the Hermes-signature shim."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from helpers import call_provider_tool
from memstrata.errors import ProviderError
from memstrata.memory.files import FileMemory
from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata, ProviderCalls
from memstrata.providers.builtin import BuiltinMemoryProvider
from memstrata.providers.manager import MemoryManager


class Minimal(MemoryProvider):
    """Implements only the abstract methods."""

    name: ClassVar[str] = "minimal"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, *, home: Path, **extra: Any) -> None:
        self.session_id = session_id

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []


def test_abstract_methods_are_required() -> None:
    """A provider that skips an abstract method cannot be instantiated."""

    class Incomplete(MemoryProvider):
        name: ClassVar[str] = "incomplete"

        def is_available(self) -> bool:
            return True

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_optional_hooks_default_to_no_ops() -> None:
    """Every optional hook has a harmless default."""
    provider = Minimal()
    assert provider.system_prompt_block() == ""
    assert provider.prefetch("q", session_id="s") == ""
    assert provider.on_pre_compress([]) == ""
    assert provider.get_config_schema() == []
    provider.queue_prefetch("q", session_id="s")
    provider.sync_turn("u", "a", session_id="s")
    provider.on_turn_start(1, "hi")
    provider.on_session_end([])
    provider.on_session_switch("s2", parent_session_id="s", reset=False, reason="compression")
    provider.on_delegation("task", "result", child_session_id="c")
    provider.on_memory_write("add", "memory", "x", metadata=None)
    provider.shutdown()


def test_default_handle_tool_call_raises_with_advice() -> None:
    """A provider that lists a tool but does not handle it gets a ProviderError saying so."""
    with pytest.raises(ProviderError, match="implement it"):
        Minimal().handle_tool_call("minimal_search", {})


def test_metadata_reads_like_a_dict() -> None:
    """MemoryWriteMetadata answers .get and [] like the dict Hermes providers expect."""
    meta = MemoryWriteMetadata(origin="cli", old_text="old", session_id="s1")
    assert meta.get("origin") == "cli"
    assert meta["old_text"] == "old"
    assert meta.get("missing", 7) == 7
    assert "session_id" in meta
    assert set(meta.keys()) == set(meta.to_dict())
    with pytest.raises(KeyError):
        meta["missing"]


def test_builtin_block_is_the_frozen_snapshot(memstrata_home: Path) -> None:
    """The built-in block is FileMemory's snapshot and does not move on mid-session writes."""
    memory = FileMemory(memstrata_home)
    memory.add("user", "Prefers metric units.")
    memory.load()
    builtin = BuiltinMemoryProvider(memory)
    before = builtin.system_prompt_block()
    assert "Prefers metric units." in before
    assert before == memory.snapshot()
    memory.add("memory", "Project uses SQLite.")
    assert builtin.system_prompt_block() == before


def test_builtin_memory_tool_writes_the_file(memstrata_home: Path) -> None:
    """The built-in provider offers the memory tool and its calls reach MEMORY.md."""
    memory = FileMemory(memstrata_home)
    builtin = BuiltinMemoryProvider(memory)
    assert [s["function"]["name"] for s in builtin.get_tool_schemas()] == ["memory"]
    result = builtin.handle_tool_call(
        "memory", {"action": "add", "target": "memory", "content": "Deploys on Fridays."}
    )
    assert result["success"] is True
    assert "Deploys on Fridays." in memory.entries("memory")
    with pytest.raises(ProviderError):
        builtin.handle_tool_call("other", {})


class HermesStyle:
    """A provider written against Hermes Agent's signatures, not subclassing ours."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @property
    def name(self) -> str:
        return "hermesish"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self.calls.append(("initialize", (session_id, kwargs)))

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [{"name": "hermesish_recall", "parameters": {"type": "object"}}]

    def handle_tool_call(self, name: str, args: Mapping[str, Any], **kw: Any) -> str:
        return json.dumps({"tool": name, "args": dict(args)})

    def on_turn_start(self, turn_no: int, msg: str, **kw: Any) -> None:
        self.calls.append(("on_turn_start", (turn_no, msg)))

    def sync_turn(self, user: str, asst: str, *, session_id: str = "") -> None:
        self.calls.append(("sync_turn", (user, asst, session_id)))

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        self.calls.append(("on_memory_write", (action, target, content)))

    def on_session_switch(
        self, new_id: str, *, parent_session_id: str | None, reset: bool, rewound: bool
    ) -> None:
        self.calls.append(("on_session_switch", (new_id, parent_session_id, reset, rewound)))


def test_hermes_style_provider_runs_through_the_shim(memstrata_home: Path) -> None:
    """Property names, **kwargs initialize, legacy hooks and no `messages` all work."""
    provider = HermesStyle()
    manager = MemoryManager(memory=FileMemory(memstrata_home))
    assert manager.add_provider(provider)
    manager.initialize_all("s1", platform="cli", chat_id="c9")
    name, (session, kwargs) = provider.calls[0]
    assert (name, session) == ("initialize", "s1")
    assert kwargs["home"] == memstrata_home
    assert kwargs["hermes_home"] == memstrata_home
    assert kwargs["chat_id"] == "c9"
    manager.on_turn_start(1, "hello")
    manager.sync_all("hello", "hi there", messages=[{"role": "user", "content": "hello"}])
    manager.notify_memory_write("add", "user", "Likes tea", origin="cli")
    manager.on_session_switch("s2", parent_session_id="s1", reason="compression")
    assert manager.flush_pending(10)
    assert ("on_turn_start", (1, "hello")) in provider.calls
    assert ("sync_turn", ("hello", "hi there", "s1")) in provider.calls
    assert ("on_memory_write", ("add", "user", "Likes tea")) in provider.calls
    assert ("on_session_switch", ("s2", "s1", False, False)) in provider.calls
    reply = call_provider_tool(manager, "hermesish_recall", '{"q": "tea"}')
    assert reply == {"tool": "hermesish_recall", "args": {"q": "tea"}}
    manager.shutdown_all()


def test_on_memory_write_signature_forms() -> None:
    """Keyword, positional and legacy three-argument on_memory_write all get called right."""
    seen: dict[str, Any] = {}
    meta = MemoryWriteMetadata(origin="curator", old_text="a")

    class Keyword(Minimal):
        def on_memory_write(
            self,
            action: str,
            target: str,
            content: str,
            *,
            metadata: MemoryWriteMetadata | None = None,
        ) -> None:
            seen["keyword"] = metadata

    class Positional:
        name = "positional"

        def on_memory_write(self, action: str, target: str, content: str, meta: Any) -> None:
            seen["positional"] = meta

    class Legacy:
        name = "legacy"

        def on_memory_write(self, action: str, target: str, content: str) -> None:
            seen["legacy"] = (action, target, content)

    for provider in (Keyword(), Positional(), Legacy()):
        ProviderCalls(provider).on_memory_write("replace", "memory", "b", meta)
    assert seen == {"keyword": meta, "positional": meta, "legacy": ("replace", "memory", "b")}


def test_registration_checks_the_shape() -> None:
    """A nameless object or one missing required methods is refused with advice."""

    class Nameless(Minimal):
        name: ClassVar[str] = ""

    with pytest.raises(ProviderError, match="has no name"):
        ProviderCalls.for_provider(Nameless())

    class HalfDuck:
        name = "halfduck"

        def is_available(self) -> bool:
            return True

    with pytest.raises(ProviderError, match="initialize, get_tool_schemas"):
        ProviderCalls.for_provider(HalfDuck())
