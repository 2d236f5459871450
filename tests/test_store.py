"""SessionStore: sessions, messages, counters, deletion, pruning and metadata."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memstrata.config import Config
from memstrata.errors import (
    AmbiguousSessionError,
    DatabaseBusyError,
    IndexError_,
    SessionNotFoundError,
    SessionStoreError,
    StorageError,
)
from memstrata.store.sqlite.store import SessionStore

FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")

# ``store`` (tests/conftest.py) runs each test on SQLite and on PostgreSQL; tests of
# SQLite internals (PRAGMAs, FTS5 tables, file faults) use ``sqlite_store``.


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "state.db") as s:
        yield s


def _fts_rowids(store: Any, table: str, query: str) -> list[int]:
    """Ids the named index finds for ``query`` (an FTS5 MATCH; on PostgreSQL the same
    question put to its twin: the word tsvector, the CJK bigram tsvector, or trigram
    substrings for the quoted parts of a trigram query)."""
    if isinstance(store, SessionStore):
        with store.read_conn() as conn:
            rows = conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (query,))
            return [r[0] for r in rows]
    from memstrata.store.postgres.messages import quote_lexeme
    from memstrata.store.postgres.schema import INDEXED_TEXT

    if table == "messages_fts":
        pred, params = "tsv @@ phraseto_tsquery('memstrata_english', %s)", [query]
    elif table == "messages_fts_cjk":
        pred, params = "cjk @@ %s::tsquery", [quote_lexeme(query)]
    else:
        parts = re.findall(r'"([^"]+)"', query)
        pred = " AND ".join(f"({INDEXED_TEXT}) ILIKE %s" for _ in parts)
        params = [f"%{p}%" for p in parts]
    with store.connection() as conn:
        rows = conn.execute(
            f"SELECT id FROM messages WHERE namespace = %s AND {pred} ORDER BY id",
            [store.namespace, *params],
        ).fetchall()
        return [r["id"] for r in rows]


def test_default_path_is_in_home(memstrata_home: Path) -> None:
    """Without a path the store lives at $MEMSTRATA_HOME/state.db in WAL mode."""
    with SessionStore() as store:
        assert store.path == memstrata_home / "state.db"
        with store.read_conn() as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_durability_from_config_and_argument(tmp_path: Path, memstrata_home: Path) -> None:
    """store.durability sets synchronous=NORMAL or FULL; the argument overrides config."""
    (memstrata_home / "config.toml").write_text('[store]\ndurability = "full"\n')
    with SessionStore(tmp_path / "a.db") as store:
        assert store.durability == "full"
        with store.write() as conn:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with SessionStore(tmp_path / "b.db", durability="normal") as store, store.write() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_bad_durability_is_refused(tmp_path: Path) -> None:
    """An unknown durability names the valid ones."""
    with pytest.raises(StorageError, match="normal"):
        SessionStore(tmp_path / "x.db", durability="fast")  # type: ignore[arg-type]


def test_create_session_upsert_first_writer_wins(store: Any) -> None:
    """A second create fills only empty columns; the first non-null values stay."""
    store.create_session("s1", source="cli", model="m1", started_at=100.0)
    store.create_session("s1", source="mcp", model="m2", user_id="u", started_at=200.0)
    session = store.get_session("s1")
    assert session is not None
    assert (session["source"], session["model"], session["user_id"]) == ("cli", "m1", "u")
    assert session["started_at"] == 100.0


def test_create_session_validates_lineage(store: Any) -> None:
    """Unknown kinds, kinds without parent, self-parents and missing parents are refused."""
    store.create_session("p")
    with pytest.raises(SessionStoreError, match="lineage_kind"):
        store.create_session("c", parent_session_id="p", lineage_kind="fork")
    with pytest.raises(SessionStoreError, match="parent"):
        store.create_session("c", lineage_kind="branch")
    with pytest.raises(SessionStoreError, match="own parent"):
        store.create_session("c", parent_session_id="c")
    with pytest.raises(SessionNotFoundError, match="create it first"):
        store.create_session("c", parent_session_id="nope")
    assert store.get_session("c") is None


def test_model_config_round_trips(store: Any) -> None:
    """A model_config mapping is stored as JSON and read back as a dict."""
    store.create_session("s", model_config={"temperature": 0.2, "name": "模型"})
    session = store.get_session("s")
    assert session is not None
    assert session["model_config"] == {"temperature": 0.2, "name": "模型"}


def test_end_session_first_reason_wins_and_reopen(store: Any) -> None:
    """end_session keeps the first end_reason; reopen_session clears it."""
    store.create_session("s")
    assert store.end_session("s", "compression") is True
    assert store.end_session("s", "user_exit") is False
    session = store.get_session("s")
    assert session is not None and session["end_reason"] == "compression"
    store.reopen_session("s")
    session = store.get_session("s")
    assert session is not None and session["ended_at"] is None and session["end_reason"] is None
    with pytest.raises(SessionNotFoundError):
        store.end_session("missing", "x")


def test_token_counts_increment(store: Any) -> None:
    """update_token_counts adds to every counter and to the cost."""
    store.create_session("s")
    store.update_token_counts("s", input_tokens=10, output_tokens=5, estimated_cost_usd=0.5)
    store.update_token_counts(
        "s", input_tokens=1, cache_read_tokens=7, reasoning_tokens=2, estimated_cost_usd=0.25
    )
    session = store.get_session("s")
    assert session is not None
    assert session["input_tokens"] == 11 and session["output_tokens"] == 5
    assert session["cache_read_tokens"] == 7 and session["reasoning_tokens"] == 2
    assert session["api_call_count"] == 2
    assert session["estimated_cost_usd"] == pytest.approx(0.75)
    with pytest.raises(SessionStoreError, match="non-negative"):
        store.update_token_counts("s", input_tokens=-1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_tokens": True}, "non-negative integers"),
        ({"api_calls": 1.5}, "non-negative integers"),
        ({"estimated_cost_usd": float("nan")}, "finite non-negative"),
        ({"estimated_cost_usd": float("inf")}, "finite non-negative"),
        ({"estimated_cost_usd": -0.1}, "finite non-negative"),
        ({"estimated_cost_usd": "0.1"}, "must be a number"),
    ],
)
def test_bad_usage_is_refused_alike_and_changes_nothing(
    store: Any, kwargs: dict[str, Any], message: str
) -> None:
    """Both backends refuse the same bad usage values, and the counters stay as they were."""
    store.create_session("s")
    store.update_token_counts("s", input_tokens=3, estimated_cost_usd=0.5)
    with pytest.raises(SessionStoreError, match=message):
        store.update_token_counts("s", **kwargs)
    session = store.get_session("s")
    assert session is not None
    assert session["input_tokens"] == 3 and session["api_call_count"] == 1
    assert session["estimated_cost_usd"] == pytest.approx(0.5)


def test_system_prompt_update(store: Any) -> None:
    """update_system_prompt replaces the stored prompt."""
    store.create_session("s", system_prompt="one")
    store.update_system_prompt("s", "two")
    session = store.get_session("s")
    assert session is not None and session["system_prompt"] == "two"


def test_append_message_needs_existing_session(store: Any) -> None:
    """Appending to an unknown session names create_session instead of a foreign-key error."""
    with pytest.raises(SessionNotFoundError, match="create_session"):
        store.append_message("ghost", "user", "hi")


def test_counters_follow_messages_and_tool_calls(store: Any) -> None:
    """message_count counts messages; tool_call_count grows by the number of calls."""
    store.create_session("s")
    calls = [{"id": f"c{i}", "function": {"name": "f", "arguments": "{}"}} for i in range(3)]
    store.append_message("s", "assistant", None, tool_calls=calls)
    store.append_messages(
        "s",
        [
            {"role": "tool", "content": "r", "tool_call_id": "c0", "name": "f"},
            {"role": "assistant", "content": "done", "tool_calls": calls[:1]},
        ],
    )
    session = store.get_session("s")
    assert session is not None
    assert session["message_count"] == 3 and session["tool_call_count"] == 4
    assert session["last_active"] is not None


def test_structured_content_round_trips(store: Any) -> None:
    """List and dict content come back as they went in; the text is still indexed."""
    store.create_session("s")
    parts = [{"type": "text", "text": "zebra crossing"}, {"type": "image_url", "image_url": {}}]
    mid = store.append_message("s", "user", parts, api_content={"text": "fenced"})
    message = store.get_messages("s")[0]
    assert message["content"] == parts and message["api_content"] == {"text": "fenced"}
    assert _fts_rowids(store, "messages_fts", "zebra") == [mid]


def test_surrogates_are_scrubbed(store: Any) -> None:
    """A lone surrogate from a broken stream is replaced, not a failed write."""
    store.create_session("s")
    store.append_message("s", "assistant", "half \ud83d emoji")
    assert store.get_messages("s")[0]["content"] == "half \ufffd emoji"


def test_bad_messages_are_refused_whole(store: Any) -> None:
    """One bad message in a batch refuses the batch and writes nothing."""
    store.create_session("s")
    with pytest.raises(SessionStoreError, match="unknown keys"):
        store.append_messages("s", [{"role": "user", "content": "a"}, {"role": "u", "x": 1}])
    with pytest.raises(SessionStoreError, match="role"):
        store.append_messages("s", [{"content": "no role"}])
    with pytest.raises(SessionStoreError, match="content"):
        store.append_message("s", "user", 42)  # type: ignore[arg-type]
    with pytest.raises(SessionStoreError, match="tool_calls"):
        store.append_message("s", "assistant", tool_calls="not json")
    assert store.get_messages("s") == []
    session = store.get_session("s")
    assert session is not None and session["message_count"] == 0


def test_messages_as_conversation(store: Any) -> None:
    """get_messages_as_conversation returns OpenAI message dicts in id order."""
    store.create_session("s")
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    store.append_messages(
        "s",
        [
            {"role": "user", "content": "list", "timestamp": 5.0},
            {"role": "assistant", "content": None, "tool_calls": calls, "timestamp": 4.0},
            {"role": "tool", "content": "a b", "tool_call_id": "c1", "tool_name": "ls"},
        ],
    )
    assert store.get_messages_as_conversation("s") == [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "a b", "tool_call_id": "c1", "name": "ls"},
    ]


def test_messages_around_counts_the_rest(store: Any) -> None:
    """get_messages_around returns the window and how many rows lie beyond it."""
    store.create_session("s")
    ids = store.append_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(10)])
    view = store.get_messages_around(ids[5], window=2)
    assert view["session_id"] == "s" and view["anchor"]["id"] == ids[5]
    assert [m["id"] for m in view["messages"]] == ids[3:8]
    assert (view["messages_before"], view["messages_after"]) == (3, 2)
    with pytest.raises(SessionStoreError, match="No message"):
        store.get_messages_around(max(ids) + 1_000_000)


def test_archive_keeps_compacted_rows_searchable(store: Any) -> None:
    """Archived rows leave get_messages but stay in every index; message_count drops."""
    store.create_session("s")
    ids = store.append_messages(
        "s", [{"role": "user", "content": "alpha 苹果手机"}, {"role": "user", "content": "beta"}]
    )
    assert store.archive_messages("s", [ids[0]]) == 1
    assert [m["id"] for m in store.get_messages("s")] == [ids[1]]
    assert [m["id"] for m in store.get_messages("s", include_inactive=True)] == ids
    archived = store.get_messages("s", include_inactive=True)[0]
    assert (archived["active"], archived["compacted"]) == (0, 1)
    assert _fts_rowids(store, "messages_fts", "alpha") == [ids[0]]
    assert _fts_rowids(store, "messages_fts_cjk", "苹果") == [ids[0]]
    session = store.get_session("s")
    assert session is not None and session["message_count"] == 1


def test_archive_and_compact_is_one_swap(store: Any) -> None:
    """archive_and_compact archives every live row and inserts the compacted set."""
    store.create_session("s")
    store.append_messages("s", [{"role": "user", "content": f"old {i}"} for i in range(4)])
    new = store.archive_and_compact("s", [{"role": "user", "content": "summary of old"}])
    assert [m["id"] for m in store.get_messages("s")] == new
    session = store.get_session("s")
    assert session is not None and session["message_count"] == 1
    assert len(store.get_messages("s", include_inactive=True)) == 5


def test_replace_messages_leaves_the_index(store: Any) -> None:
    """replace_messages deletes the old rows from every index and recounts."""
    store.create_session("s")
    calls = [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
    store.append_message("s", "assistant", "gone 消失的话", tool_calls=calls)
    new = store.replace_messages("s", [{"role": "user", "content": "kept"}])
    assert _fts_rowids(store, "messages_fts", "gone") == []
    assert _fts_rowids(store, "messages_fts_cjk", "消失") == []
    assert _fts_rowids(store, "messages_fts", "kept") == new
    session = store.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (1, 0)


def test_delete_session_leaves_no_index_rows(store: Any) -> None:
    """Deleted messages are gone from all three indexes; delegates go, others are orphaned."""
    store.create_session("p")
    store.create_session("d", parent_session_id="p", lineage_kind="delegate")
    store.create_session("dd", parent_session_id="d", lineage_kind="delegate")
    store.create_session("b", parent_session_id="p", lineage_kind="branch")
    store.append_message("p", "user", "uniqueword 独特词语 trigramtarget")
    store.append_message("dd", "user", "deepword")
    kept = store.append_message("b", "user", "branchword")
    assert sorted(store.delete_session("p")) == ["d", "dd", "p"]
    for table, query in (
        ("messages_fts", "uniqueword"),
        ("messages_fts", "deepword"),
        # Without trigram positions a substring is the AND of its trigrams.
        ("messages_fts_trigram", '"gra" AND "amt"'),
        ("messages_fts_cjk", "独特"),
    ):
        assert _fts_rowids(store, table, query) == [], table
    assert _fts_rowids(store, "messages_fts", "branchword") == [kept]
    branch = store.get_session("b")
    assert branch is not None and branch["parent_session_id"] is None
    assert store.get_session("d") is None
    assert store.check_indexes() == []
    with pytest.raises(SessionNotFoundError):
        store.delete_session("p")


def test_prune_only_ended_sessions(store: Any) -> None:
    """prune_sessions deletes sessions that ended before the cutoff, never live ones."""
    old = time.time() - 100 * 86400
    store.create_session("old", source="cron", started_at=old)
    store.end_session("old", "done", ended_at=old + 60)
    store.create_session("old-live", started_at=old)
    store.create_session("recent")
    store.end_session("recent", "done")
    store.create_session("old-cli", source="cli", started_at=old)
    store.end_session("old-cli", "done", ended_at=old + 60)
    assert sorted(store.prune_sessions(older_than=90, dry_run=True)) == ["old", "old-cli"]
    assert store.get_session("old") is not None
    assert store.prune_sessions(older_than=timedelta(days=90), source="cron") == ["old"]
    assert store.prune_sessions(older_than=90) == ["old-cli"]
    assert {s for s in ("old-live", "recent") if store.get_session(s)} == {"old-live", "recent"}
    with pytest.raises(SessionStoreError, match="older_than"):
        store.prune_sessions(older_than=-1)


def test_prune_keeps_the_start_of_a_live_conversation(store: Any) -> None:
    """An old compressed session is kept while its continuation is live, pruned once it is old."""
    old = time.time() - 100 * 86400
    store.create_session("head", started_at=old)
    store.end_session("head", "compression", ended_at=old + 1)
    store.create_session(
        "tip", parent_session_id="head", lineage_kind="compression", started_at=old + 1
    )
    assert store.prune_sessions(older_than=90) == []
    store.end_session("tip", "done", ended_at=old + 2)
    assert store.prune_sessions(older_than=90) == ["head", "tip"]


def test_resolve_session_id(store: Any) -> None:
    """Exact ids and unique prefixes resolve; LIKE wildcards are literal."""
    store.create_session("20240101_aa")
    store.create_session("20240101_ab")
    store.create_session("20240102_zz")
    store.create_session("x%y")
    assert store.resolve_session_id("20240101_aa") == "20240101_aa"
    assert store.resolve_session_id("20240102") == "20240102_zz"
    with pytest.raises(AmbiguousSessionError, match="20240101_a"):
        store.resolve_session_id("20240101_a")
    assert store.resolve_session_id("x%") == "x%y"
    with pytest.raises(SessionNotFoundError):
        store.resolve_session_id("x_")
    with pytest.raises(SessionNotFoundError):
        store.resolve_session_id("%")


def test_meta_round_trip(store: Any) -> None:
    """set_meta overwrites; get_meta returns None for unknown keys."""
    assert store.get_meta("k") is None
    store.set_meta("k", "1")
    store.set_meta("k", "2")
    assert store.get_meta("k") == "2"


def test_write_rolls_back_on_error(store: Any) -> None:
    """An exception inside write() rolls the whole transaction back."""
    store.create_session("s")
    with pytest.raises(RuntimeError), store.write():
        store.set_session_title("s", "x")
        raise RuntimeError("boom")
    assert store.get_session_title("s") is None


def test_nested_write_joins_the_outer_transaction(store: Any) -> None:
    """A write() inside a write() on the same thread is part of the outer transaction."""
    store.create_session("s")
    with pytest.raises(RuntimeError), store.write():
        store.set_meta("inner", "1")
        raise RuntimeError("outer fails")
    assert store.get_meta("inner") is None


def test_busy_database_raises_with_a_fix(tmp_path: Path) -> None:
    """A writer blocked past busy timeout and retries gets DatabaseBusyError naming the fix."""
    db = tmp_path / "state.db"
    cfg = Config.load(environ={"MEMSTRATA_STORE__BUSY_TIMEOUT_MS": "50"})
    with SessionStore(db, config=cfg) as store:
        store.create_session("s")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(DatabaseBusyError, match="busy_timeout_ms"):
                store.append_message("s", "user", "blocked")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        store.append_message("s", "user", "free again")
        assert [m["content"] for m in store.get_messages("s")] == ["free again"]


def test_threads_share_one_store(store: Any) -> None:
    """Eight threads appending through one store object lose nothing."""
    store.create_session("s")
    first = store.append_message("s", "user", "first")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                store.append_message("s", "user", f"t{n} {i}")
                store.get_messages_around(first, 1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    session = store.get_session("s")
    assert session is not None and session["message_count"] == 401


def test_readonly_store_refuses_writes(tmp_path: Path) -> None:
    """A read-only store reads and refuses writes with a clear error."""
    db = tmp_path / "odd ?#%name" / "state.db"
    db.parent.mkdir()
    with SessionStore(db) as rw:
        rw.create_session("s")
    with SessionStore(db, readonly=True) as ro:
        assert ro.get_session("s") is not None
        with pytest.raises(StorageError, match="read-only"):
            ro.create_session("t")
    with pytest.raises(StorageError, match="No session database"):
        SessionStore(tmp_path / "none.db", readonly=True)


def test_closed_store_says_so(tmp_path: Path) -> None:
    """Using a closed store raises StorageError instead of a sqlite error."""
    store = SessionStore(tmp_path / "state.db")
    store.close()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.get_session("s")


def test_missing_trigger_is_reported_on_open(tmp_path: Path) -> None:
    """A dropped index trigger makes the next open raise IndexError_ naming reindex."""
    db = tmp_path / "state.db"
    with SessionStore(db) as store:
        store.create_session("s")
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER messages_fts_ai")
    conn.commit()
    conn.close()
    with pytest.raises(IndexError_, match="memstrata sessions reindex"):
        SessionStore(db)
    with SessionStore(db, verify_indexes=False) as store:
        store.reindex()
    with SessionStore(db) as store:
        mid = store.append_message("s", "user", "healed")
        assert _fts_rowids(store, "messages_fts", "healed") == [mid]


def test_stale_index_is_detected_and_rebuilt(tmp_path: Path) -> None:
    """Rows written with the triggers gone are found by the checks and indexed by reindex."""
    db = tmp_path / "state.db"
    with SessionStore(db) as store:
        store.create_session("s")
        store.append_message("s", "user", "before")
    conn = sqlite3.connect(db)
    for name in ("messages_fts_ai", "messages_fts_trigram_ai", "messages_fts_cjk_ai"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute(
        "INSERT INTO messages(session_id, role, content, timestamp) "
        "VALUES ('s', 'user', 'sneaky 偷偷写入', 1)"
    )
    conn.commit()
    conn.close()
    with SessionStore(db, verify_indexes=False) as store:
        problems = store.check_indexes()
        assert any("messages_fts ends at" in p for p in problems)
        assert any("messages_fts_cjk lacks" in p for p in problems)
        assert not store.integrity_check()["ok"]
        stages: list[str] = []
        counts = store.reindex(lambda stage, done, total: stages.append(stage))
        assert counts == {"messages_fts": 2, "messages_fts_trigram": 2, "messages_fts_cjk": 1}
        assert set(stages) == {"messages_fts", "messages_fts_trigram", "messages_fts_cjk"}
        assert store.check_indexes() == []
        assert _fts_rowids(store, "messages_fts_cjk", "偷偷") == [2]
        store.optimize()
        assert store.integrity_check() == {"ok": True, "sqlite": ["ok"], "indexes": [], "fix": None}


def test_stats_counts(store: Any) -> None:
    """stats() reports sessions, messages and the durability in effect."""
    store.create_session("s", source="cli")
    store.append_message("s", "user", "中文")
    stats = store.stats()
    assert stats["sessions"] == 1 and stats["messages"] == 1
    assert stats["cjk_indexed_messages"] == 1
    assert stats["durability"] == "normal"
    assert stats["sessions_by_source"] == {"cli": 1}
    if isinstance(store, SessionStore):
        assert stats["journal_mode"] == "wal"


def test_config_busy_timeout_is_applied(tmp_path: Path) -> None:
    """store.busy_timeout_ms becomes the connection's busy_timeout."""
    cfg = Config.load(environ={"MEMSTRATA_STORE__BUSY_TIMEOUT_MS": "1234"})
    with SessionStore(tmp_path / "state.db", config=cfg) as store, store.read_conn() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1234


