"""MemoryManager: registration, tool routing, bounded prefetch, ordered background sync."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers import call_provider_tool
from memstrata.config import Config
from memstrata.errors import ConfigError, ProviderError, ToolArgumentError
from memstrata.memory.files import FileMemory
from memstrata.providers.manager import MemoryManager, normalize_tool_schema
from memstrata.testing import RecordingProvider


def _tool_reply(args: Mapping[str, Any]) -> dict[str, Any]:
    if args.get("fail"):
        raise RuntimeError("backend down")
    return {"success": True, "args": dict(args)}


def Recorder(
    name: str = "recorder",
    *,
    tools: Sequence[dict[str, Any]] = (),
    block: str = "",
    recall: str = "",
    fail: Sequence[str] = (),
) -> RecordingProvider:
    """A recording provider whose tools answer with their name (or fail on ``fail``)."""
    names = [t.get("function", t).get("name") for t in tools]
    return RecordingProvider(
        name,
        tools=tools,
        block=block,
        recall=recall,
        keep=lambda messages: f"{name} keeps {len(messages)}",
        replies={n: lambda args: {**_tool_reply(args), "handled_by": name} for n in names if n},
        fail=fail,
    )


def synced(provider: RecordingProvider) -> list[tuple[str, str]]:
    return [(c["user"], c["assistant"]) for c in provider.calls_to("sync_turn")]


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


@pytest.fixture
def manager(memstrata_home: Path) -> MemoryManager:
    return MemoryManager(memory=FileMemory(memstrata_home), external_prefetch_timeout=0.2)


def test_builtin_is_first_and_cannot_be_removed(manager: MemoryManager) -> None:
    """The built-in provider is registered first and removing it is refused."""
    assert manager.provider_names == ["builtin"]
    assert manager.add_provider(Recorder())
    assert manager.provider_names == ["builtin", "recorder"]
    with pytest.raises(ProviderError, match="cannot be removed"):
        manager.remove_provider("builtin")
    assert manager.remove_provider("recorder").name == "recorder"  # type: ignore[attr-defined]
    with pytest.raises(ProviderError, match="No memory provider named 'recorder'"):
        manager.remove_provider("recorder")


def test_second_external_provider_is_refused_with_a_warning(
    manager: MemoryManager, caplog: pytest.LogCaptureFixture
) -> None:
    """Only one external provider runs by default; a second is refused and logged."""
    assert manager.add_provider(Recorder("first"))
    with caplog.at_level(logging.WARNING, logger="memstrata.providers.manager"):
        assert manager.add_provider(Recorder("second")) is False
    assert "allow_multiple_providers" in caplog.text
    assert manager.provider_names == ["builtin", "first"]


def test_config_allows_several_providers_routed_by_name(memstrata_home: Path) -> None:
    """memory.allow_multiple_providers = true lets several run, each tool to its owner."""
    (memstrata_home / "config.toml").write_text("[memory]\nallow_multiple_providers = true\n")
    manager = MemoryManager(config=Config.load(memstrata_home))
    assert manager.add_provider(Recorder("a", tools=[tool("a_search")]))
    assert manager.add_provider(Recorder("b", tools=[tool("b_search")]))
    assert call_provider_tool(manager, "a_search", {})["handled_by"] == "a"
    assert call_provider_tool(manager, "b_search", {})["handled_by"] == "b"


def test_duplicate_and_reserved_names_are_refused(manager: MemoryManager) -> None:
    """A second provider with a taken name, or named 'builtin', is refused."""
    manager.allow_multiple = True
    assert manager.add_provider(Recorder("x"))
    assert manager.add_provider(Recorder("x")) is False
    assert manager.add_provider(Recorder("builtin")) is False


def test_tool_schemas_are_normalised_and_collisions_dropped(
    manager: MemoryManager, caplog: pytest.LogCaptureFixture
) -> None:
    """Wrapped and bare schemas are accepted, nameless ones and core-name clashes dropped."""
    manager.allow_multiple = True
    bare = {"name": "r_bare", "description": "bare", "parameters": {"type": "object"}}
    first = Recorder(
        "first",
        tools=[tool("r_wrapped"), bare, {"description": "no name"}, tool("memory"), tool("dup")],
    )
    with caplog.at_level(logging.WARNING, logger="memstrata.providers.manager"):
        manager.add_provider(first)
        manager.add_provider(Recorder("second", tools=[tool("dup"), tool("session_search")]))
    assert manager.tool_names() == ["memory", "r_wrapped", "r_bare", "dup"]
    assert "collides with a core tool" in caplog.text
    assert "first registration wins" in caplog.text
    schemas = manager.get_tool_schemas(include_builtin=False)
    assert [s["function"]["name"] for s in schemas] == ["r_wrapped", "r_bare", "dup"]
    assert all(s["type"] == "function" for s in schemas)
    assert call_provider_tool(manager, "dup", {})["handled_by"] == "first"
    assert call_provider_tool(manager, "memory", {"action": "read"})["success"]


def test_normalize_tool_schema() -> None:
    """The OpenAI envelope is unwrapped and a nameless schema gives None."""
    assert normalize_tool_schema(tool("x")) == {"name": "x", "parameters": {"type": "object"}}
    assert normalize_tool_schema({"name": "y"}) == {"name": "y"}
    assert normalize_tool_schema({"type": "function", "function": {"name": ""}}) is None
    assert normalize_tool_schema("nope") is None


def test_tool_call_errors_come_back_as_text(manager: MemoryManager) -> None:
    """Unknown tools, bad JSON and provider exceptions raise from the manager and become
    model-facing error JSON at the toolbox, the one edge."""
    manager.add_provider(Recorder(tools=[tool("rec_search")]))
    unknown = call_provider_tool(manager, "nope", {})
    assert unknown["success"] is False
    assert unknown["error"].startswith("Unknown tool 'nope'. Available tools: memory, rec_search")
    failed = call_provider_tool(manager, "rec_search", {"fail": True})
    assert "backend down" in failed["error"] and "rec_search" in failed["error"]
    bad_json = call_provider_tool(manager, "rec_search", "{not json")
    assert bad_json["error"].startswith("The arguments are not valid JSON")
    with pytest.raises(ToolArgumentError, match="No memory provider handles tool 'nope'"):
        manager.call_tool("nope", {})
    with pytest.raises(ToolArgumentError, match="not valid JSON"):
        manager.call_tool("rec_search", "{not json")


def test_handle_tool_call_is_deprecated_but_still_answers_text(manager: MemoryManager) -> None:
    """The old per-manager dispatcher warns and keeps its never-raising JSON contract."""
    manager.add_provider(Recorder(tools=[tool("rec_search")]))
    with pytest.warns(DeprecationWarning, match="register_provider_tools"):
        text = manager.handle_tool_call("nope", {})
    assert json.loads(text)["error"].startswith("No memory provider handles tool 'nope'")
    with pytest.warns(DeprecationWarning):
        assert json.loads(manager.handle_tool_call("rec_search", {}))["handled_by"] == "recorder"


def test_system_prompt_joins_non_empty_blocks(memstrata_home: Path) -> None:
    """build_system_prompt joins the built-in snapshot and provider blocks by a blank line."""
    memory = FileMemory(memstrata_home)
    memory.add("user", "Name is Ada.")
    memory.load()
    manager = MemoryManager(memory=memory, allow_multiple=True)
    manager.add_provider(Recorder("empty"))
    manager.add_provider(Recorder("facts", block="## Facts\nfacts provider is on\n"))
    prompt = manager.build_system_prompt()
    assert prompt == memory.snapshot().strip() + "\n\n## Facts\nfacts provider is on"


def test_failing_hooks_never_break_the_turn(manager: MemoryManager) -> None:
    """A provider raising in every hook leaves the others and the turn unaffected."""

    manager.allow_multiple = True
    good = Recorder("good", recall="good recall")
    hooks = ["system_prompt_block", "prefetch", "sync_turn", "on_pre_compress", "shutdown"]
    manager.add_provider(Recorder("broken", fail=hooks))
    manager.add_provider(good)
    manager.build_system_prompt()
    assert manager.prefetch_all("q", session_id="s") == "good recall"
    manager.sync_all("u", "a", session_id="s")
    assert manager.on_pre_compress([{}]) == "good keeps 1"
    assert manager.flush_pending(10)
    assert synced(good) == [("u", "a")]
    report = manager.shutdown_all()
    assert len(report.shutdown_errors) == 1
    assert report.shutdown_errors[0].startswith("broken: broken: shutdown failed")


def test_initialize_all_passes_context_and_disables_failures(manager: MemoryManager) -> None:
    """initialize_all hands every provider the home and context; a failing one is removed."""

    manager.allow_multiple = True
    ok = Recorder("ok", tools=[tool("ok_t")])
    manager.add_provider(ok)
    manager.add_provider(Recorder("bad", tools=[tool("bad_t")], fail=["initialize"]))
    assert manager.initialize_all("s1", platform="mcp", chat_id="7") == ["bad"]
    first = ok.calls[0]
    assert first.hook == "initialize"
    assert (first.args["session_id"], first.args["home"], first.args["platform"]) == (
        "s1",
        manager.config.home,
        "mcp",
    )
    assert (first.args["agent_context"], first.args["extra"]) == ("primary", {"chat_id": "7"})
    assert manager.provider_names == ["builtin", "ok"]
    assert not manager.has_tool("bad_t")


class Hanging(RecordingProvider):
    """prefetch blocks until released."""

    def __init__(self) -> None:
        super().__init__("hanging")
        self.release = threading.Event()
        self.entered = 0

    def prefetch(self, query: str, *, session_id: str) -> str:
        self.entered += 1
        self.release.wait(30)
        return f"late answer to {query}"


def test_hanging_prefetch_is_bounded_skipped_then_resumed(manager: MemoryManager) -> None:
    """A hung prefetch costs at most the timeout, is skipped while stuck, and resumes later."""
    hanging = Hanging()
    manager.add_provider(hanging)
    started = time.monotonic()
    assert manager.prefetch_all("turn 1", session_id="s") == ""
    assert time.monotonic() - started < 2.0  # timeout is 0.2 s; generous margin
    assert hanging.entered == 1

    started = time.monotonic()
    assert manager.prefetch_all("turn 2", session_id="s") == ""
    assert time.monotonic() - started < 2.0
    assert hanging.entered == 1  # still stuck: not called again
    assert manager.stuck_prefetches() == ["hanging"]

    hanging.release.set()
    deadline = time.monotonic() + 10
    while manager.stuck_prefetches() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert manager.prefetch_all("turn 3", session_id="s") == "late answer to turn 3"
    assert hanging.entered == 2
    assert manager.shutdown_all().stuck_prefetch == ()


def test_prefetch_results_are_joined(manager: MemoryManager) -> None:
    """Recall from several providers is joined by a blank line, blank answers skipped."""
    manager.allow_multiple = True
    manager.add_provider(Recorder("a", recall="from a\n"))
    manager.add_provider(Recorder("b", recall="   "))
    manager.add_provider(Recorder("c", recall="from c"))
    assert manager.prefetch_all("q", session_id="s") == "from a\n\nfrom c"


def test_a_thousand_synced_turns_arrive_in_order(manager: MemoryManager) -> None:
    """sync_all returns at once and every provider sees turns strictly in submission order."""
    manager.allow_multiple = True
    first, second = Recorder("one"), Recorder("two")
    manager.add_provider(first)
    manager.add_provider(second)
    for n in range(1000):
        manager.sync_all(f"user {n}", f"assistant {n}", session_id="s")
        if n % 100 == 0:
            manager.queue_prefetch_all(f"next {n}", session_id="s")
    assert manager.flush_pending(60)
    expected = [(f"user {n}", f"assistant {n}") for n in range(1000)]
    assert synced(first) == expected
    assert synced(second) == expected
    assert manager.pending() == {"sync": 0, "prefetch": 0, "write": 0}


def test_shutdown_reports_abandoned_work_and_reverses_order(memstrata_home: Path) -> None:
    """A stuck sync is abandoned after the drain timeout, counted, and shutdown still runs."""
    order: list[str] = []
    gate = threading.Event()

    class Stuck(RecordingProvider):
        def sync_turn(self, *args: Any, **kwargs: Any) -> None:
            gate.wait(30)

        def shutdown(self) -> None:
            order.append(self.name)

    class Plain(RecordingProvider):
        def shutdown(self) -> None:
            order.append(self.name)

    manager = MemoryManager(
        memory=FileMemory(memstrata_home), sync_drain_timeout=0.2, allow_multiple=True
    )
    manager.add_provider(Plain("first"))
    manager.add_provider(Stuck("second"))
    for n in range(3):
        manager.sync_all(f"u{n}", f"a{n}", session_id="s")
    manager.queue_prefetch_all("q", session_id="s")
    report = manager.shutdown_all()
    gate.set()
    assert report.drained is False
    assert report.abandoned_syncs == 3
    assert report.abandoned_prefetches == 1
    assert order == ["second", "first"]
    assert manager.shutdown_all() is report
    manager.sync_all("after", "shutdown", session_id="s")  # dropped, not raised
    assert manager.pending()["sync"] <= 3


def test_memory_writes_are_mirrored_with_provenance(manager: MemoryManager) -> None:
    """A batch through the memory tool reaches external providers one operation at a time."""
    recorder = Recorder()
    manager.add_provider(recorder)
    manager.initialize_all("s1")
    call_provider_tool(
        manager, "memory", {"action": "add", "target": "user", "content": "Prefers tea."}
    )
    call_provider_tool(
        manager,
        "memory",
        {
            "target": "memory",
            "operations": [
                {"action": "add", "content": "Uses SQLite."},
                {"action": "add", "content": "Deploys Fridays."},
                {"action": "replace", "old_text": "SQLite", "content": "Uses PostgreSQL."},
            ],
        },
    )
    call_provider_tool(
        manager, "memory", {"action": "remove", "target": "memory", "old_text": "nope"}
    )
    manager.notify_memory_write("remove", "memory", "", origin="cli", old_text="Fridays")
    assert manager.flush_pending(10)
    writes = [(*w, m) for w, m in zip(recorder.writes, recorder.write_metadata, strict=True)]
    summary = [(a, t, c, m.origin if m else None) for a, t, c, m in writes]
    assert summary == [
        ("add", "user", "Prefers tea.", "tool"),
        ("add", "memory", "Uses SQLite.", "tool"),
        ("add", "memory", "Deploys Fridays.", "tool"),
        ("replace", "memory", "Uses PostgreSQL.", "tool"),
        ("remove", "memory", "", "cli"),
    ]
    batch_meta = recorder.write_metadata[1:4]
    assert [(m.batch_index, m.batch_size) for m in batch_meta if m] == [(0, 3), (1, 3), (2, 3)]
    assert batch_meta[2] is not None and batch_meta[2].old_text == "SQLite"
    assert all(m is not None and m.session_id == "s1" for m in recorder.write_metadata)


def test_lifecycle_fan_outs(manager: MemoryManager) -> None:
    """Session switch, delegation and pre-compress reach every external provider."""
    recorder = Recorder()
    manager.add_provider(recorder)
    manager.on_session_switch("s2", parent_session_id="s1", reset=False, reason="compression")
    manager.on_delegation("summarise", "done", child_session_id="child")
    manager.on_session_end([{"role": "user", "content": "bye"}])
    assert recorder.calls_to("on_session_switch") == [
        {"new_session_id": "s2", "parent_session_id": "s1", "reset": False, "reason": "compression"}
    ]
    assert recorder.calls_to("on_delegation") == [
        {"task": "summarise", "result": "done", "child_session_id": "child"}
    ]
    assert manager.session_id == "s2"
    assert manager.on_pre_compress([{}, {}]) == "recorder keeps 2"


def test_timeouts_must_be_positive(memstrata_home: Path) -> None:
    """A zero or negative timeout is refused with the argument named."""
    with pytest.raises(ConfigError, match="external_prefetch_timeout"):
        MemoryManager(memory=FileMemory(memstrata_home), external_prefetch_timeout=0)
    with pytest.raises(ConfigError, match="sync_drain_timeout"):
        MemoryManager(memory=FileMemory(memstrata_home), sync_drain_timeout=-1)
