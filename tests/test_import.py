"""Importing Hermes homes, ChatGPT and Claude exports and OpenAI JSONL into the session store."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import hermes_venv
from memstrata.cli import cli
from memstrata.errors import ImportDataError
from memstrata.memory.files import FileMemory
from memstrata.ops.export import all_session_ids
from memstrata.ops.importing import detect_format, import_source
from memstrata.store.sqlite.store import SessionStore

DATA = Path(__file__).parent / "data" / "import"
HERMES_HOME = DATA / "hermes_home"
CHATGPT = DATA / "chatgpt_conversations.json"
CLAUDE = DATA / "claude_conversations.json"
OPENAI = DATA / "openai_conversations.jsonl"
# Read at import time: the autouse home fixture clears MEMSTRATA_* variables per test.
HERMES_PYTHON = os.environ.get("MEMSTRATA_TEST_HERMES_PYTHON") or os.environ.get(
    "MEMSTRATA_HERMES_PYTHON"
)
if not HERMES_PYTHON:
    # The Hermes environment the integration tests cache (scripts/hermes_venv.py), if built.
    _found = hermes_venv().find_python()
    HERMES_PYTHON = str(_found) if _found else None


@pytest.fixture
def store(memstrata_home: Path) -> Iterator[SessionStore]:
    with SessionStore(memstrata_home / "state.db") as opened:
        yield opened


def _file_counts(db_path: Path) -> tuple[int, int, dict[str, int]]:
    """Sessions, messages and messages per session, read from the Hermes file itself."""
    conn = sqlite3.connect(f"{db_path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        per = dict(
            conn.execute(
                "SELECT s.id, count(m.id) FROM sessions s "
                "LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id"
            ).fetchall()
        )
    finally:
        conn.close()
    return sessions, messages, per


def _assert_matches_hermes(store: SessionStore, db_path: Path) -> None:
    sessions, messages, per = _file_counts(db_path)
    ids = all_session_ids(store)
    assert len(ids) == sessions
    stored = {sid: len(store.get_messages(sid, include_inactive=True)) for sid in ids}
    assert sum(stored.values()) == messages
    assert stored == {f"hermes-{sid}": n for sid, n in per.items()}


# -- Hermes ------------------------------------------------------------------------------


def test_hermes_fixture_counts_match_the_file(store: SessionStore, memstrata_home: Path) -> None:
    """Every session and message of the committed Hermes 0.19.0 state.db is imported."""
    report = import_source(HERMES_HOME, store, FileMemory(memstrata_home))
    _assert_matches_hermes(store, HERMES_HOME / "state.db")
    assert report.format == "hermes"
    assert report.sessions_added == _file_counts(HERMES_HOME / "state.db")[0]
    assert report.bad == []


def test_hermes_lineage_titles_flags_and_counters(store: SessionStore) -> None:
    """Parent links, titles, archived rows, tool calls, structured content and token
    counters survive the import; lineage falls back to memstrata's rules for Hermes data."""
    import_source(HERMES_HOME, store)
    first, second = "hermes-20260101_000000_aaaa01", "hermes-20260101_001000_aaaa02"
    assert store.get_session(second)["parent_session_id"] == first  # type: ignore[index]
    assert store.get_compression_tip(first) == second
    delegate = "hermes-20260101_001100_bbbb01"
    assert delegate in store.get_lineage_ids(first)
    assert store.get_session_title(first) == "Fix the deploy script"
    head = store.get_session(first)
    assert head is not None
    assert (head["input_tokens"], head["output_tokens"], head["api_call_count"]) == (1200, 80, 2)
    assert head["end_reason"] == "compression"
    messages = store.get_messages(first)
    assert messages[1]["tool_calls"][0]["function"]["name"] == "read_file"
    assert messages[2]["tool_call_id"] == "call_1" and messages[2]["tool_name"] == "read_file"
    assert messages[3]["reasoning"] == "The path lacks the app folder."
    archived = [m for m in store.get_messages(second, include_inactive=True) if not m["active"]]
    assert len(archived) == 2 and all(m["compacted"] for m in archived)
    photo = "hermes-20260102_090000_cccc01"
    assert store.get_session(photo)["archived"] == 1  # type: ignore[index]
    assert isinstance(store.get_messages(photo)[0]["content"], list)
    # The imported text is searchable, CJK included.
    assert {h["session_id"] for h in store.search_messages("服务端")} == {second}