def test_docs_example_runs(memstrata_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first Python example of docs/store.md runs as written."""
    doc = (Path(__file__).parent.parent / "docs" / "store.md").read_text(encoding="utf-8")
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/store.md", "exec"), {})
    out = capsys.readouterr().out
    assert "20250101_130000_ef34ab Kyoto trip #2 3 Plan two days in 京都, temples first" in out


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Opening a non-SQLite file raises StorageError with what to do, and leaves it alone."""
    bogus = tmp_path / "state.db"
    bogus.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StorageError, match="move it aside"):
        SessionStore(bogus)
    assert bogus.read_bytes() == b"not a database at all" * 100


def test_full_disk_is_rolled_back_with_a_fix(sqlite_store: SessionStore) -> None:
    """A write that runs out of space becomes StorageError after a full rollback."""
    store = sqlite_store
    store.create_session("s")
    with store.write() as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StorageError, match=r"rolled back.*disk space"):
        store.append_messages("s", [{"role": "user", "content": "x" * 20_000}] * 5)
    assert store.get_messages("s") == []
    session = store.get_session("s")
    assert session is not None and session["message_count"] == 0


def test_store_creates_the_folder_of_a_new_path(tmp_path: Path) -> None:
    """Opening a store in a folder that does not exist yet creates the folder."""
    path = tmp_path / "fresh-home" / "state.db"
    with SessionStore(path) as store:
        store.create_session("s1", source="cli")
    assert path.exists()


def test_open_time_index_check_reads_one_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index check on open reads one snapshot, so a concurrent commit cannot fake drift."""
    from memstrata.store.sqlite import index as store_index

    SessionStore(tmp_path / "state.db").close()
    seen: list[bool] = []
    real = store_index.quick_check

    def spy(conn: sqlite3.Connection) -> list[str]:
        seen.append(conn.in_transaction)
        return real(conn)

    monkeypatch.setattr(store_index, "quick_check", spy)
    SessionStore(tmp_path / "state.db").close()
    assert seen == [True]
