"""`memstrata sessions`: listing, showing, renaming, deleting, pruning and maintenance."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.store.sqlite.store import SessionStore


@pytest.fixture
def seeded(memstrata_home: Path) -> Path:
    with SessionStore() as store:
        store.create_session("20250101_aaaa", source="cli", title="Kyoto", started_at=1.0)
        store.append_message("20250101_aaaa", "user", "plan a trip to 京都", timestamp=2.0)
        store.end_session("20250101_aaaa", "compression", ended_at=3.0)
        store.create_session(
            "20250101_bbbb",
            parent_session_id="20250101_aaaa",
            lineage_kind="compression",
            started_at=3.0,
            title="Kyoto #2",
        )
        store.append_message("20250101_bbbb", "assistant", "temples first", timestamp=4.0)
        old = time.time() - 200 * 86400
        store.create_session("20240101_old", source="cron", started_at=old)
        store.end_session("20240101_old", "done", ended_at=old)
    return memstrata_home / "state.db"


def _run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)
    return result.exit_code, result.output


def test_list_projects_chains(seeded: Path) -> None:
    """`sessions list --json` shows one row for the compression chain, at its tip."""
    code, out = _run("sessions", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    chain = next(r for r in rows if r["root_id"] == "20250101_aaaa")
    assert chain["id"] == "20250101_bbbb" and chain["message_count"] == 2
    assert chain["preview"] == "plan a trip to 京都"
    code, out = _run("sessions")
    assert code == 0 and "20250101_bbbb" in out and "20250101_aaaa" not in out


def test_show_by_prefix_and_title(seeded: Path) -> None:
    """`sessions show` accepts an id prefix or a title and prints the messages."""
    code, out = _run("sessions", "show", "20250101_a")
    assert code == 0 and "plan a trip to 京都" in out
    code, out = _run("sessions", "show", "Kyoto", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["session"]["id"] == "20250101_bbbb"
    assert data["chain"] == ["20250101_aaaa", "20250101_bbbb"]
    assert [m["content"] for m in data["messages"]] == ["plan a trip to 京都", "temples first"]


def test_show_child_shows_the_whole_chain_as_listed(seeded: Path) -> None:
    """`show "X #2"` shows every part of the chain, as many messages as the listing counts."""
    code, out = _run("sessions", "list", "--json")
    listed = next(r for r in json.loads(out) if r["root_id"] == "20250101_aaaa")
    code, out = _run("sessions", "show", "Kyoto #2")
    assert code == 0
    assert "Conversation of 2 sessions" in out and f"{listed['message_count']} messages" in out
    assert out.index("plan a trip to 京都") < out.index("temples first")
    assert "part 2 of 2" in out
    code, out = _run("sessions", "show", "Kyoto #2", "--session-only")
    assert code == 0 and "Showing session 20250101_bbbb only: part 2 of 2" in out
    assert "plan a trip" not in out and "temples first" in out
    code, out = _run("sessions", "show", "20240101_old", "--json")
    assert json.loads(out)["chain"] == ["20240101_old"]


def test_piped_tables_have_a_header_row(seeded: Path) -> None:
    """A listing piped to another program starts with the column names, tab-separated."""
    code, out = _run("sessions", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split("\t") == [
        "id",
        "title",
        "source",
        "msgs",
        "last active",
        "preview",
    ]
    assert [line.split("\t")[:4] for line in lines[1:]] == [
        ["20240101_old", "", "cron", "0"],
        ["20250101_bbbb", "Kyoto #2", "cli", "2"],
    ]
    code, out = _run("sessions", "stats")
    assert code == 0 and out.splitlines()[0] == "stat\tvalue" and "messages\t2" in out


def test_search_lists_message_hits(seeded: Path) -> None:
    """`sessions search` prints one row per message hit, with ids usable by forget."""
    code, out = _run("sessions", "search", "temples")
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.startswith("message\tsession\trole")
    assert row.split("\t")[1:3] == ["20250101_bbbb", "assistant"]
    code, out = _run("sessions", "search", "京都", "--json")
    assert [h["session_id"] for h in json.loads(out)] == ["20250101_aaaa"]
    code, out = _run("sessions", "search", "temples", "--role", "user", "--json")
    assert json.loads(out) == []
    result = CliRunner().invoke(cli, ["sessions", "search", "x", "--since", "yesterday-ish"])
    assert result.exit_code == 2 and "--since" in result.output


def test_search_corrects_a_typo_once(seeded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sessions search` corrects the query once, then searches the corrected text (it
    searched the typo, the search correcting it, and corrected it again to print it)."""
    import memstrata.store.base as base
    import memstrata.store.rank as rank

    with SessionStore() as store:
        store.append_message("20250101_bbbb", "user", "visit the temples and gardens")
    asked: list[str | None] = []

    def counting(real: Any) -> Any:
        def respell(query: str | None, held: Any) -> Any:
            asked.append(query)
            return real(query, held)

        return respell

    monkeypatch.setattr(base, "respell", counting(base.respell))
    monkeypatch.setattr(rank, "respell", counting(rank.respell))
    result = CliRunner().invoke(cli, ["sessions", "search", "gardnes"])
    assert result.exit_code == 0, result.output
    assert "gardens" in result.stdout
    assert "Searched 'gardens' for 'gardnes'" in result.stderr
    assert asked.count("gardnes") == 1 and asked[-1] == "gardens"


