"""Forget: selected content leaves the store, every index, vectors, summaries and the file."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers import make_config
from memstrata.cli import cli
from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.ops.forget import forget, plan_forget
from memstrata.search.recall import session_search
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, Reply

PG_DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
SECRET_WORD = "zanzibarquokka"
SECRET_CODE = "vault-zqxjv-9931"
SECRET_CJK = "秘密暗号龍鳳"
SECRET_TEXT = f"my {SECRET_WORD} password is {SECRET_CODE}, 我的{SECRET_CJK}"
# One query per query class; each finds the secret before forget (checked).
QUERIES = [
    SECRET_WORD,  # one word
    "what was the zanzibarquokka password",  # natural-language question
    f'"{SECRET_WORD} password"',  # phrase
    "zanzibarq*",  # prefix
    f"{SECRET_WORD} AND password",  # boolean
    "ult-zqxjv",  # substring inside an identifier (trigram)
    SECRET_CODE,  # identifier with punctuation
    SECRET_CJK,  # CJK, 3+ characters
    "暗号",  # CJK, 2 characters
]
# Tokens that must be absent from the indexes after forget, queried on each table.
INDEX_PROBES = {
    "messages_fts": SECRET_WORD,
    "messages_fts_trigram": '"zqx"',
    "messages_fts_cjk": '"暗号"',
}


@pytest.fixture
def store(memstrata_home: Path) -> Iterator[SessionStore]:
    with SessionStore(memstrata_home / "state.db") as opened:
        yield opened


def seed(store: SessionStore) -> None:
    """A compressed conversation holding the secret, and one that mentions it once."""
    store.create_session("secret_a", source="cli", started_at=100.0, title="Passwords")
    store.append_messages(
        "secret_a",
        [
            {"role": "user", "content": SECRET_TEXT, "timestamp": 101.0},
            {"role": "assistant", "content": "noted the vault code", "timestamp": 102.0},
        ],
    )
    store.end_session("secret_a", "compression", ended_at=103.0)
    store.create_session(
        "secret_b", parent_session_id="secret_a", lineage_kind="compression", started_at=103.0
    )
    store.append_message("secret_b", "user", f"again: {SECRET_TEXT}", timestamp=104.0)
    store.create_session(
        "secret_sub", parent_session_id="secret_b", lineage_kind="delegate", started_at=104.5
    )
    store.append_message("secret_sub", "tool", "sub-agent looked up the vault", timestamp=105.0)
    store.create_session("keep", source="cli", started_at=200.0)
    store.append_messages(
        "keep",
        [
            {"role": "user", "content": "plan the pelican migration", "timestamp": 201.0},
            {"role": "assistant", "content": f"aside: {SECRET_TEXT}", "timestamp": 202.0},
            {"role": "user", "content": "去京都看寺庙 pelican", "timestamp": 203.0},
        ],
    )


def index_hits(path: Path, table: str, probe: str) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (probe,))
        return [int(r[0]) for r in rows]
    finally:
        conn.close()


def found_anywhere(store: SessionStore, query: str) -> bool:
    hits = store.search_messages(query, include_inactive=True, limit=50)
    # Snippets mark matches with >>> and <<<: drop them before looking for the text.
    text = json.dumps(hits, ensure_ascii=False).replace(">>>", "").replace("<<<", "")
    return SECRET_WORD in text or SECRET_CODE in text or SECRET_CJK in text


def test_forget_by_query_leaves_no_trace(
    store: SessionStore, memstrata_home: Path, shared_server: FakeLLMServer
) -> None:
    """After forget, no query class, index, cached summary or session_search finds the text."""
    seed(store)
    shared_server.reset()
    shared_server.set_default(Reply.text(f"They shared {SECRET_WORD} and {SECRET_CODE}."))
    config = make_config(memstrata_home, shared_server)
    first = session_search(store, SECRET_WORD, config=config)
    assert SECRET_WORD in json.dumps(first)  # the summaries quote it, and are cached
    with store.read_conn() as conn:
        cached = conn.execute("SELECT count(*) FROM summary_cache").fetchone()[0]
    assert cached == 2
    for query in QUERIES:
        assert found_anywhere(store, query), f"control: {query!r} should find the secret"
    for table, probe in INDEX_PROBES.items():
        assert index_hits(store.path, table, probe), table

    plan = plan_forget(store, query=SECRET_WORD)
    assert sorted({m["session_id"] for m in plan.messages}) == ["keep", "secret_a", "secret_b"]
    report = forget(store, plan)

    assert report.messages == 3 and report.sessions == []
    assert report.removed["word_index"] == 3 and report.removed["trigram_index"] == 3
    assert report.removed["cjk_index"] == 3 and report.removed["summaries"] == 2
    for query in QUERIES:
        assert not found_anywhere(store, query), query
    for table, probe in INDEX_PROBES.items():
        assert index_hits(store.path, table, probe) == [], table
    with store.read_conn() as conn:
        summaries = [r[0] for r in conn.execute("SELECT summary FROM summary_cache")]
    assert summaries == []
    shared_server.set_default(Reply.text("A pelican migration plan."))
    again = session_search(store, SECRET_WORD, config=config)
    assert again["results"] == [] and again["count"] == 0
    recent = session_search(store, "", config=config)
    assert SECRET_WORD not in json.dumps(recent, ensure_ascii=False)
    # The rest stays: the other messages, their indexes and the session counters.
    assert store.search_messages('"pelican migration"')[0]["session_id"] == "keep"
    assert store.search_messages("寺庙")[0]["session_id"] == "keep"
    assert store.get_session("keep")["message_count"] == 2  # type: ignore[index]
    assert store.check_indexes() == []


def test_forgotten_bytes_leave_the_file(store: SessionStore) -> None:
    """secure_delete + index merge + WAL truncation: the text is not in state.db at all."""
    seed(store)
    store.optimize()  # checkpoint, so the control below reads the main file
    raw = store.path.read_bytes()
    assert SECRET_CODE.encode() in raw and SECRET_CJK.encode() in raw  # control
    forget(store, plan_forget(store, sessions=["secret_a"], query=SECRET_CODE))
    store.close()
    files = [store.path, Path(f"{store.path}-wal")]
    data = b"".join(f.read_bytes() for f in files if f.exists())
    for secret in (SECRET_WORD, SECRET_CODE, SECRET_CJK, "vault code", "zqxjv"):
        assert secret.encode() not in data, secret
    assert b"pelican migration" in data  # the file still holds what was kept


def test_forget_session_takes_the_whole_conversation(store: SessionStore) -> None:
    """A session id (here a prefix of the tip) brings its compressed parts and sub-agents."""
    seed(store)
    plan = plan_forget(store, sessions=["secret_b"])
    assert plan.session_ids == ["secret_a", "secret_b", "secret_sub"]
    report = forget(store, plan)
    assert sorted(report.sessions) == ["secret_a", "secret_b", "secret_sub"]
    assert report.removed["sessions"] == 3 and report.messages == 4
    assert report.removed["word_index"] == 4
    assert [r["id"] for r in store.list_sessions_rich()] == ["keep"]


def test_session_only_keeps_the_rest_of_the_conversation(store: SessionStore) -> None:
    """whole_conversations=False deletes one session and its sub-agents; the chain head stays."""
    seed(store)
    report = forget(store, plan_forget(store, sessions=["secret_b"], whole_conversations=False))
    assert sorted(report.sessions) == ["secret_b", "secret_sub"] and report.messages == 2
    assert store.get_session("secret_a") is not None


def test_forget_by_time_range_and_ids(store: SessionStore) -> None:
    """--since/--until take the messages in range; message ids take single rows; counters follow."""
    seed(store)
    report = forget(store, plan_forget(store, since=201.5, until=202.5))
    assert report.messages == 1 and report.sessions == []
    assert [m["timestamp"] for m in store.get_messages("keep")] == [201.0, 203.0]
    first = store.get_messages("secret_a")[0]["id"]
    report = forget(store, plan_forget(store, message_ids=[first, 999_999]))
    assert report.messages == 1
    session = store.get_session("secret_a")
    assert session is not None and session["message_count"] == 1
    assert session["last_active"] == 102.0


def test_bad_selections_are_refused(store: SessionStore) -> None:
    """Blank queries, reversed ranges, too-broad queries and unknown sessions raise clearly."""
    seed(store)
    with pytest.raises(SessionStoreError, match="blank"):
        plan_forget(store, query="  ")
    with pytest.raises(SessionStoreError, match="swap"):
        plan_forget(store, since=10.0, until=5.0)
    with pytest.raises(SessionStoreError, match="More than 2 messages match"):
        plan_forget(store, query=SECRET_WORD, max_messages=2)
    with pytest.raises(SessionNotFoundError):
        plan_forget(store, sessions=["nope"])
    with pytest.raises(SessionStoreError, match="integers"):
        store.delete_messages(["1"])  # type: ignore[list-item]
    assert plan_forget(store, query="nonexistentword").is_empty


def test_store_methods(store: SessionStore) -> None:
    """delete_messages recounts; clear_summary_cache drops one conversation's or all rows."""
    seed(store)
    ids = [m["id"] for m in store.get_messages("keep")]
    assert store.delete_messages(ids[:2]) == 2
    assert store.delete_messages([]) == 0
    assert store.get_session("keep")["message_count"] == 1  # type: ignore[index]
    with store.write() as conn:
        for tip in ("keep", "secret_b", "other"):
            conn.execute(
                "INSERT INTO summary_cache (tip_session_id, root_session_id, message_count, "
                "last_message_id, query, summary, created_at) VALUES (?, ?, 1, 1, 'q', 's', 0)",
                (tip, "secret_a" if tip == "secret_b" else tip),
            )
    assert store.clear_summary_cache(["secret_a"]) == 1
    assert store.clear_summary_cache() == 2
    assert store.list_message_ids(since=201.0, until=203.0) == [ids[2]]