def test_hermes_memory_merged_through_scanner(store: SessionStore, memstrata_home: Path) -> None:
    """MEMORY.md/USER.md entries go through FileMemory: the injection is refused and reported."""
    memory = FileMemory(memstrata_home)
    report = import_source(HERMES_HOME, store, memory)
    assert memory.entries("user") == ["Prefers concise answers", "Works in UTC+8"]
    assert "The deploy script lives in ops/deploy.sh" in memory.entries("memory")
    assert report.memory_added == 4
    assert len(report.memory_refused) == 1
    refused = report.memory_refused[0]
    assert refused.target == "memory" and "Ignore all previous" in refused.entry
    assert "prompt_injection" in refused.reason
    # Each merged entry is in the memory history as an import, undoable like any change.
    changes = memory.history.list()
    assert len(changes) == 4 and {c.who for c in changes} == {"import"}
    assert all("imported from" in c.why for c in changes)


def test_memory_entries_over_budget_are_reported(store: SessionStore, memstrata_home: Path) -> None:
    """An entry that does not fit the budget is listed as refused, the others are merged."""
    memory = FileMemory(memstrata_home, user_char_limit=30)
    report = import_source(HERMES_HOME, store, memory)
    assert memory.entries("user") == ["Prefers concise answers"]
    refused = [r for r in report.memory_refused if r.target == "user"]
    assert [r.entry for r in refused] == ["Works in UTC+8"]
    assert "30" in refused[0].reason


def test_hermes_import_is_idempotent(store: SessionStore, memstrata_home: Path) -> None:
    """A second import of the same Hermes home adds no session, message or memory entry."""
    memory = FileMemory(memstrata_home)
    import_source(HERMES_HOME, store, memory)
    again = import_source(HERMES_HOME, store, memory)
    assert (again.sessions_added, again.sessions_topped_up, again.messages_added) == (0, 0, 0)
    assert again.memory_added == 0 and again.memory_skipped == 4
    assert again.sessions_skipped == _file_counts(HERMES_HOME / "state.db")[0]
    _assert_matches_hermes(store, HERMES_HOME / "state.db")


def test_hermes_source_grew_is_topped_up(store: SessionStore, tmp_path: Path) -> None:
    """Messages added to a Hermes session after the first import are appended, once."""
    home = tmp_path / "hermes"
    shutil.copytree(HERMES_HOME, home)
    import_source(home, store)
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES "
            "('20260102_090000_cccc01', 'user', 'One more question about the rack', 1767312000)"
        )
    conn.close()
    report = import_source(home, store)
    assert (report.sessions_topped_up, report.messages_added) == (1, 1)
    assert store.get_messages("hermes-20260102_090000_cccc01")[-1]["content"] == (
        "One more question about the rack"
    )
    _assert_matches_hermes(store, home / "state.db")


def test_hermes_regenerated_with_hermes_agent(store: SessionStore, tmp_path: Path) -> None:
    """A state.db made now by the installed hermes-agent imports with matching counts."""
    if not HERMES_PYTHON or not Path(HERMES_PYTHON).exists():
        pytest.skip("set MEMSTRATA_HERMES_PYTHON to a Python with hermes-agent 0.19.0")
    out = tmp_path / "hermes_home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["HERMES_HOME"] = str(tmp_path / "hermes_state_home")
    subprocess.run(
        [HERMES_PYTHON, str(DATA / "make_hermes_fixture.py"), str(out)],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    report = import_source(out, store)
    assert report.bad == []
    _assert_matches_hermes(store, out / "state.db")


def test_hermes_truncated_database_is_refused(store: SessionStore, tmp_path: Path) -> None:
    """A truncated state.db raises ImportDataError naming the file, and writes nothing."""
    broken = tmp_path / "state.db"
    broken.write_bytes((HERMES_HOME / "state.db").read_bytes()[:1000])
    with pytest.raises(ImportDataError, match=r"state\.db"):
        import_source(broken, store, fmt="hermes")
    assert all_session_ids(store) == []


def test_hermes_parent_missing_imports_child_as_root(store: SessionStore, tmp_path: Path) -> None:
    """A child whose parent is gone from the source is kept, as a root, with a note."""
    home = tmp_path / "hermes"
    shutil.copytree(HERMES_HOME, home)
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("UPDATE sessions SET parent_session_id = 'gone' WHERE id LIKE '%aaaa02'")
    conn.close()
    report = import_source(home, store)
    child = store.get_session("hermes-20260101_001000_aaaa02")
    assert child is not None and child["parent_session_id"] is None
    assert any("'hermes-gone'" in note for note in report.notes)


# -- ChatGPT -----------------------------------------------------------------------------


def test_chatgpt_follows_current_node(store: SessionStore) -> None:
    """The current branch is imported; hidden and abandoned nodes are not; tools are linked."""
    report = import_source(CHATGPT, store)
    assert (report.format, report.sessions_added, report.bad) == ("chatgpt", 3, [])
    sid = "chatgpt-6770a1b2-0000-4000-8000-000000000001"
    session = store.get_session(sid)
    assert session is not None
    assert session["title"] == "Reverse a list"
    assert session["started_at"] == 1767600000.0
    assert session["system_prompt"] == "I am a backend developer.\n\nAnswer briefly."
    messages = store.get_messages(sid)
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "user", "assistant"]
    texts = " ".join(str(m["content"]) for m in messages)
    assert "abandoned branch" not in texts and "Can you plot it?" not in texts
    call = messages[3]["tool_calls"][0]
    assert call["function"] == {"name": "python", "arguments": "print([1, 2, 3][::-1])"}
    assert messages[3]["reasoning"] == "Planning\nRun a short snippet."
    assert messages[4]["tool_call_id"] == call["id"] and messages[4]["tool_name"] == "python"
    assert "file-service://file-abc" in messages[5]["content"]
    assert [m["timestamp"] for m in messages][:2] == [1767600010.0, 1767600012.0]


