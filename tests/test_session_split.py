"""Committing a compaction: session split with lineage and titles, in-place mode, hooks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata.compress.compressor import SUMMARY_PREFIX, ContextCompressor, estimate_tokens
from memstrata.compress.split import compact_session, make_session_id, split_session
from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.llm import OpenAIClient, RetryPolicy
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, RecordingProvider, Reply

FACT = "the invoice service deploys from branch release-42"


def switch_recorder() -> RecordingProvider:
    """A provider that records session switches and offers text before compression."""
    return RecordingProvider("switches", keep="User's favourite editor is <helix>")


def switches(recorder: RecordingProvider) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            c["new_session_id"],
            {"parent": c["parent_session_id"], "reset": c["reset"], "reason": c["reason"]},
        )
        for c in recorder.calls_to("on_session_switch")
    ]


class EngineRecorder:
    """A context engine that records session starts."""

    def __init__(self) -> None:
        self.starts: list[tuple[str, str, str | None]] = []

    def on_session_start(
        self, session_id: str, *, boundary_reason: str, parent_session_id: str | None
    ) -> None:
        self.starts.append((session_id, boundary_reason, parent_session_id))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "state.db") as s:
        yield s


@pytest.fixture
def manager() -> Iterator[tuple[MemoryManager, RecordingProvider]]:
    recorder = switch_recorder()
    mgr = MemoryManager()
    mgr.add_provider(recorder)
    yield mgr, recorder
    mgr.shutdown_all()


def turns(n: int, *, fact_at: int = 3) -> list[dict[str, Any]]:
    """``n`` rounds of user ask, tool call, tool result and answer (no system message)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        ask = f"Round {i}: look at the deployment notes and tell me more. " + "filler " * 60
        if i == fact_at:
            ask = f"Note that {FACT}. " + ask
        out += [
            {"role": "user", "content": ask},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"p": f"n{i}"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call{i}", "name": "read_file", "content": "x" * 900},
            {"role": "assistant", "content": f"Round {i} done."},
        ]
    out.append({"role": "user", "content": "What is left to do?"})
    return out


def seeded(store: SessionStore, sid: str = "s1", title: str | None = "Deploy work") -> str:
    store.create_session(sid, source="cli", model="m1", system_prompt="old prompt", title=title)
    store.append_messages(sid, turns(20))
    return sid


def compressed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = ContextCompressor(None, context_window=12_000).compress(
        [{"role": "system", "content": "new prompt"}, *messages]
    )
    assert result.compressed
    return result.messages


def test_split_records_lineage_title_tip_and_hooks(
    store: SessionStore, manager: tuple[MemoryManager, RecordingProvider]
) -> None:
    """The parent ends with 'compression'; the child is linked, titled 'X #2', listed as tip,
    and providers and the context engine hear about it."""
    mgr, recorder = manager
    sid = seeded(store)
    conversation = store.get_messages_as_conversation(sid)
    engine = EngineRecorder()
    out = compressed(conversation)
    child = split_session(store, sid, out, manager=mgr, context_engine=engine)
    parent_row = store.get_session(sid)
    child_row = store.get_session(child)
    assert parent_row is not None and child_row is not None
    assert parent_row["end_reason"] == "compression" and parent_row["ended_at"] is not None
    assert child_row["parent_session_id"] == sid
    assert child_row["lineage_kind"] == "compression"
    assert child_row["ended_at"] is None and child_row["started_at"] >= parent_row["ended_at"]
    assert child_row["model"] == "m1" and child_row["system_prompt"] == "new prompt"
    assert store.get_session_title(child) == "Deploy work #2"
    assert store.get_compression_tip(sid) == child
    listed = store.list_sessions_rich()
    assert [(r["id"], r["root_id"]) for r in listed] == [(child, sid)]
    # The system message lives on the session row; the rest are the child's messages.
    stored = store.get_messages_as_conversation(child)
    assert [m["role"] for m in stored] == [m["role"] for m in out[1:]]
    assert stored[-1]["content"] == "What is left to do?"
    assert any(str(m["content"]).startswith(SUMMARY_PREFIX) for m in stored)
    # The parent keeps every original row, live and searchable.
    assert len(store.get_messages(sid)) == len(conversation)
    assert sid in {h["session_id"] for h in store.search_messages("invoice release-42")}
    assert switches(recorder) == [(child, {"parent": sid, "reset": False, "reason": "compression"})]
    assert mgr.session_id == child
    assert engine.starts == [(child, "compression", sid)]