def test_export_writes_the_conversation(seeded: Path, tmp_path: Path) -> None:
    """`sessions export` writes JSONL (all sessions, or a conversation) and Markdown."""
    target = tmp_path / "out.jsonl"
    code, _ = _run("sessions", "export", "Kyoto", "-o", str(target))
    assert code == 0
    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    text = json.dumps(lines, ensure_ascii=False)
    assert "plan a trip to 京都" in text and "temples first" in text
    assert "20240101_old" not in text
    code, out = _run("sessions", "export", "--format", "markdown")
    assert code == 0 and "temples first" in out and "20240101_old" in out
    # An existing file is not replaced unless asked.
    before = target.read_bytes()
    code, out = _run("sessions", "export", "-o", str(target))
    assert code == 1 and "--overwrite" in out and target.read_bytes() == before
    code, _ = _run("sessions", "export", "-o", str(target), "--overwrite")
    assert code == 0 and target.read_bytes() != before


def test_optimize_reports_sizes(seeded: Path) -> None:
    """`sessions optimize` merges, vacuums and analyzes, then reports sizes before/after."""
    with SessionStore() as store:
        for i in range(200):
            store.append_message("20240101_old", "user", f"filler message {i} " * 20)
        store.delete_session("20240101_old")
    code, out = _run("sessions", "optimize", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["steps"] == ["merge full-text indexes", "vacuum", "analyze"]
    db = data["sizes"]["db_bytes"]
    assert db["after"] < db["before"] + data["sizes"]["wal_bytes"]["before"]
    assert data["sizes"]["wal_bytes"]["after"] == 0
    code, out = _run("sessions", "optimize", "--no-vacuum")
    assert code == 0 and out.splitlines()[0] == "file\tbefore\tafter"
    code, out = _run("sessions", "check")
    assert code == 0 and out.startswith("ok")


def test_show_unknown_session_fails_cleanly(seeded: Path) -> None:
    """An unknown reference exits 1 with the library's message, not a traceback."""
    result = CliRunner().invoke(cli, ["sessions", "show", "nope"])
    assert result.exit_code == 1
    assert isinstance(result.exception, Exception)
    assert "No session has the id, id prefix or title 'nope'" in str(result.exception)


def test_rename(seeded: Path) -> None:
    """`sessions rename` sets a sanitised title."""
    code, out = _run("sessions", "rename", "20240101_old", "  Cron\tjob ")
    assert code == 0 and "'Cron job'" in out
    with SessionStore() as store:
        assert store.get_session_title("20240101_old") == "Cron job"


def test_delete_asks_then_deletes(seeded: Path) -> None:
    """`sessions delete` asks for confirmation; --yes deletes without asking."""
    code, _ = _run("sessions", "delete", "20250101_aaaa", input="n\n")
    assert code == 1
    code, out = _run("sessions", "delete", "20250101_aaaa", "--yes", "--json")
    assert code == 0 and json.loads(out) == {"deleted": ["20250101_aaaa"]}
    with SessionStore() as store:
        assert store.get_session("20250101_aaaa") is None
        assert store.get_session("20250101_bbbb") is not None


def test_prune_dry_run_then_for_real(seeded: Path) -> None:
    """`sessions prune --dry-run` lists, `--yes` deletes, live and recent sessions stay."""
    code, out = _run("sessions", "prune", "--dry-run", "--json")
    assert code == 0 and json.loads(out) == {"dry_run": True, "sessions": ["20240101_old"]}
    code, out = _run("sessions", "prune", "--older-than", "90", "--yes")
    assert code == 0 and "Deleted 1 session(s)." in out
    with SessionStore() as store:
        assert store.get_session("20240101_old") is None
        assert store.get_session("20250101_bbbb") is not None


def test_check_reindex_stats(seeded: Path) -> None:
    """`check` exits 1 on a stale index, `reindex` fixes it, `stats` reports counts."""
    conn = sqlite3.connect(seeded)
    conn.execute("DROP TRIGGER messages_fts_cjk_ai")
    conn.commit()
    conn.close()
    code, out = _run("sessions", "check")
    assert code == 1 and "messages_fts_cjk_ai is missing" in out and "reindex" in out
    code, out = _run("sessions", "reindex")
    assert code == 0 and "CJK bigram index: 1 rows" in out and "word index: 2 rows" in out
    code, out = _run("sessions", "reindex", "--json")
    assert code == 0 and json.loads(out)["messages_fts"] == 2
    code, out = _run("sessions", "check", "--json")
    assert code == 0 and json.loads(out)["ok"] is True
    code, out = _run("sessions", "stats", "--json")
    stats = json.loads(out)
    assert code == 0 and stats["sessions"] == 3 and stats["messages"] == 2


@pytest.mark.postgres
def test_sessions_and_search_commands_follow_store_dsn(
    memstrata_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import PG_DSN, fresh_namespace
    from memstrata.store.postgres import PostgresSessionStore

    namespace = fresh_namespace()
    monkeypatch.setenv("MEMSTRATA_STORE__DSN", PG_DSN)
    monkeypatch.setenv("MEMSTRATA_STORE__NAMESPACE", namespace)
    with PostgresSessionStore(PG_DSN, namespace=namespace) as pg:
        try:
            pg.create_session("pg-one", source="cli")
            pg.append_messages("pg-one", [{"role": "user", "content": "walrus migration plan"}])
            code, out = _run("sessions", "list", "--json")
            assert code == 0, out
            assert [row["id"] for row in json.loads(out)] == ["pg-one"]
            code, out = _run("search", "walrus", "--no-summary", "--json")
            assert code == 0, out
            assert json.loads(out)["results"][0]["session_id"] == "pg-one"
            code, out = _run("sessions", "optimize", "--json")
            assert code == 0, out
            code, out = _run("sessions", "reindex")
            assert code == 0 and "word index: 1 rows" in out, out
            assert "CJK bigram index: 0 rows" in out and "messages_fts" not in out
            # Nothing went to a SQLite file in the home folder.
            assert not (memstrata_home / "state.db").exists()
        finally:
            pg.delete_namespace()