def test_chatgpt_archived_and_missing_current_node(store: SessionStore) -> None:
    """is_archived is kept; without current_node the newest leaf's branch is taken."""
    import_source(CHATGPT, store)
    kyoto = store.get_session("chatgpt-6770a1b2-0000-4000-8000-000000000002")
    assert kyoto is not None and kyoto["archived"] == 1
    untitled = "chatgpt-6770a1b2-0000-4000-8000-000000000003"
    assert [m["content"] for m in store.get_messages(untitled)] == [
        "hello",
        "Hi there! How can I help?",
    ]
    assert store.get_session_title(untitled) is None


def test_chatgpt_bad_conversations_are_reported_and_skipped(
    store: SessionStore, tmp_path: Path
) -> None:
    """A conversation without a mapping or id is reported by index; the rest is imported."""
    good = json.loads(CHATGPT.read_text(encoding="utf-8"))
    data = [
        good[0],
        {"title": "no mapping", "id": "x"},
        42,
        {**good[1], "id": None, "conversation_id": None},
        good[2],
    ]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    report = import_source(path, store)
    assert report.sessions_added == 2
    assert [b.location for b in report.bad] == [
        "conversations.json[1]",
        "conversations.json[2]",
        "conversations.json[3]",
    ]
    assert "mapping" in report.bad[0].reason


def test_chatgpt_top_up_when_conversation_continued(store: SessionStore, tmp_path: Path) -> None:
    """A conversation that went on since the last import gets only its new messages."""
    data = json.loads(CHATGPT.read_text(encoding="utf-8"))
    import_source(CHATGPT, store)
    kyoto = data[1]
    kyoto["mapping"]["k2"]["children"] = ["k3"]
    kyoto["mapping"]["k3"] = {
        "id": "k3",
        "parent": "k2",
        "children": [],
        "message": {
            "id": "k3",
            "author": {"role": "user"},
            "create_time": 1767700100.0,
            "content": {"content_type": "text", "parts": ["And where to eat?"]},
            "recipient": "all",
        },
    }
    kyoto["current_node"] = "k3"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    report = import_source(path, store)
    assert (report.sessions_topped_up, report.sessions_skipped, report.messages_added) == (1, 2, 1)
    assert store.get_messages("chatgpt-6770a1b2-0000-4000-8000-000000000002")[-1]["content"] == (
        "And where to eat?"
    )


# -- Claude ------------------------------------------------------------------------------