def test_vectors_of_forgotten_messages_go(store: SessionStore) -> None:
    """Embedding rows of forgotten messages are deleted and counted."""
    seed(store)
    ids = [m["id"] for m in store.get_messages("keep")]
    with store.write() as conn:
        for mid in ids:
            conn.execute(
                "INSERT INTO message_vectors (model, message_id, dims, vector, created_at) "
                "VALUES ('m', ?, 1, x'0000803f', 0)",
                (mid,),
            )
    report = forget(store, plan_forget(store, message_ids=ids[:2]))
    assert report.removed["vectors"] == 2
    with store.read_conn() as conn:
        left = [r[0] for r in conn.execute("SELECT message_id FROM message_vectors")]
    assert left == [ids[2]]


def _run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["forget", *args], input=input)
    return result.exit_code, result.output


def test_cli_dry_run_confirm_and_json(store: SessionStore) -> None:
    """--dry-run lists and keeps; a "no" keeps; --yes --json forgets and reports counts."""
    seed(store)
    store.close()
    code, out = _run("--query", SECRET_WORD, "--dry-run")
    assert code == 0 and "Would forget 0 session(s)" in out and "message\tsession" in out
    code, out = _run("--query", SECRET_WORD, input="n\n")
    assert code == 1 and "Aborted" in out
    with SessionStore() as reopened:
        assert found_anywhere(reopened, SECRET_WORD)
    code, out = _run("Passwords", "--yes", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["report"]["removed"]["sessions"] == 3
    assert data["report"]["removed"]["messages"] == 4
    code, out = _run("--query", SECRET_WORD, "--yes")
    assert code == 0 and "messages\t1" in out
    code, out = _run("--query", SECRET_WORD, "--yes")
    assert code == 0 and "Nothing matches" in out
    code, out = _run("--since", "203", "--until", "203", "--yes", "--json")
    assert code == 0 and json.loads(out)["report"]["messages"] == 1
    with SessionStore() as reopened:
        assert [m["timestamp"] for m in reopened.get_messages("keep")] == [201.0]
    code, out = _run()
    assert code == 2 and "Say what to forget" in out


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A session store on each backend (a fresh PostgreSQL namespace, deleted afterwards)."""
    if request.param == "sqlite":
        with SessionStore(tmp_path / "other.db") as sqlite_store:
            yield sqlite_store
        return
    from memstrata.store.postgres import PostgresSessionStore

    namespace = f"t-{uuid.uuid4().hex[:16]}"
    with PostgresSessionStore(PG_DSN, namespace=namespace, pool_size=2) as pg_store:
        try:
            yield pg_store
        finally:
            pg_store.delete_namespace()


def test_forget_works_on_every_backend(backend_store: Any) -> None:
    """The same plan/forget code cleans the SQLite and the PostgreSQL store."""
    seed(backend_store)
    report = forget(backend_store, plan_forget(backend_store, query=f'"{SECRET_CODE}"'))
    assert report.messages == 3 and report.removed["messages"] == 3
    for query in (SECRET_WORD, SECRET_CODE, SECRET_CJK):
        assert not found_anywhere(backend_store, query), query
    report = forget(backend_store, plan_forget(backend_store, sessions=["secret_b"]))
    assert sorted(report.sessions) == ["secret_a", "secret_b", "secret_sub"]
    assert report.messages == 2  # "noted the vault code" and the sub-agent's message
    assert [r["id"] for r in backend_store.list_sessions_rich()] == ["keep"]
    assert backend_store.get_session("keep")["message_count"] == 2


def test_forget_clears_cached_query_expansions(
    store: SessionStore, memstrata_home: Path, shared_server: FakeLLMServer
) -> None:
    """A past question quoting the forgotten text must not survive in the expansion cache."""
    seed(store)
    shared_server.reset()
    shared_server.set_default(Reply.text(f'["{SECRET_WORD} plan", "{SECRET_WORD}"]'))
    config = make_config(memstrata_home, shared_server)
    config.values["search"]["expansion"] = True
    session_search(store, f"what was the {SECRET_WORD}?", summarize=False, config=config)
    with store.read_conn() as conn:
        assert conn.execute("SELECT count(*) FROM query_expansions").fetchone()[0] == 1
    report = forget(store, plan_forget(store, query=SECRET_WORD))
    assert report.removed["query_expansions"] == 1
    with store.read_conn() as conn:
        assert conn.execute("SELECT count(*) FROM query_expansions").fetchone()[0] == 0
