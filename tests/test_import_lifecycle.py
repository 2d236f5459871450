"""Imported sessions end at their last message (so prune can remove old history); the
OpenAI JSONL format refuses unknown roles and marks its sessions with its own source."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.ops.importing import import_source
from memstrata.store.sqlite.store import SessionStore

DATA = Path(__file__).parent / "data" / "import"
YEAR = 365 * 86400


def old_chatgpt_export(path: Path, when: float) -> Path:
    """A one-conversation ChatGPT export whose messages are a year old."""

    def node(nid: str, parent: str | None, role: str, text: str, at: float) -> dict[str, Any]:
        return {
            "id": nid,
            "parent": parent,
            "children": [],
            "message": {
                "id": nid,
                "author": {"role": role},
                "create_time": at,
                "content": {"content_type": "text", "parts": [text]},
                "recipient": "all",
            },
        }

    conversation = {
        "id": "old-1",
        "conversation_id": "old-1",
        "title": "Kyoto trip",
        "create_time": when,
        "update_time": when + 120,
        "current_node": "b",
        "mapping": {
            "a": node("a", None, "user", "plan a Kyoto trip", when + 10),
            "b": node("b", "a", "assistant", "Start at Fushimi Inari early.", when + 100),
        },
    }
    path.write_text(json.dumps([conversation]), encoding="utf-8")
    return path


def test_chatgpt_sessions_end_at_their_last_message_and_prune(
    memstrata_home: Path, tmp_path: Path
) -> None:
    when = time.time() - YEAR
    export = old_chatgpt_export(tmp_path / "conversations.json", when)
    with SessionStore() as store:
        import_source(export, store)
        (sid,) = [r["id"] for r in store.list_sessions_rich(limit=10)]
        session = store.get_session(sid)
        assert session is not None
        assert session["ended_at"] == when + 100 and session["end_reason"] == "imported"
    result = CliRunner().invoke(
        cli, ["sessions", "prune", "--older-than", "300", "--yes", "--json"]
    )
    assert result.exit_code == 0, result.output
    with SessionStore() as store:
        assert store.get_session(sid) is None


def test_every_export_format_ends_its_sessions(memstrata_home: Path) -> None:
    for name in (
        "chatgpt_conversations.json",
        "claude_conversations.json",
        "openai_conversations.jsonl",
    ):
        with SessionStore(memstrata_home / f"{name}.db") as store:
            import_source(DATA / name, store)
            rows = store.list_sessions_rich(limit=50, include_archived=True)
            assert rows, name
            for row in rows:
                session = store.get_session(row["id"])
                assert session is not None and session["ended_at"] is not None, (name, row["id"])
                times = [
                    m["timestamp"] for m in store.get_messages(row["id"], include_inactive=True)
                ]
                # A session without any time ends when imported, as it started.
                assert session["ended_at"] >= max(times, default=session["started_at"])
                assert session["end_reason"] == "imported"


def test_openai_jsonl_refuses_unknown_roles_and_names_its_source(
    memstrata_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "w1",
                "messages": [
                    {"role": "user", "content": "hello"},
                    {"role": "wizard", "content": "abracadabra"},
                    {"role": "assistant", "content": "hi"},
                ],
            }
        )
        + "\n",
        encoding="utf-8",
    )
    with SessionStore() as store:
        report = import_source(path, store)
        assert [b.location for b in report.bad] == ["chats.jsonl:1 messages[1]"]
        assert "unknown role 'wizard'" in report.bad[0].reason
        assert [m["role"] for m in store.get_messages("openai-w1")] == ["user", "assistant"]
        session = store.get_session("openai-w1")
        assert session is not None and session["source"] == "openai"