def test_claude_export(store: SessionStore) -> None:
    """Newest branch, tool use/result, thinking, attachments and ISO timestamps are kept."""
    report = import_source(CLAUDE, store)
    assert (report.format, report.sessions_added, report.bad) == ("claude", 2, [])
    sid = "claude-c0a80001-0000-4000-8000-00000000c001"
    assert store.get_session_title(sid) == "Refactor the parser"
    messages = store.get_messages(sid)
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert "def parse(s):" in messages[0]["content"]
    assert messages[1]["reasoning"] == "The function splits on commas."
    assert messages[1]["tool_calls"][0]["function"] == {
        "name": "run_tests",
        "arguments": '{"path": "tests/"}',
    }
    assert messages[2]["content"] == "3 passed" and messages[2]["tool_call_id"] == "toolu_01"
    assert messages[4]["content"] == "Use the csv module instead"
    assert all("abandoned" not in str(m["content"]) for m in messages)
    assert messages[0]["timestamp"] == 1767607201.0
    old = store.get_messages("claude-c0a80001-0000-4000-8000-00000000c002")
    assert old[0]["content"] == "What's a good name for a cat?\n\n[attachment: cat.jpg]"
    assert store.get_session_title("claude-c0a80001-0000-4000-8000-00000000c002") is None


def test_claude_bad_message_skipped_rest_kept(store: SessionStore, tmp_path: Path) -> None:
    """A message with an unknown sender is reported with its index; its conversation stays."""
    data = json.loads(CLAUDE.read_text(encoding="utf-8"))
    data[1]["chat_messages"].insert(1, {"uuid": "z", "sender": "robot", "text": "beep"})
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    report = import_source(path, store, fmt="claude")
    assert report.sessions_added == 2
    assert [b.location for b in report.bad] == ["conversations.json[1].chat_messages[1]"]
    assert report.bad_messages == 1
    assert report.as_dict()["messages"]["bad"] == 1 and report.as_dict()["sessions"]["bad"] == 0
    assert len(store.get_messages("claude-c0a80001-0000-4000-8000-00000000c002")) == 2


# -- OpenAI JSONL ------------------------------------------------------------------------


def test_openai_jsonl(store: SessionStore) -> None:
    """Lines become sessions; ids come from the line id or a hash of its messages."""
    report = import_source(OPENAI, store)
    assert (report.format, report.sessions_added, report.messages_added) == ("openai", 3, 9)
    messages = store.get_messages("openai-conv-1")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"][0]["id"] == "call_w1"
    assert messages[3]["tool_name"] == "get_weather"
    assert store.get_session_title("openai-conv-1") == "Weather tool"
    assert store.get_session("openai-conv-3")["started_at"] == 1768046400.0  # type: ignore[index]
    hashed = [
        sid for sid in all_session_ids(store) if sid not in ("openai-conv-1", "openai-conv-3")
    ]
    assert len(hashed) == 1 and isinstance(store.get_messages(hashed[0])[0]["content"], list)
    again = import_source(OPENAI, store)
    assert (again.sessions_added, again.messages_added, again.sessions_skipped) == (0, 0, 3)


def test_openai_bad_lines_reported_with_line_numbers(store: SessionStore, tmp_path: Path) -> None:
    """Broken JSON, a non-object and a message without role are reported by line."""
    lines = OPENAI.read_text(encoding="utf-8").splitlines()
    bad = [
        lines[0],
        '{"messages": [{"role": "user", "content": "fine"}, {"content": "no role"}], "id": "x"}',
        "{not json",
        "[1, 2]",
        lines[3],
    ]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(bad) + "\n", encoding="utf-8")
    report = import_source(path, store)
    assert report.sessions_added == 3
    assert [b.location for b in report.bad] == [
        "chats.jsonl:2 messages[1]",
        "chats.jsonl:3",
        "chats.jsonl:4",
    ]
    assert [m["content"] for m in store.get_messages("openai-x")] == ["fine"]


# -- titles, detection, whole-source errors, CLI ------------------------------------------


def test_title_conflict_is_numbered(store: SessionStore) -> None:
    """A title already held by another session is imported as "X #2" and noted."""
    store.create_session("mine")
    store.set_session_title("mine", "Trip to Kyoto")
    report = import_source(CHATGPT, store)
    assert store.get_session_title("chatgpt-6770a1b2-0000-4000-8000-000000000002") == (
        "Trip to Kyoto #2"
    )
    assert any("Trip to Kyoto #2" in note for note in report.notes)


