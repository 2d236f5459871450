"""Exporting sessions (JSONL, Markdown) and memory files, and the export → import round trip."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.errors import SessionStoreError
from memstrata.memory.files import FileMemory
from memstrata.ops.export import all_session_ids, export_memory, export_sessions
from memstrata.ops.importing import import_source
from memstrata.store.sqlite.store import SessionStore

T0 = 1_767_225_600.0


def _fill(store: SessionStore) -> None:
    """A store exercising every field an export must carry."""
    store.create_session(
        "root",
        source="cli",
        model="gpt-4o-mini",
        model_config={"temperature": 0.3, "nested": {"a": [1, 2]}},
        system_prompt="You are helpful.",
        user_id="u-1",
        started_at=T0,
    )
    store.set_session_title("root", "Deploy fix")
    store.append_messages(
        "root",
        [
            {"role": "user", "content": "Why does deploy fail?", "timestamp": T0 + 1},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"p": "x"}'},
                    }
                ],
                "timestamp": T0 + 2,
                "finish_reason": "tool_calls",
                "token_count": 17,
            },
            {
                "role": "tool",
                "content": "rsync ```weird``` output",
                "tool_name": "read",
                "tool_call_id": "c1",
                "timestamp": T0 + 3,
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Wrong path 修改服务端"}],
                "reasoning": "looked at the script",
                "api_content": "Wrong path (api copy)",
                "timestamp": T0 + 4,
            },
        ],
    )
    ids = [m["id"] for m in store.get_messages("root")]
    store.archive_messages("root", ids[:1], compacted=True)
    store.archive_messages("root", ids[1:2], compacted=False)
    store.update_token_counts(
        "root", input_tokens=100, output_tokens=20, cache_read_tokens=5, estimated_cost_usd=0.01
    )
    store.end_session("root", "compression", ended_at=T0 + 10)
    store.create_session(
        "cont", parent_session_id="root", lineage_kind="compression", started_at=T0 + 11
    )
    store.set_session_title("cont", "Deploy fix #2")
    store.append_message("cont", "user", "continue", timestamp=T0 + 12)
    store.create_session(
        "sub",
        source="subagent",
        parent_session_id="cont",
        lineage_kind="delegate",
        started_at=T0 + 13,
    )
    store.append_message("sub", "assistant", "sub-agent result", timestamp=T0 + 14)
    store.end_session("sub", "delegate_complete", ended_at=T0 + 15)
    store.create_session(
        "fork", parent_session_id="root", lineage_kind="branch", started_at=T0 + 20
    )
    store.append_message("fork", "user", "what if we used scp", timestamp=T0 + 21)
    store.create_session("old", source="telegram", started_at=T0 - 1000)
    store.append_message("old", "user", "archived chat", timestamp=T0 - 999)
    store.set_session_archived("old", True)
    store.create_session("empty", started_at=T0 + 30)


def _snapshot(store: SessionStore) -> dict[str, Any]:
    """Every session row and message (row ids aside), keyed by session id."""
    out: dict[str, Any] = {}
    for sid in sorted(all_session_ids(store)):
        session = store.get_session(sid)
        assert session is not None
        messages = [
            {k: v for k, v in m.items() if k not in ("id", "session_id")}
            for m in store.get_messages(sid, include_inactive=True)
        ]
        out[sid] = {"session": session, "messages": messages}
    return out


def test_jsonl_round_trip_is_lossless(tmp_path: Path) -> None:
    """Exported JSONL imported into a fresh store rebuilds identical sessions and messages."""
    with SessionStore(tmp_path / "a.db") as source:
        _fill(source)
        buffer = io.StringIO()
        assert export_sessions(source, buffer, fmt="jsonl") == 6
        before = _snapshot(source)
    path = tmp_path / "sessions.jsonl"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    with SessionStore(tmp_path / "b.db") as target:
        report = import_source(path, target)
        assert (report.format, report.sessions_added, report.bad) == ("memstrata", 6, [])
        assert _snapshot(target) == before
        assert target.get_compression_tip("root") == "cont"
        assert "sub" in target.get_lineage_ids("root")
        again = import_source(path, target)
        assert (again.sessions_added, again.messages_added, again.sessions_skipped) == (0, 0, 6)
        assert _snapshot(target) == before


def test_export_orders_parents_first_and_selects(tmp_path: Path) -> None:
    """Parents precede children; session_ids picks sessions; an unknown id is refused."""
    with SessionStore(tmp_path / "a.db") as store:
        _fill(store)
        buffer = io.StringIO()
        export_sessions(store, buffer, fmt="jsonl")
        lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
        assert lines[0]["format"] == "memstrata-sessions"
        order = [line["session"]["id"] for line in lines[1:]]
        for child, parent in (("cont", "root"), ("sub", "cont"), ("fork", "root")):
            assert order.index(parent) < order.index(child)
        picked = io.StringIO()
        assert export_sessions(store, picked, fmt="jsonl", session_ids=["fork", "old"]) == 2
        assert [json.loads(x)["session"]["id"] for x in picked.getvalue().splitlines()[1:]] == [
            "old",
            "fork",
        ]
        with pytest.raises(SessionStoreError, match="nope"):
            export_sessions(store, io.StringIO(), fmt="jsonl", session_ids=["nope"])
        with pytest.raises(SessionStoreError, match="jsonl"):
            export_sessions(store, io.StringIO(), fmt="html")  # type: ignore[arg-type]


def test_markdown_export_is_readable(tmp_path: Path) -> None:
    """Markdown has a heading per session, roles, tool calls, and fences that cannot break."""
    with SessionStore(tmp_path / "a.db") as store:
        _fill(store)
        buffer = io.StringIO()
        assert export_sessions(store, buffer, fmt="markdown", session_ids=["root"]) == 1
    text = buffer.getvalue()
    assert text.startswith("# Deploy fix\n")
    assert "## user · 2026-01-01 00:00:01 UTC (archived)" in text
    assert "**tool call** `read`" in text
    assert "## tool result: read" in text
    assert "````\nrsync ```weird``` output\n````" in text
    assert "> looked at the script" in text
    assert "Wrong path 修改服务端" in text


def test_export_memory_writes_both_files(memstrata_home: Path, tmp_path: Path) -> None:
    """export_memory writes MEMORY.md and USER.md in the § format FileMemory reads."""
    memory = FileMemory(memstrata_home)
    memory.add("memory", "Deploy script is ops/deploy.sh")
    memory.add("memory", "Staging is /srv/staging")
    memory.add("user", "Prefers short answers")
    files = export_memory(memory, tmp_path / "out" / "memories")
    assert [p.name for p in files] == ["MEMORY.md", "USER.md"]
    assert files[0].read_text(encoding="utf-8") == (
        "Deploy script is ops/deploy.sh\n§\nStaging is /srv/staging"
    )
    copy = FileMemory(tmp_path / "out")
    assert copy.entries("memory") == memory.entries("memory")
    assert copy.entries("user") == ["Prefers short answers"]


def test_cli_export_then_import_into_fresh_home(
    memstrata_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memstrata export --out DIR` then `memstrata import DIR` in a new home round-trips."""
    with SessionStore(memstrata_home / "state.db") as store:
        _fill(store)
        before = _snapshot(store)
    memory = FileMemory(memstrata_home)
    memory.add("user", "Works in UTC+8")
    memory.add("memory", "Uses PostgreSQL 16 in production")
    runner = CliRunner()
    out = tmp_path / "backup"
    result = runner.invoke(cli, ["export", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    written = json.loads(result.output)
    assert written["sessions"] == 6
    assert {Path(f).name for f in written["files"]} == {
        "sessions.jsonl",
        "sessions.md",
        "MEMORY.md",
        "USER.md",
    }
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.setenv("MEMSTRATA_HOME", str(fresh))
    result = runner.invoke(cli, ["import", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["format"] == "memstrata"
    assert report["sessions"]["added"] == 6 and report["memory"]["added"] == 2
    with SessionStore(fresh / "state.db") as copy:
        assert _snapshot(copy) == before
    restored = FileMemory(fresh)
    assert restored.entries("user") == ["Works in UTC+8"]
    assert restored.entries("memory") == ["Uses PostgreSQL 16 in production"]


def test_cli_export_in_subprocess_markdown_only(memstrata_home: Path, tmp_path: Path) -> None:
    """The real command line writes only sessions.md with --format markdown --no-memory."""
    with SessionStore(memstrata_home / "state.db") as store:
        _fill(store)
    out = tmp_path / "md"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memstrata",
            "export",
            "--out",
            str(out),
            "--format",
            "markdown",
            "--no-memory",
            "--session",
            "fork",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MEMSTRATA_HOME": str(memstrata_home)},
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["sessions.md"]
    assert "what if we used scp" in (out / "sessions.md").read_text(encoding="utf-8")
    assert "Exported 1 session(s)" in result.stdout


def test_docs_python_example_runs(memstrata_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The Python example of docs/import-export.md runs and prints what it claims."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "import-export.md").read_text(
        encoding="utf-8"
    )
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/import-export.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["1 2 []", "1", "1"]
    assert lines[3].endswith("USER.md')]")


def test_cli_export_never_replaces_an_earlier_export_silently(
    memstrata_home: Path, tmp_path: Path
) -> None:
    """A second export into the same folder is refused, naming the files; --overwrite
    replaces them; a folder holding other files is fine."""
    out = tmp_path / "backup"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    runner = CliRunner()
    first = runner.invoke(cli, ["export", "--out", str(out)])
    assert first.exit_code == 0, first.output
    (out / "sessions.jsonl").write_text("the only copy")
    again = runner.invoke(cli, ["export", "--out", str(out), "--format", "jsonl"])
    assert again.exit_code == 1
    assert "sessions.jsonl" in again.output and "--overwrite" in again.output
    assert (out / "sessions.jsonl").read_text() == "the only copy"
    forced = runner.invoke(cli, ["export", "--out", str(out), "--overwrite"])
    assert forced.exit_code == 0, forced.output
    assert (out / "sessions.jsonl").read_text() != "the only copy"
    assert (out / "notes.txt").read_text() == "mine"
