"""session_search traffic stays in the transcript but out of recall and listings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.search.recall import session_search
from memstrata.store.sqlite.store import SessionStore

ANSWER = "The nginx deadlock was fixed by raising worker_connections to 4096."


def seed(store: Any) -> None:
    store.create_session("found", started_at=1_000.0)
    store.append_message("found", "user", "nginx deadlock again under load", timestamp=1_001.0)
    store.append_message("found", "assistant", ANSWER, timestamp=1_002.0)
    store.end_session("found", "user_exit", ended_at=1_003.0)
    store.create_session("searching", started_at=2_000.0)
    store.append_message("searching", "user", "what was that fix?", timestamp=2_001.0)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "session_search",
            "arguments": json.dumps({"query": "nginx deadlock"}),
        },
    }
    store.append_message("searching", "assistant", "", tool_calls=[call], timestamp=2_002.0)
    result = {"success": True, "query": "nginx deadlock", "results": [{"snippet": ANSWER}]}
    store.append_message(
        "searching",
        "tool",
        json.dumps(result),
        tool_call_id="call_1",
        tool_name="session_search",
        timestamp=2_003.0,
    )
    store.append_message("searching", "assistant", "It was worker_connections.", timestamp=2_004.0)
    store.end_session("searching", "user_exit", ended_at=2_005.0)


def test_recall_leaves_out_search_traffic_but_the_transcript_keeps_it(store: Any) -> None:
    seed(store)
    hits = store.search_messages("nginx deadlock")
    assert {h["session_id"] for h in hits} == {"found"}
    assert [h["session_id"] for h in store.search_sessions("nginx deadlock")] == ["found"]
    with_traffic = store.search_messages("nginx deadlock", include_tool_traffic=True)
    assert {h["role"] for h in with_traffic if h["session_id"] == "searching"} == {
        "assistant",
        "tool",
    }
    roles = [m["role"] for m in store.get_messages("searching")]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_session_search_finds_the_conversation_not_the_search(memstrata_home: Path) -> None:
    with SessionStore() as store:
        seed(store)
        result = session_search(store, "nginx deadlock", summarize=False)
    assert [r["session_id"] for r in result["results"]] == ["found"]


def test_the_cli_flag_includes_it(memstrata_home: Path) -> None:
    with SessionStore() as store:
        seed(store)
    plain = CliRunner().invoke(cli, ["sessions", "search", "nginx deadlock", "--json"])
    assert plain.exit_code == 0, plain.output
    assert {h["session_id"] for h in json.loads(plain.output)} == {"found"}
    flagged = CliRunner().invoke(
        cli, ["sessions", "search", "nginx deadlock", "--include-tool-traffic", "--json"]
    )
    assert {h["session_id"] for h in json.loads(flagged.output)} == {"found", "searching"}


def test_forget_deletes_search_traffic_quoting_the_text(store: Any) -> None:
    """Hidden from recall is not hidden from forget: the quote must go too."""
    from memstrata.ops.forget import forget, plan_forget

    seed(store)
    plan = plan_forget(store, query='"worker_connections to 4096"')
    forget(store, plan)
    left = [
        m
        for sid in ("found", "searching")
        for m in store.get_messages(sid, include_inactive=True)
        if "4096" in str(m["content"]) or "4096" in json.dumps(m.get("tool_calls") or [])
    ]
    assert left == []


def test_the_hermes_tool_name_is_hidden_too(store: Any) -> None:
    store.create_session("h", started_at=1.0)
    store.append_message(
        "h",
        "tool",
        json.dumps({"results": [{"snippet": "quokka habitat notes"}]}),
        tool_call_id="c1",
        tool_name="memstrata_session_search",
        timestamp=2.0,
    )
    assert store.search_messages("quokka habitat") == []
    assert len(store.search_messages("quokka habitat", include_tool_traffic=True)) == 1