def test_detect_format(tmp_path: Path) -> None:
    """The format is told from the folder layout or the first bytes."""
    assert detect_format(HERMES_HOME) == "hermes"
    assert detect_format(HERMES_HOME / "state.db") == "hermes"
    assert detect_format(CHATGPT) == "chatgpt"
    assert detect_format(CLAUDE) == "claude"
    assert detect_format(OPENAI) == "openai"
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(CLAUDE, folder / "conversations.json")
    assert detect_format(folder) == "claude"
    odd = tmp_path / "notes.txt"
    odd.write_text("just some text", encoding="utf-8")
    with pytest.raises(ImportDataError, match="--format"):
        detect_format(odd)


@pytest.mark.parametrize(
    ("content", "fmt", "match"),
    [
        (b'[{"mapping": ', "chatgpt", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "claude", "not UTF-8"),
        (b'{"mapping": {}}', "claude", "not a Claude export"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "hermes", "cannot"),
        (b'{"format": "memstrata-sessions", "version": 99}\n', "memstrata", "Upgrade"),
    ],
)
def test_unreadable_sources_raise_import_data_error(
    store: SessionStore, tmp_path: Path, content: bytes, fmt: str, match: str
) -> None:
    """A source that cannot be read at all raises ImportDataError saying what to give."""
    path = tmp_path / "source.bin"
    path.write_bytes(content)
    with pytest.raises(ImportDataError, match=match):
        import_source(path, store, fmt=fmt)


def test_missing_source(store: SessionStore, tmp_path: Path) -> None:
    """A path that does not exist is refused with a clear message."""
    with pytest.raises(ImportDataError, match="does not exist"):
        import_source(tmp_path / "nope.json", store)


def test_progress_is_reported(store: SessionStore) -> None:
    """The progress callback sees every record and the total."""
    seen: list[tuple[int, int]] = []
    import_source(CHATGPT, store, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_cli_import_summary_and_json(memstrata_home: Path) -> None:
    """`memstrata import` prints the summary; --json gives the report; twice adds nothing."""
    runner = CliRunner()
    result = runner.invoke(cli, ["import", str(HERMES_HOME)])
    assert result.exit_code == 0, result.output
    assert "sessions\t5\t0\t0\t0" in result.output
    assert "refused memory entry" in result.output
    second = runner.invoke(cli, ["import", str(HERMES_HOME), "--json"])
    assert second.exit_code == 0, second.output
    data = json.loads(second.output[second.output.index("{") :])
    assert data["sessions"] == {"added": 0, "topped_up": 0, "skipped": 5, "bad": 0}
    assert data["messages"]["added"] == 0


def test_cli_import_unreadable_source_exits_1(tmp_path: Path) -> None:
    """An unreadable source ends the command with `Error:` and exit code 1."""
    path = tmp_path / "conversations.json"
    path.write_text("{broken", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "memstrata", "import", str(path), "--format", "chatgpt"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "not valid JSON" in result.stderr


def test_hermes_memories_folder_alone(store: SessionStore, memstrata_home: Path) -> None:
    """Giving only Hermes' memories/ folder merges its entries and imports no session."""
    memory = FileMemory(memstrata_home)
    assert detect_format(HERMES_HOME / "memories") == "hermes"
    report = import_source(HERMES_HOME / "memories", store, memory)
    assert report.sessions_added == 0 and report.memory_added == 4
    assert memory.entries("user") == ["Prefers concise answers", "Works in UTC+8"]


def _export_line(sid: str, parent: str | None, text: str) -> str:
    session = {"id": sid, "parent_session_id": parent, "started_at": T_LINE, "source": "cli"}
    messages = [{"role": "user", "content": text, "timestamp": T_LINE}]
    return json.dumps({"session": session, "messages": messages})


T_LINE = 1_767_225_600.0


def test_children_before_parents_keep_their_links(store: SessionStore, tmp_path: Path) -> None:
    """Records whose parent comes later are held back; a missing grandparent only cuts the
    link it owns, and the chain below keeps its parents."""
    header = json.dumps({"format": "memstrata-sessions", "version": 1})
    lines = [
        header,
        _export_line("c", "b", "grandchild"),
        _export_line("b", "a", "child of a missing session"),
        _export_line("y", "x", "child before its parent"),
        _export_line("x", None, "parent after its child"),
    ]
    path = tmp_path / "sessions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = import_source(path, store)
    assert report.sessions_added == 4 and report.bad == []
    parents = {sid: store.get_session(sid)["parent_session_id"] for sid in "bcxy"}  # type: ignore[index]
    assert parents == {"b": None, "c": "b", "x": None, "y": "x"}
    assert len(report.notes) == 1 and "'a'" in report.notes[0]