def test_second_split_numbers_on(store: SessionStore) -> None:
    """Compressing the child again gives 'X #3' and moves the tip."""
    sid = seeded(store)
    child = split_session(store, sid, compressed(store.get_messages_as_conversation(sid)))
    store.append_messages(child, turns(12, fact_at=99))
    grandchild = split_session(store, child, compressed(store.get_messages_as_conversation(child)))
    assert store.get_session_title(grandchild) == "Deploy work #3"
    assert store.get_compression_tip(sid) == grandchild
    assert [r["session_ids"] for r in store.list_sessions_rich()] == [[sid, child, grandchild]]


def test_untitled_parent_gives_untitled_child(store: SessionStore) -> None:
    """Without a parent title the child gets none (and no system message keeps the old one)."""
    sid = seeded(store, title=None)
    out = compressed(store.get_messages_as_conversation(sid))[1:]
    child = split_session(store, sid, out, new_session_id="child-1")
    assert child == "child-1"
    assert store.get_session_title(child) is None
    row = store.get_session(child)
    assert row is not None and row["system_prompt"] == "old prompt"


def test_already_ended_parent_is_refused(store: SessionStore) -> None:
    """A session compressed elsewhere first cannot be split again: no sibling appears."""
    sid = seeded(store)
    out = compressed(store.get_messages_as_conversation(sid))
    first = split_session(store, sid, out)
    with pytest.raises(SessionStoreError, match="already ended"):
        split_session(store, sid, out)
    assert store.get_compression_tip(sid) == first
    assert len(store.list_sessions_rich()) == 1


def test_unknown_session_and_bad_message_are_refused(store: SessionStore) -> None:
    """Unknown ids and malformed messages raise before anything changes."""
    with pytest.raises(SessionNotFoundError):
        split_session(store, "nope", [{"role": "user", "content": "x"}])
    sid = seeded(store)
    with pytest.raises(SessionStoreError, match="unknown keys"):
        split_session(store, sid, [{"role": "user", "content": "x", "colour": "red"}])
    assert store.get_session(sid)["ended_at"] is None  # type: ignore[index]


def test_failure_inside_the_split_rolls_everything_back(store: SessionStore) -> None:
    """When writing the child fails, the parent stays live and no child exists."""
    sid = seeded(store)
    bad = [{"role": "user", "content": "ok"}, {"role": "user", "content": object()}]
    with pytest.raises(SessionStoreError):
        split_session(store, sid, bad, new_session_id="child-x")
    assert store.get_session(sid)["end_reason"] is None  # type: ignore[index]
    assert store.get_session("child-x") is None
    assert store.get_compression_tip(sid) == sid


def test_a_failed_split_leaves_the_parent_live_and_no_child(store: SessionStore) -> None:
    """The split is one write transaction: a row that fails to store undoes the whole split."""
    sid = seeded(store)
    bad = [{"role": "user", "content": object()}]
    with pytest.raises(SessionStoreError):
        split_session(store, sid, bad, new_session_id="child-y")
    assert store.get_session(sid)["ended_at"] is None  # type: ignore[index]
    assert store.get_session("child-y") is None


def test_in_place_keeps_one_id_and_archives_rows(
    store: SessionStore, manager: tuple[MemoryManager, RecordingProvider]
) -> None:
    """In-place compaction keeps the id; old rows become active=0 compacted=1, still found."""
    mgr, recorder = manager
    sid = seeded(store)
    before = store.get_messages(sid)
    out = compressed(store.get_messages_as_conversation(sid))
    engine = EngineRecorder()
    assert split_session(store, sid, out, in_place=True, manager=mgr, context_engine=engine) == sid
    row = store.get_session(sid)
    assert row is not None and row["ended_at"] is None and row["system_prompt"] == "new prompt"
    assert store.get_session_title(sid) == "Deploy work"
    live = store.get_messages(sid)
    assert len(live) == len(out) - 1 and row["message_count"] == len(live)
    archived = [m for m in store.get_messages(sid, include_inactive=True) if not m["active"]]
    assert {m["id"] for m in archived} == {m["id"] for m in before}
    assert all(m["compacted"] == 1 for m in archived)
    hits = store.search_messages("invoice release-42")
    assert any(h["session_id"] == sid for h in hits)
    assert len(store.list_sessions_rich()) == 1
    assert switches(recorder) == [(sid, {"parent": sid, "reset": False, "reason": "compression"})]
    assert engine.starts == [(sid, "compression", sid)]


def test_failing_engine_does_not_undo_the_split(store: SessionStore) -> None:
    """A context engine that raises is logged; the committed split stands."""

    class Broken:
        def on_session_start(self, session_id: str, **kwargs: Any) -> None:
            raise RuntimeError("engine down")

    sid = seeded(store)
    child = split_session(
        store,
        sid,
        compressed(store.get_messages_as_conversation(sid)),
        context_engine=Broken(),  # type: ignore[arg-type]
    )
    assert store.get_compression_tip(sid) == child


def test_make_session_id_shape() -> None:
    """Fresh ids look like YYYYMMDD_HHMMSS_<6 hex> and differ."""
    a, b = make_session_id(0), make_session_id(0)
    assert len(a) == 22 and a[8] == "_" and a[15] == "_" and a != b


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def drive_past_threshold(
    store: SessionStore, compressor: ContextCompressor, sid: str
) -> list[dict[str, Any]]:
    """Append rounds until the conversation reaches the compression threshold."""
    store.create_session(sid, title="Invoices")
    messages: list[dict[str, Any]] = []
    rounds = 0
    while not compressor.should_compress(estimate_tokens(messages)):
        new = turns(1, fact_at=0 if rounds == 2 else 99)
        if rounds != 2:
            new[0]["content"] = new[0]["content"].replace("Round 0", f"Round {rounds}")
        for m in new:
            if m.get("tool_calls"):
                m["tool_calls"][0]["id"] = f"r{rounds}"
            if m["role"] == "tool":
                m["tool_call_id"] = f"r{rounds}"
        store.append_messages(sid, new)
        messages += new
        rounds += 1
    return messages


def test_session_past_threshold_splits_with_llm_summary(
    store: SessionStore, server: FakeLLMServer, manager: tuple[MemoryManager, RecordingProvider]
) -> None:
    """A session driven past the threshold splits; the child is the listed tip and the
    providers' pre-compress text reached the summary model."""
    mgr, recorder = manager
    server.script(Reply.text("## Goal\nShip invoices.\n## Critical Context\n" + FACT))
    with OpenAIClient(
        "m", base_url=server.base_url, api_key="t", retry=RetryPolicy(max_retries=0)
    ) as client:
        compressor = ContextCompressor(client, context_window=12_000)
        messages = drive_past_threshold(store, compressor, "big")
        outcome = compact_session(store, "big", messages, compressor, manager=mgr)
    assert outcome.split and outcome.result.status == "compressed"
    assert outcome.parent_session_id == "big"
    assert store.list_sessions_rich()[0]["id"] == outcome.session_id
    assert store.get_session_title(outcome.session_id) == "Invoices #2"
    prompt = server.chat_requests[0]["messages"][0]["content"]
    assert "\\u003chelix\\u003e" in prompt and "<helix>" not in prompt
    assert switches(recorder)[-1][1]["reason"] == "compression"


def test_failing_summary_model_still_splits_with_facts_kept(
    store: SessionStore, server: FakeLLMServer
) -> None:
    """A failing summary model yields the fallback summary with the facts kept, in the child."""
    server.set_default(Reply.server_error(500))
    with OpenAIClient(
        "m", base_url=server.base_url, api_key="t", retry=RetryPolicy(max_retries=0)
    ) as client:
        compressor = ContextCompressor(client, context_window=12_000)
        messages = drive_past_threshold(store, compressor, "big")
        outcome = compact_session(store, "big", messages, compressor)
    assert outcome.result.status == "fallback" and outcome.split
    child_text = " ".join(str(m["content"]) for m in store.get_messages(outcome.session_id))
    assert FACT in child_text
    assert store.get_compression_tip("big") == outcome.session_id


def test_aborted_compression_leaves_the_session_alone(
    store: SessionStore, server: FakeLLMServer
) -> None:
    """An auth failure aborts: no split, the session stays live and unchanged."""
    server.set_default(Reply.auth_error())
    with OpenAIClient(
        "m", base_url=server.base_url, api_key="t", retry=RetryPolicy(max_retries=0)
    ) as client:
        compressor = ContextCompressor(client, context_window=12_000)
        messages = drive_past_threshold(store, compressor, "big")
        outcome = compact_session(store, "big", messages, compressor, in_place=True)
    assert outcome.result.status == "aborted" and not outcome.split
    assert outcome.session_id == "big"
    assert store.get_session("big")["ended_at"] is None  # type: ignore[index]
    assert len(store.get_messages("big")) == len(messages)


def test_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first example of docs/compression.md runs as written."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "compression.md"
    example = doc.read_text(encoding="utf-8").split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(doc), "exec"), {"__name__": "docs_example"})
    with SessionStore(tmp_path / "demo.db") as store:
        assert store.list_sessions_rich()[0]["title"] == "Blog move #2"
