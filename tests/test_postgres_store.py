"""PostgresSessionStore: tenants, search parity with SQLite, indexes, migrations, many clients.

The store's contract (sessions, titles, lineage, messages, counters) runs on both
backends in tests/test_store.py and tests/test_store_lineage.py; this module covers what
is PostgreSQL's own. The concurrency tests run their clients as real processes (``WORKER``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from helpers import tokens_sql  # noqa: E402
from memstrata.errors import (  # noqa: E402
    NamespaceError,
    SchemaError,
    SessionNotFoundError,
    SessionStoreError,
    StorageError,
    TitleConflictError,
)
from memstrata.query.compile import compile_query  # noqa: E402
from memstrata.query.filters import make_filters  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore, ranking, schema  # noqa: E402
from memstrata.store.postgres import search as pg_search  # noqa: E402
from memstrata.store.postgres.messages import cjk_vector  # noqa: E402
from memstrata.store.sqlite.store import SessionStore  # noqa: E402

pytestmark = pytest.mark.postgres

DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[1]


def _namespace() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


def counted_calls(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[str]:
    """The names of the ``pg_search`` functions ``names`` in the order they are called
    from now on (each still does its work)."""
    calls: list[str] = []
    for name in names:
        original = getattr(pg_search, name)

        def counted(*args: Any, __f: Any = original, __n: str = name, **kw: Any) -> Any:
            calls.append(__n)
            return __f(*args, **kw)

        monkeypatch.setattr(pg_search, name, counted)
    return calls


def small_walks(monkeypatch: pytest.MonkeyPatch, *, max_walk: int) -> None:
    """The search's sample, common-term bound and walk scaled down to a test tenant's
    few hundred rows: a term in 5 rows is common, walks step 10 rows at a time."""
    monkeypatch.setattr(pg_search, "SAMPLE_ROWS", 40)
    monkeypatch.setattr(pg_search, "COMMON_DF", 5)
    monkeypatch.setattr(pg_search, "WALK_WINDOW", 10)
    monkeypatch.setattr(pg_search, "MAX_WALK", max_walk)


def ranked(
    store: PostgresSessionStore, query: str, *, k: int
) -> tuple[list[tuple[int, float]], list[str]]:
    """The ranked candidates of ``query`` (id, score) as the search collects them, in a
    snapshot, and the statements it sent."""
    sent: list[str] = []
    with store.connection(snapshot=True) as conn:
        execute = conn.execute

        def spy(sql: Any, *args: Any, **kw: Any) -> Any:
            sent.append(str(sql))
            return execute(sql, *args, **kw)

        conn.execute = spy  # type: ignore[method-assign, assignment]
        try:
            found = pg_search.collect_candidates(
                conn, store.namespace, compile_query(query), make_filters(), k=k, order="rank"
            )
        finally:
            del conn.execute
    return [(c.id, c.score) for c in found], sent


@pytest.fixture
def pg() -> Iterator[PostgresSessionStore]:
    with PostgresSessionStore(DSN, namespace=_namespace(), pool_size=2) as store:
        try:
            yield store
        finally:
            store.delete_namespace()


@pytest.fixture
def other() -> Iterator[PostgresSessionStore]:
    """A second tenant on the same database."""
    with PostgresSessionStore(DSN, namespace=_namespace(), pool_size=2) as store:
        try:
            yield store
        finally:
            store.delete_namespace()


@pytest.fixture
def private_dsn() -> Iterator[str]:
    """A DSN whose tables live in a fresh schema of their own, dropped afterwards.

    For tests that migrate from scratch or damage the schema (drop an index), which must
    never touch the tables other tests share.
    """
    name = f"mst_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    dsn = psycopg.conninfo.make_conninfo(DSN, options=f"-csearch_path={name},public")
    try:
        with PostgresSessionStore(dsn, namespace="probe") as store, store.connection() as conn:
            # These tests drop indexes: they must never run on the shared tables.
            row = conn.execute(
                "SELECT current_schema() AS s, n.nspname AS home FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'messages'::regclass"
            ).fetchone()
            assert row == {"s": name, "home": name}
        yield dsn
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


# -- tenants -------------------------------------------------------------------------


def test_tenants_cannot_read_search_update_or_delete_each_other(
    pg: PostgresSessionStore, other: PostgresSessionStore
) -> None:
    """Every way in from another namespace finds nothing, changes nothing, deletes nothing."""
    pg.create_session("secret", title="Payroll")
    ids = pg.append_messages("secret", [{"role": "user", "content": "salary xylophone 工资单"}])
    pg.set_meta("k", "v")

    assert other.get_session("secret") is None
    assert other.get_messages("secret") == []
    assert other.get_session_title("secret") is None
    assert other.resolve_session_by_title("Payroll") is None
    assert other.list_sessions_rich() == []
    assert other.get_meta("k") is None
    assert other.stats()["messages"] == 0
    for query in ("xylophone", "工资", "salary OR xylophone", "xylo*"):
        assert other.search_messages(query) == [], query
        assert pg.search_messages(query), query
    with pytest.raises(SessionStoreError, match="No message"):
        other.get_messages_around(ids[0])
    for call in (
        lambda: other.append_message("secret", "user", "injected"),
        lambda: other.end_session("secret", "hijacked"),
        lambda: other.set_session_title("secret", "Mine"),
        lambda: other.update_token_counts("secret", input_tokens=5),
        lambda: other.archive_messages("secret"),
        lambda: other.replace_messages("secret", []),
        lambda: other.delete_session("secret"),
        lambda: other.resolve_session_id("sec"),
        lambda: other.get_compression_tip("secret"),
        lambda: other.create_session("child", parent_session_id="secret"),
    ):
        with pytest.raises(SessionNotFoundError):
            call()
    assert other.delete_messages(ids) == 0
    assert other.prune_sessions(older_than=0) == []
    assert other.clear_summary_cache() == 0
    assert other.delete_namespace()["messages"] == 0

    session = pg.get_session("secret")
    assert session is not None and session["ended_at"] is None
    assert session["title"] == "Payroll" and session["input_tokens"] == 0
    assert [m["content"] for m in pg.get_messages("secret")] == ["salary xylophone 工资单"]
    assert pg.get_meta("k") == "v"


def test_tenants_may_use_the_same_ids_and_titles(
    pg: PostgresSessionStore, other: PostgresSessionStore
) -> None:
    """Session ids and titles are unique per namespace, not across the database."""
    for store, word in ((pg, "alpha"), (other, "beta")):
        store.create_session("s1", title="Daily")
        store.append_message("s1", "user", word)
    assert [m["content"] for m in pg.get_messages("s1")] == ["alpha"]
    assert [m["content"] for m in other.get_messages("s1")] == ["beta"]
    pg.create_session("s2")
    with pytest.raises(TitleConflictError, match="Daily #2"):
        pg.set_session_title("s2", "Daily")
    assert pg.delete_session("s1") == ["s1"]
    assert [m["content"] for m in other.get_messages("s1")] == ["beta"]


@pytest.mark.parametrize("bad", ["", " ", "a b", "-lead", "x" * 129, "naïve", 7])
def test_bad_namespace_is_refused(bad: Any) -> None:
    """A namespace that is empty, too long or odd is refused before connecting."""
    with pytest.raises(NamespaceError, match="namespace"):
        PostgresSessionStore(DSN, namespace=bad)


def test_namespace_and_dsn_come_from_config(memstrata_home: Path) -> None:
    """store.dsn and store.namespace are read from config.toml when not passed."""
    (memstrata_home / "config.toml").write_text(
        f'[store]\ndsn = "{DSN}"\nnamespace = "team-7"\npool_size = 1\n'
    )
    with PostgresSessionStore() as store:
        assert store.namespace == "team-7"
        store.create_session("probe")
        store.delete_namespace()


def test_a_value_past_a_server_limit_is_bad_input_not_a_server_down(
    pg: PostgresSessionStore,
) -> None:
    """A statement the server refuses for a limit (here a lexeme past 2,046 bytes) is the
    store error that says to shorten the value, cut short: not "check the server is up"
    with the whole value quoted."""
    limit = pytest.raises(SessionStoreError, match="past one of its limits")
    with limit as info, pg._db.connection() as conn:
        conn.execute("SELECT %s::tsvector", ["x" * 3000])
    said = str(info.value)
    assert "Shorten" in said and "is up" not in said and len(said) < 400, said


def test_a_row_written_without_its_word_vector_gets_a_bounded_one(private_dsn: str) -> None:
    """m008: the trigger that makes the word vector of a row written without one (a
    migration from SQLite, a writer of an older version) reads the message's first
    WORD_INDEX_CHARS characters, so a message of megabytes is written, not refused."""
    text = " ".join(f"w{i}" for i in range(400_000))  # 2.9 MB of distinct words
    with PostgresSessionStore(private_dsn, namespace="big") as store:
        store.create_session("s1")
        with store.connection() as conn:
            row = conn.execute(
                "INSERT INTO messages (namespace, session_id, role, content, timestamp) "
                "VALUES ('big', 's1', 'user', %s, 1.0) "
                "RETURNING tsv_tokens, length(tsv) AS lexemes",
                (text,),
            ).fetchone()
    assert row is not None and 0 < row["lexemes"] < 400_000 and row["tsv_tokens"] > 0


def test_missing_dsn_and_unreachable_server_say_what_to_do(memstrata_home: Path) -> None:
    """No DSN names the config key; a server that is not there fails fast with the fix."""
    with pytest.raises(SessionStoreError, match=r"store\.dsn"):
        PostgresSessionStore()
    started = time.monotonic()
    with pytest.raises(StorageError, match="Cannot connect"):
        PostgresSessionStore("postgresql://127.0.0.1:1/test", connect_timeout=1)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"pool_size": 0}, "pool_size"), ({"durability": "fast"}, "normal")]
)
def test_bad_pool_size_and_durability_are_refused(kwargs: dict[str, Any], match: str) -> None:
    """A pool of no connections or an unknown durability names what is accepted."""
    with pytest.raises(SessionStoreError, match=match):
        PostgresSessionStore(DSN, namespace="x", **kwargs)


def test_closed_store_says_so(pg: PostgresSessionStore) -> None:
    """Using a closed store raises StorageError naming what to do."""
    store = PostgresSessionStore(DSN, namespace=pg.namespace)
    store.close()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.get_session("s")


@pytest.mark.parametrize(("mode", "setting"), [("normal", "off"), ("full", "on")])
def test_durability_sets_synchronous_commit(mode: str, setting: str) -> None:
    """ "normal" lets the server group commits; "full" waits for each to reach disk."""
    with PostgresSessionStore(DSN, namespace=_namespace(), durability=mode) as store:  # type: ignore[arg-type]
        assert store.durability == mode
        with store.connection() as conn:
            row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row["synchronous_commit"] == setting


def test_nul_characters_and_structured_content_round_trip(pg: PostgresSessionStore) -> None:
    """PostgreSQL text cannot hold NUL: a stray one becomes U+FFFD, structured content stays."""
    pg.create_session("s")
    parts = [{"type": "text", "text": "zebra\u0000crossing"}]
    pg.append_messages(
        "s", [{"role": "user", "content": "a\x00b"}, {"role": "user", "content": parts}]
    )
    contents = [m["content"] for m in pg.get_messages("s")]
    assert contents == ["a\ufffdb", parts]
    assert [h["snippet"] for h in pg.search_messages("zebra")] == [">>>zebra<<<\x00crossing"]


def test_delete_messages_and_clear_summary_cache(pg: PostgresSessionStore) -> None:
    """delete_messages recounts the sessions; clear_summary_cache drops by tip or root."""
    pg.create_session("s")
    calls = [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
    ids = pg.append_messages(
        "s",
        [
            {"role": "user", "content": "keep"},
            {"role": "assistant", "content": "drop me", "tool_calls": calls},
        ],
    )
    with pytest.raises(SessionStoreError, match="integers"):
        pg.delete_messages(["1"])  # type: ignore[list-item]
    assert pg.delete_messages([ids[1], ids[1] + 10**9]) == 1
    session = pg.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (1, 0)
    assert pg.search_messages("drop") == []
    with pg.connection() as conn:
        for tip in ("s", "t"):
            conn.execute(
                "INSERT INTO summary_cache (namespace, tip_session_id, root_session_id, "
                "message_count, last_message_id, query, summary, created_at) "
                "VALUES (%s, %s, 'r', 1, 1, 'q', 'x', 0)",
                (pg.namespace, tip),
            )
    assert pg.clear_summary_cache(["s"]) == 1
    assert pg.clear_summary_cache() == 1


# -- search ----------------------------------------------------------------------------

# Messages loaded into both backends; each query below must find the same ones.
PARITY_CORPUS = [
    ("s1", "cli", "user", "We deployed the payment service on Friday"),
    ("s1", "cli", "assistant", "The deploy of payment-service failed: timeout in getUserById"),
    ("s1", "cli", "tool", "src/app.config.tsx line 42: unexpected token"),
    ("s2", "telegram", "user", "修改youer服务端的配置，然后重启"),
    ("s2", "telegram", "assistant", "服务端已经重启，苹果手机可以连接了"),
    ("s2", "telegram", "user", "苹果和香蕉"),
    ("s3", "mcp", "user", "Caroline painted a sunset; she loves painting landscapes"),
    ("s3", "mcp", "assistant", "Painting is relaxing. The sunset colours were vivid."),
    ("s4", "cli", "user", "to be or not to be, that is the question"),
    ("s4", "cli", "assistant", "Rust borrow checker errors: cannot borrow as mutable"),
]
PARITY_QUERIES = [
    "payment",
    "what did Caroline paint?",
    "deploying",
    '"payment service"',
    "paint*",
    "payment AND friday",
    "payment NOT friday",
    "sunset OR borrow",
    "getUser",
    "config.ts",
    "服务端",
    "苹果",
    "苹",
    "youer",
    '"to be or not"',
    "NOT",
    "",
    "the",
    "borrow* AND NOT mutable",
]


@pytest.fixture
def parity(tmp_path: Path, pg: PostgresSessionStore) -> tuple[SessionStore, PostgresSessionStore]:
    lite = SessionStore(tmp_path / "state.db")
    for store in (lite, pg):
        for n, (sid, source, role, content) in enumerate(PARITY_CORPUS):
            store.create_session(sid, source=source, started_at=1000.0)
            store.append_message(sid, role, content, timestamp=2000.0 + n)
    return lite, pg


@pytest.mark.parametrize("query", PARITY_QUERIES)
def test_search_finds_what_sqlite_finds(
    parity: tuple[SessionStore, PostgresSessionStore], query: str
) -> None:
    """Natural language, phrases, prefixes, booleans, substrings and CJK match the same rows."""
    lite, pg = parity

    def found(store: Any) -> list[str]:
        return sorted(h["snippet"] for h in store.search_messages(query, limit=50))

    expected = found(lite)
    assert found(pg) == expected
    lite.close()


def test_search_hits_have_the_sqlite_shape(
    parity: tuple[SessionStore, PostgresSessionStore],
) -> None:
    """Hits carry the same keys, snippets, neighbours and best-first scores."""
    lite, pg = parity
    (lite_hit, *_), (pg_hit, *_) = (s.search_messages("sunset painting") for s in (lite, pg))
    assert set(pg_hit) == set(lite_hit)
    for key in ("role", "snippet", "source", "timestamp", "session_started", "context"):
        assert pg_hit[key] == lite_hit[key], key
    assert pg_hit["score"] == 1.0
    lite.close()


def test_search_filters_sorting_and_paging(
    parity: tuple[SessionStore, PostgresSessionStore],
) -> None:
    """role, source, exclusions, time range, sort and paging behave as on SQLite."""
    lite, pg = parity
    cases: list[dict[str, Any]] = [
        {"role_filter": "assistant"},
        {"role_filter": ["user", "tool"]},
        {"source_filter": "telegram"},
        {"exclude_sources": ["telegram", "mcp"]},
        {"exclude_session_ids": "s1,s3"},
        {"since": 2003.0, "until": 2007.0},
        {"sort": "newest"},
        {"sort": "oldest", "limit": 2, "offset": 1},
    ]
    query = "payment OR 服务端 OR sunset OR borrow OR painting"
    for kwargs in cases:
        lite_hits = lite.search_messages(query, **kwargs)
        pg_hits = pg.search_messages(query, **kwargs)
        key = "sort" in kwargs
        got = [h["snippet"] for h in pg_hits]
        want = [h["snippet"] for h in lite_hits]
        assert (got if key else sorted(got)) == (want if key else sorted(want)), kwargs
    for bad in ({"sort": "sideways"}, {"limit": 0}, {"offset": -1}, {"since": "monday"}):
        with pytest.raises(SessionStoreError):
            pg.search_messages("payment", **bad)
    lite.close()


def test_rewound_rows_are_hidden_and_compacted_rows_found(pg: PostgresSessionStore) -> None:
    """archive(compacted=False) hides rows from search; compaction keeps them findable."""
    pg.create_session("s")
    ids = pg.append_messages(
        "s", [{"role": "user", "content": "rewound walrus"}, {"role": "user", "content": "kept"}]
    )
    pg.archive_messages("s", [ids[0]], compacted=False)
    assert pg.search_messages("walrus") == []
    assert [h["id"] for h in pg.search_messages("walrus", include_inactive=True)] == [ids[0]]
    pg.archive_messages("s", [ids[1]], compacted=True)
    assert [h["id"] for h in pg.search_messages("kept")] == [ids[1]]


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("苹果", "idx_messages_ns_cjk"),
        ("苹", "idx_messages_ns_cjk"),
        ("服务端", "idx_messages_ns_cjk"),
        ("youer", "idx_messages_ns_cjk"),
        ("getUser", "idx_messages_ns_trgm"),
        ("payment", "idx_messages_ns_tsv"),
    ],
)
def test_every_query_class_can_use_an_index(
    pg: PostgresSessionStore, query: str, index: str
) -> None:
    """Each query class compiles to a predicate its GIN index serves (never a LIKE scan).

    With sequential scans priced out, the term predicate alone must plan as an index
    scan. (With the tenant filter the planner may rightly prefer the namespace index
    for a small tenant; what matters is that a large one has an index for the term.)
    """
    compiled = compile_query(query)
    assert compiled.tree is not None
    pred, params = pg_search.tree_sql(compiled.tree)
    with pg.connection() as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute(f"EXPLAIN SELECT m.id FROM messages m WHERE {pred}", params).fetchall()
    plan = "\n".join(r["QUERY PLAN"] for r in rows)
    assert index in plan and "Seq Scan" not in plan, plan


def test_a_window_of_a_tenant_beside_others_is_read_on_its_own_id_index() -> None:
    """A walk's window of a keyed tenant (a tenant beside others, whose ids interleave
    with theirs) reads the tenant's (namespace, id) range; an unkeyed one (most of its
    table) the primary key's id range. The choice is read from the filter's first
    clause, so this holds filter_sql and the window to the same form."""
    keyed, _ = pg_search.filter_sql("t", make_filters(), keyed=True)
    span, values = pg_search._window_range(keyed, "t")
    assert "m.namespace = ANY(%s)" in span and "ORDER BY m.namespace DESC" in span, span
    assert values == [["t"]]
    unkeyed, _ = pg_search.filter_sql("t", make_filters(), keyed=False)
    span, values = pg_search._window_range(unkeyed, "t")
    assert "namespace" not in span and span.endswith("ORDER BY m.id DESC"), span
    assert values == []


def _newest_both_ways(
    store: PostgresSessionStore, query: str, k: int
) -> tuple[list[int], list[int] | None, list[int]]:
    """(bitmap plan, newest-first walk or None when it gives up, plain SQL truth)."""
    compiled = compile_query(query)
    assert compiled.tree is not None
    pred, pred_params = pg_search.tree_sql(compiled.tree)
    where, params = pg_search.filter_sql(store.namespace, make_filters())
    ns = store.namespace
    with store.connection() as conn:
        total = conn.execute(
            "SELECT count(*) AS n FROM messages WHERE namespace = %s", (ns,)
        ).fetchone()
        assert total is not None
        n = int(total["n"])
        args = [*params, *pred_params]
        bitmap = pg_search._newest_ids(
            conn,
            ns,
            f"{where} AND {pred}",
            args,
            k,
            total=n,
            selective=True,
            carried=pg_search.Carried(),
        )
        walked = pg_search._walk_newest(
            conn, ns, f"{where} AND {pred}", args, k, n, carried=pg_search.Carried()
        )
        truth = [
            int(r["id"])
            for r in conn.execute(
                f"SELECT m.id FROM messages m WHERE {where} AND {pred} ORDER BY m.id DESC LIMIT %s",
                [*args, k],
            ).fetchall()
        ]
    return bitmap, walked, truth


def test_newest_matches_are_the_tenants_own_by_either_plan(
    pg: PostgresSessionStore, other: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Common terms: the newest-first walk and the bitmap plan give the same, newest rows.

    Another tenant appends newer rows holding the same word, which a walk of the whole
    table's ids would meet first; small windows make the walk take several steps.
    """
    monkeypatch.setattr(pg_search, "WALK_WINDOW", 16)
    pg.create_session("a")
    other.create_session("b")
    mine: list[int] = []
    for chunk in range(10):
        # Interleaved: each window's id range also holds the other tenant's rows.
        mine += pg.append_messages(
            "a",
            [
                {"role": "user", "content": f"walrus note {i}" if i % 3 == 0 else f"other {i}"}
                for i in range(chunk * 30, chunk * 30 + 30)
            ],
        )
        other.append_messages("b", [{"role": "user", "content": "walrus again"}] * 10)
    other.append_messages("b", [{"role": "user", "content": "walrus again"}] * 100)
    expected = sorted((i for n, i in enumerate(mine) if n % 3 == 0), reverse=True)[:25]
    bitmap, walked, truth = _newest_both_ways(pg, "walrus", 25)
    assert bitmap == walked == truth == expected
    # NOT and AND go the same way; search results keep coming from this tenant only.
    bitmap, walked, truth = _newest_both_ways(pg, "walrus NOT note", 25)
    assert bitmap == truth == [] and walked in (None, [])
    hits = pg.search_messages("walrus", limit=20)
    assert {h["session_id"] for h in hits} == {"a"} and len(hits) == 20


def test_sparse_windows_find_the_rows_the_walk_tests(
    pg: PostgresSessionStore, other: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where matches are sparse, the walk's later windows are read through the indexes:
    the same rows as testing each row of them, for an OR, an AND and a NOT, beside
    another tenant's newer rows holding the same words; plain index scans are back on
    for the statements that follow."""
    monkeypatch.setattr(pg_search, "WALK_WINDOW", 16)
    pg.create_session("a")
    other.create_session("b")
    for chunk in range(12):
        pg.append_messages(
            "a",
            [
                {
                    "role": "user",
                    "content": ("osprey kite" if i % 40 == 0 else "osprey")
                    if i % 20 == 0
                    else ("kite" if i % 25 == 0 else f"filler {i}"),
                }
                for i in range(chunk * 50, chunk * 50 + 50)
            ],
        )
        other.append_messages("b", [{"role": "user", "content": "osprey kite"}] * 10)
    sparse_reads = counted_calls(monkeypatch, "_sparse_window")
    where, params = pg_search.filter_sql(pg.namespace, make_filters())
    terms = [pg_search.term_sql(t) for t in compile_query("osprey kite").tree.terms()]  # type: ignore[union-attr]
    for query in ("osprey OR kite", "osprey AND kite", "osprey NOT kite"):
        compiled = compile_query(query)
        assert compiled.tree is not None
        pred, pred_params = pg_search.tree_sql(compiled.tree)
        if query != "osprey NOT kite":
            # As the ranked search hands them over: the terms joined, unbracketed.
            pred = f" {query.split()[1]} ".join(t.pred for t in terms)
            pred_params = [p for t in terms for p in t.params]
        tested = f"{where} AND {pg_search._tested(pred)}"
        args = [*params, *pred_params]
        with pg.connection() as conn:
            n = 600
            plain = pg_search._walk_newest(
                conn, pg.namespace, tested, args, 40, n, give_up=False, carried=pg_search.Carried()
            )
            before = len(sparse_reads)
            hinted = pg_search._walk_newest(
                conn,
                pg.namespace,
                tested,
                args,
                40,
                n,
                give_up=False,
                carried=pg_search.Carried(),
                # Windows this small never pay for a GIN scan (see the next test):
                # its postings taken as free.
                hint=pg_search.Hint(pred, pred_params, n, 0.0, pg_search.GIN_ENTRY_COST),
            )
            assert len(sparse_reads) > before, query  # the sparse path was taken
            truth = [
                int(r["id"])
                for r in conn.execute(
                    f"SELECT m.id FROM messages m WHERE {where} AND ({pred}) "
                    "ORDER BY m.id DESC LIMIT 40",
                    args,
                ).fetchall()
            ]
            setting = conn.execute("SELECT current_setting('enable_indexscan') AS v").fetchone()
        assert hinted == plain == truth and truth, query
        assert setting is not None and setting["v"] == "on"


def test_a_window_is_read_through_the_indexes_only_where_that_costs_less() -> None:
    """The GIN scan reads its lexemes' postings in the whole table: a window of 8,000
    rows of a term in 0.9 % of rows goes through the indexes in a table of 100k
    messages, not in one of 2M (ten tenants beside it); a term in 0.1 % does at 1M, a
    phrase of two lexemes in 0.3 % each does not; a dense term never does."""

    def sparse(found: int, scanned: int, window: int, table: int, postings: float) -> bool:
        hint = pg_search.Hint("", (), table, postings, pg_search.GIN_ENTRY_COST)
        return pg_search._sparse(found, scanned, window, hint)

    assert sparse(18, 2000, 8000, 100_000, 0.009)
    assert not sparse(18, 2000, 8000, 2_000_000, 0.009)
    assert sparse(2, 2000, 8000, 1_000_000, 0.001)
    assert not sparse(2, 2000, 8000, 1_000_000, 0.006)
    assert not sparse(400, 2000, 8000, 100_000, 0.2)
    assert not sparse(0, 0, 2000, 100_000, 0.0)  # nothing read yet: no rate
    # Without the tenant's key (a tenant that is most of the table) postings cost less:
    # the phrase above goes through the indexes at 1M.
    free = pg_search.Hint("", (), 1_000_000, 0.006, pg_search.GIN_FREE_COST)
    assert pg_search._sparse(2, 2000, 8000, free)


def test_a_tenant_that_is_most_of_the_table_reads_gin_without_its_key(
    private_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the table's statistics say a tenant holds most of its rows, its searches
    scan the GIN indexes without the tenant's key; a small tenant beside it keeps the
    key. Either way each finds only its own rows."""
    keyed: dict[str, bool] = {}
    probe = pg_search._probe

    def spy(conn: Any, ns: str, *args: Any, **kwargs: Any) -> Any:
        keyed[ns] = kwargs["keyed"]
        return probe(conn, ns, *args, **kwargs)

    monkeypatch.setattr(pg_search, "_probe", spy)
    with (
        PostgresSessionStore(private_dsn, namespace="big") as big,
        PostgresSessionStore(private_dsn, namespace="small") as small,
    ):
        big.create_session("a")
        small.create_session("b")
        mine = big.append_messages(
            "a", [{"role": "user", "content": f"walrus note {i}"} for i in range(90)]
        )
        theirs = small.append_messages(
            "b", [{"role": "user", "content": f"walrus again {i}"} for i in range(10)]
        )
        with big.connection() as conn:
            conn.execute("ANALYZE messages")
        found: dict[str, set[int]] = {}
        for store, query in ((big, "walrus note"), (small, "walrus again")):
            with store.connection() as conn:
                # The candidates themselves (the hits are read by tenant again).
                cands = pg_search.collect_candidates(
                    conn, store.namespace, compile_query(query), make_filters(), k=100, order="rank"
                )
            found[store.namespace] = {c.id for c in cands}
            assert {h["id"] for h in store.search_messages(query, limit=100)} == found[
                store.namespace
            ]
    assert keyed == {"big": False, "small": True}
    assert found == {"big": set(mine), "small": set(theirs)}


def test_walk_gives_up_when_matches_are_rare_and_old(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matches only among the oldest rows: the walk stops early and the bitmap answers."""
    monkeypatch.setattr(pg_search, "WALK_WINDOW", 16)
    pg.create_session("a")
    old = pg.append_messages("a", [{"role": "user", "content": "narwhal tusk"}] * 3)
    pg.append_messages("a", [{"role": "user", "content": f"filler {i}"} for i in range(200)])
    bitmap, walked, truth = _newest_both_ways(pg, "narwhal", 10)
    assert walked is None
    assert bitmap == truth == sorted(old, reverse=True)
    # The full search still finds them (through the bitmap plan).
    assert sorted(h["id"] for h in pg.search_messages("narwhal")) == sorted(old)


def test_the_sample_keeps_common_terms_out_of_gin_and_bounds_their_walk(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term common in the tenant's newest rows is never probed through its index; a
    rare one is, whole; the walk of a common term stops at MAX_WALK rows."""
    small_walks(monkeypatch, max_walk=60)
    pg.create_session("a")
    old = pg.append_messages("a", [{"role": "user", "content": "gannet old"}] * 30)
    rare = pg.append_messages("a", [{"role": "user", "content": "puffin rare"}] * 3)
    pg.append_messages(
        "a",
        [{"role": "user", "content": "gannet new" if i % 4 else f"filler {i}"} for i in range(100)],
    )
    tree = compile_query("gannet puffin").tree
    assert tree is not None
    terms = [pg_search.term_sql(t, substrings=False) for t in tree.positive_terms()]
    with pg.connection() as conn:
        _, total, _ = ranking.sample(conn, pg.namespace)
        probed = pg_search.Probed(total)
        probed.add(conn, pg.namespace, [a for t in terms for a in t.arms])
    gannet, puffin = terms
    # Its word arm is not probed (its CJK arm, for Latin glued to CJK, is rare: probed).
    word_arm = gannet.arms[0]
    assert word_arm[0].startswith("m.tsv @@")
    assert probed.common(gannet) and not probed.probed(word_arm)
    assert probed.rows(puffin) == set(rare) and probed.df(puffin) == 3
    assert probed.total == 133 and probed.sampled.rows == 40
    # The walk reads the newest 60 rows at most: the oldest "gannet" rows stay unseen.
    hits = {h["id"] for h in pg.search_messages("gannet", limit=100)}
    assert hits and not hits & set(old)
    assert {h["id"] for h in pg.search_messages("puffin", limit=10)} == set(rare)


def test_one_pass_finds_what_the_and_walk_then_the_or_walk_find(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Common terms whose rows holding them all cannot fill the page, and which no one
    index ANDs (a Latin word beside Chinese ones; here the CJK index's AND is taken
    away, see the next test): the AND walk and the OR walk in one pass give the
    candidates the two walks give one after the other, in fewer statements; so do
    terms whose rows holding some of them are plenty (its windows then test the AND)."""
    small_walks(monkeypatch, max_walk=250)
    monkeypatch.setattr(pg_search, "_words_anded", lambda terms: None)
    pg.create_session("a")
    texts = []
    for i in range(300):
        if i % 10 == 0:
            texts.append(f"序列化失败了 {i}")  # every term
        elif i % 7 == 0:
            texts.append(f"时间序列的图 {i}")  # one bigram of the word only
        else:
            texts.append(f"其他内容 {i}")
    pg.append_messages("a", [{"role": "user", "content": t} for t in texts])
    windows = counted_calls(monkeypatch, "_window", "_window_both", "_sparse_window")

    def candidates(query: str) -> list[tuple[int, float]]:
        with pg.connection(snapshot=True) as conn:
            found = pg_search.collect_candidates(
                conn, pg.namespace, compile_query(query), make_filters(), k=100, order="rank"
            )
        return [(c.id, round(c.score, 9)) for c in found]

    for query, one_pass in (
        ("序列化", ["_window_both", "_window_both"]),
        ("序列化 内容", ["_window_both", "_window"]),
    ):
        windows.clear()
        together = candidates(query)
        passes = list(windows)
        with monkeypatch.context() as apart:
            apart.setattr(pg_search, "_one_pass", lambda *a: False)
            windows.clear()
            assert candidates(query) == together, query
            assert len(windows) > len(passes), (query, windows, passes)
        assert passes == one_pass, query
        assert len(together) > 25, query  # the 25 newest rows holding every term, and more


def beyond_the_walk(
    pg: PostgresSessionStore, texts: list[str], query: str, holding: str
) -> tuple[set[int], set[int]]:
    """``texts`` written in one session of a tenant whose walks stop at 60 rows: the ids
    of the candidates of ``query`` (k 30) and of the rows whose text is LIKE ``holding``."""
    pg.create_session("a")
    pg.append_messages("a", [{"role": "user", "content": t} for t in texts])
    with pg.connection(snapshot=True) as conn:
        found = pg_search.collect_candidates(
            conn, pg.namespace, compile_query(query), make_filters(), k=30, order="rank"
        )
        rows = conn.execute(
            "SELECT id FROM messages WHERE namespace = %s AND content LIKE %s",
            (pg.namespace, holding),
        ).fetchall()
    return {c.id for c in found}, {int(r["id"]) for r in rows}


def test_the_rows_holding_every_chinese_term_come_through_the_cjk_index(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Chinese word's bigrams, common each, ANDed in one scan of the CJK index: the
    newest rows holding all of them, wherever they are, not only among the rows a walk
    reads (MAX_WALK); before, the walk stopped there and filled the page with rows
    holding one bigram only."""
    small_walks(monkeypatch, max_walk=60)
    # The twenty oldest rows hold both words (not side by side: no row holds the whole
    # term); 280 newer rows hold one each. Every one of the twenty is a candidate.
    texts = [
        f"集群的文档 {i}" if i < 20 else f"集群 {i}" if i % 2 else f"文档 {i}" for i in range(300)
    ]
    found, both = beyond_the_walk(pg, texts, "集群文档", "%集群的文档%")
    assert both <= found


def test_a_common_term_older_than_the_walk_is_read_through_its_index(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One common term whose rows are all older than the walk reaches (MAX_WALK): the
    walk sees it too sparse and gives up for one scan of its rows, which finds them;
    before, the walk was the only plan for it and the page stayed empty."""
    small_walks(monkeypatch, max_walk=60)
    texts = [f"迁移计划 {i}" if i < 20 else f"其他内容 {i}" for i in range(300)]
    found, older = beyond_the_walk(pg, texts, "迁移", "迁移计划%")
    assert found == older


def test_rows_found_with_their_scoring_columns_score_as_rows_read_again(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walks' windows (tested row by row and through the indexes) and the bitmap
    reads return their matches with the columns that score them: the candidates and
    their scores are those of the matches read again by id, in fewer statements."""
    small_walks(monkeypatch, max_walk=250)
    pg.create_session("a")
    texts = []
    for i in range(300):
        words = [
            "osprey" if i % 3 == 0 else "",
            "kite" if i % 5 == 0 else "",
            "tern" * (i % 11 == 0),
        ]
        texts.append(
            " ".join(w for w in words if w) + f" filler {i} 鱼鹰{'风筝' if i % 4 == 0 else ''}"
        )
    pg.append_messages("a", [{"role": "user", "content": t} for t in texts])
    reads = counted_calls(monkeypatch, "_window", "_sparse_window", "_newest_ids")

    def candidates(query: str) -> tuple[list[tuple[int, float]], int]:
        found, sent = ranked(pg, query, k=60)
        return found, len(sent)

    for query in ("osprey kite", "osprey AND kite", "osprey NOT kite", "kite OR tern", "鱼鹰"):
        candidates(query)  # the term and sample caches filled
        reads.clear()
        carried, fewer = candidates(query)
        assert reads, query
        with monkeypatch.context() as apart:
            # Nothing kept: every candidate read again by id, as before.
            apart.setattr(
                pg_search.Carried,
                "keep",
                lambda self, rows, *extra: [int(r["id"]) for r in rows if r["id"] is not None],
            )
            again, more = candidates(query)
        assert carried == again and len(carried) >= 20, query
        assert fewer <= more, query
    # Every way of finding rows was taken by one query or another.
    monkeypatch.setattr(pg_search, "_sparse", lambda *a: True)
    reads.clear()
    carried, _ = candidates("osprey kite")
    assert "_sparse_window" in reads


def test_terms_unseen_in_the_newest_rows_are_probed_without_the_sample(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terms the ranking sample (the tenant's newest rows) holds nowhere are probed
    through their indexes alone, one statement without the sample; one that is common
    all the same (in older rows) is probed again with the sample. Either way the
    candidates are those the sample's way gives; a tenant too large for the ranking
    sample to tell (see _unseen) always takes the sample's way."""
    monkeypatch.setattr(pg_search, "COMMON_DF", 50)
    pg.create_session("a")
    pg.append_messages(
        "a", [{"role": "user", "content": f"albatross sighting {i}"} for i in range(100)]
    )
    pg.append_messages(
        "a",
        [
            {"role": "user", "content": f"petrel nest {i}" if i in (3, 40, 77) else f"filler {i}"}
            for i in range(600)
        ],
    )

    def search(query: str) -> tuple[list[tuple[int, float]], list[str]]:
        return ranked(pg, query, k=100)

    def probes(sent: list[str]) -> list[str]:
        return [
            "sample" if q.startswith("WITH s AS") else "indexes"
            for q in sent
            if q.startswith(("WITH s AS MATERIALIZED", "WITH p AS MATERIALIZED (SELECT ARRAY("))
        ]

    for query, way in (
        ("petrel", ["indexes"]),
        ("albatross", ["indexes", "sample"]),  # common in older rows: probed again
        ("albatross petrel", ["indexes", "sample"]),
    ):
        search(query)  # the term and sample caches filled
        found, sent = search(query)
        assert probes(sent) == way, (query, sent)
        with monkeypatch.context() as sampled:
            sampled.setattr(pg_search, "_unseen", lambda *a: False)
            again, sent = search(query)
        assert probes(sent) == ["sample"], query
        assert found == again and found, query
    # The tenant's size makes the ranking sample's 500 rows too few to tell.
    monkeypatch.setattr(pg_search, "COMMON_DF", 1)
    _, sent = search("petrel")
    assert probes(sent) == ["sample"]


def test_gin_pending_lists_take_the_size_m007_gives_them(pg: PostgresSessionStore) -> None:
    """m007: every GIN search index takes rows into a 4 MB pending list (merged by the
    store's writers, see test_postgres_statistics)."""
    with pg.connection() as conn:
        rows = conn.execute(
            "SELECT c.relname AS name, c.reloptions AS opts FROM pg_class c "
            "JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_am a ON a.oid = c.relam "
            "WHERE i.indrelid = 'messages'::regclass AND a.amname = 'gin'"
        ).fetchall()
    assert {r["name"] for r in rows} == {
        n for n, sql in schema.SEARCH_INDEXES.items() if "USING gin" in sql
    }
    for r in rows:
        assert f"gin_pending_list_limit={schema.GIN_PENDING_LIST_KB}" in (r["opts"] or []), r


def test_m006_names_the_server_version_it_needs() -> None:
    """An older server than PostgreSQL 13 is refused before anything changes."""

    class Info:
        server_version = 120017

    class Conn:
        info = Info()

        def __init__(self) -> None:
            self.sent: list[str] = []

        def execute(self, sql: str, *args: Any) -> None:
            self.sent.append(sql)

    conn = Conn()
    with pytest.raises(SchemaError, match="PostgreSQL 13 or newer; this server is version 12"):
        schema.m006_token_counts(conn)  # type: ignore[arg-type]
    assert conn.sent == []


def test_rows_written_before_m006_stay_found_beside_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """m006: tsv stops being generated and rows carry their lengths in tokens; a database
    written by the schema before keeps its rows, searchable and ranked as before."""
    name = f"mst_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    dsn = psycopg.conninfo.make_conninfo(DSN, options=f"-csearch_path={name},public")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            upto = next(i for i, (n, _) in enumerate(schema.MIGRATIONS) if n.startswith("m006"))
            monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:upto])
            schema.migrate(conn)
            monkeypatch.undo()
            conn.execute("INSERT INTO sessions (namespace, id, started_at) VALUES ('n', 'old', 1)")
            conn.execute(
                "INSERT INTO messages (namespace, session_id, role, content, timestamp, cjk) "
                "VALUES ('n', 'old', 'user', 'the heron nests by the lake', 2, NULL), "
                "('n', 'old', 'user', '数据库迁移到新的集群', 3, %s::tsvector)",
                (cjk_vector("数据库迁移到新的集群", None, None),),
            )
        with PostgresSessionStore(dsn, namespace="n") as store:
            store.create_session("new")
            store.append_messages(
                "new",
                [
                    {"role": "user", "content": "a heron again, by the river"},
                    {"role": "user", "content": "数据库迁移完成了"},
                ],
            )
            # A writer of the version before, still running, leaves tsv out: the
            # trigger makes it from the row, so the row is found like the others.
            with store.connection() as conn:
                conn.execute(
                    "INSERT INTO messages (namespace, session_id, role, content, timestamp) "
                    "VALUES ('n', 'new', 'user', 'the heron flew off', 4)"
                )
            assert {h["session_id"] for h in store.search_messages("heron")} == {"old", "new"}
            assert len(store.search_messages("heron flew")) == 3
            assert {h["session_id"] for h in store.search_messages("数据库迁移")} == {"old", "new"}
            with store.connection() as conn:
                rows = conn.execute(
                    f"SELECT session_id, tsv = {schema.word_vector()} AS same, tsv_tokens, "
                    f"{tokens_sql('tsv')} AS counted, cjk_tokens, "
                    f"{tokens_sql('cjk')} AS cjk_counted FROM messages ORDER BY id"
                ).fetchall()
                generated = conn.execute(
                    "SELECT attgenerated FROM pg_attribute "
                    "WHERE attrelid = 'messages'::regclass AND attname = 'tsv'"
                ).fetchone()
        assert generated == {"attgenerated": ""}
        assert [r["same"] for r in rows] == [True] * 5
        # Old rows read NULL (ranking counts them from the vector); new ones their counts.
        assert [r["tsv_tokens"] for r in rows[:2]] == [None, None]
        assert [r["tsv_tokens"] for r in rows[2:]] == [r["counted"] for r in rows[2:]]
        assert rows[4]["tsv_tokens"] == 4  # written by the trigger
        assert rows[3]["cjk_tokens"] == rows[3]["cjk_counted"] > 0
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=st.text(max_size=40))
def test_no_query_raises_or_breaks_sql(query: str) -> None:
    """Arbitrary Unicode (operators, quotes, NULs, CJK) never reaches PostgreSQL as an error."""
    store = _shared_search_store()
    hits = store.search_messages(query, limit=5)
    assert all(h["session_id"] == "prop" for h in hits)


# A tenant of 700 messages for the property test below: words common everywhere, words
# in a few rows, words only in the oldest rows (absent from the ranking sample's newest
# 500), a compound, Chinese words and a code identifier.
_MIXED_WORDS = ["osprey", "kite", "tern", "heron", "plover", "auth-api", "nriyun_client"]
_OLD_WORDS = ["albatross", "petrel", "数据库"]
_MIXED: list[PostgresSessionStore] = []


def _mixed_store() -> PostgresSessionStore:
    if not _MIXED:
        store = PostgresSessionStore(DSN, namespace=_namespace(), pool_size=1)
        store.create_session("mixed")
        texts = []
        for i in range(700):
            words = [w for k, w in enumerate(_MIXED_WORDS) if i % (k * 7 + 3) == 0]
            if i < 200:
                words += [w for k, w in enumerate(_OLD_WORDS) if i % (k + 2) == 0]
            if i % 97 == 5:
                words.append("网络")
            texts.append(" ".join(words) + f" filler {i % 13}")
        store.append_messages("mixed", [{"role": "user", "content": t} for t in texts])
        _MIXED.append(store)
    return _MIXED[0]


_MIXED_QUERY = st.tuples(
    st.lists(
        st.sampled_from([*_MIXED_WORDS, *_OLD_WORDS, "网络", "filler", "absent"]),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    st.sampled_from(["words", "words", "AND", "OR", "NOT", "phrase", "prefix"]),
)


def _mixed_query(words: list[str], form: str) -> str:
    if form == "phrase":
        return '"' + " ".join(words) + '"'
    if form == "prefix":
        return words[0][:3] + "*"
    if form == "words" or len(words) < 2:
        return " ".join(words)
    return f" {form} ".join(words)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_MIXED_QUERY)
@example(drawn=(["albatross"], "words"))  # common in the oldest rows only: probed twice
@example(drawn=(["petrel", "数据库"], "words"))
@example(drawn=(["albatross", "osprey"], "AND"))
def test_candidates_are_those_of_the_sampled_probe_and_a_second_read(
    drawn: tuple[list[str], str],
) -> None:
    """Whatever the query, the candidates and their scores are those the search gives
    when every probe takes the sample and every candidate is read again by id to be
    scored: the probe through the indexes alone (terms absent from the newest rows) and
    the rows read with their scoring columns where they are found change the work, not
    the answer."""
    query = _mixed_query(*drawn)
    store = _mixed_store()
    with pytest.MonkeyPatch.context() as patch:
        # Walks may reach the oldest rows, where the words the newest rows lack are.
        small_walks(patch, max_walk=800)
        found, _ = ranked(store, query, k=60)
        patch.setattr(pg_search, "_unseen", lambda *a: False)
        patch.setattr(
            pg_search.Carried,
            "keep",
            lambda self, rows, *extra: [int(r["id"]) for r in rows if r["id"] is not None],
        )
        again, _ = ranked(store, query, k=60)
    assert found == again, query


_SEARCH_STORE: list[PostgresSessionStore] = []


def _shared_search_store() -> PostgresSessionStore:
    # One store for every hypothesis example (a fixture would be shared anyway, and
    # hypothesis refuses function-scoped fixtures).
    if not _SEARCH_STORE:
        store = PostgresSessionStore(DSN, namespace=_namespace(), pool_size=1)
        store.create_session("prop")
        store.append_message("prop", "user", "AND OR NOT \"quoted\" prefix* 中文 a\\b 'x' %_")
        _SEARCH_STORE.append(store)
    return _SEARCH_STORE[0]


@pytest.fixture(scope="module", autouse=True)
def _close_shared_search_store() -> Iterator[None]:
    yield
    for store in _SEARCH_STORE:
        store.delete_namespace()
        store.close()
    _SEARCH_STORE.clear()


def _load_corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_corpus", ROOT / "benchmarks/corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_corpus"] = module
    spec.loader.exec_module(module)
    return module


def test_both_backends_rank_the_same_sessions_first(
    tmp_path: Path, pg: PostgresSessionStore
) -> None:
    """One benchmark corpus in both stores: the session each ranks first mostly agrees.

    Agreement is measured per query class (common single words tie in many sessions, so
    they agree least); the planted target must be found first as often as SQLite does.
    """
    corpus = _load_corpus()
    sessions = list(corpus.generate(2000))
    lite = SessionStore(tmp_path / "state.db")
    for store in (lite, pg):
        for s in sessions:
            store.create_session(s.id, source=s.source, started_at=s.started_at)
            store.append_messages(s.id, s.messages)
    holders: dict[str, set[str]] = {}
    for s in sessions:
        for m in s.messages:
            for plant in corpus.PLANTS:
                if m["content"] and plant.text in m["content"]:
                    holders.setdefault(plant.query, set()).add(s.id)
    agree: dict[str, float] = {}
    planted = {"sqlite": 0, "postgres": 0}
    specific = ("question", "phrase", "cjk3", "glued")
    for cls, every in corpus.queries().items():
        queries = every[::2]  # 20 of each class: enough to measure, quick to run
        same = 0
        for query in queries:
            lite_top = lite.search_sessions(query, limit=1)
            pg_top = pg.search_sessions(query, limit=1)
            first = (
                lite_top[0]["session_id"] if lite_top else None,
                pg_top[0]["session_id"] if pg_top else None,
            )
            same += first[0] == first[1]
            if cls in specific:
                planted["sqlite"] += first[0] in holders.get(query, ())
                planted["postgres"] += first[1] in holders.get(query, ())
        agree[cls] = same / len(queries)
    lite.close()
    overall = sum(agree.values()) / len(agree)
    print(f"top-session agreement {overall:.2f} by class {agree}; planted-first {planted}")
    assert overall >= 0.75, agree
    for cls in ("phrase", "cjk3", "glued"):
        assert agree[cls] >= 0.9, (cls, agree)
    assert planted["postgres"] >= planted["sqlite"] - 1, planted


def _load_lineage_tests() -> ModuleType:
    path = ROOT / "tests/test_store_lineage.py"
    spec = importlib.util.spec_from_file_location("store_lineage_tests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(2))
def test_listing_walk_from_preloaded_maps_matches_the_definition(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The listing's switch to preloaded continuation maps gives the definition's rows.

    The shared lineage tests reach that switch (after PRELOAD_AFTER rows) on SQLite
    only; a low threshold makes every PostgreSQL page here cross it.
    """
    from memstrata.store import listing

    shared = _load_lineage_tests()
    monkeypatch.setattr(listing, "PRELOAD_AFTER", 5)
    shared._random_lineage(pg, 10 + seed, 120)
    for kwargs in (
        {},
        {"limit": 7, "offset": 5},
        {"source": "cron"},
        {"exclude_sources": ["cron"], "include_archived": True},
        {"limit": 50, "offset": 60},
    ):
        expected = shared._reference_listing(pg, **dict(kwargs))
        assert pg.list_sessions_rich(**kwargs) == expected, kwargs


# -- schema, indexes, maintenance ---------------------------------------------------------


def test_fresh_schema_is_migrated_and_a_newer_one_refused(private_dsn: str) -> None:
    """Opening creates every table once; a migration this version does not know is refused."""
    with PostgresSessionStore(private_dsn, namespace="a") as store:
        with store.connection() as conn:
            names = [r["name"] for r in conn.execute("SELECT name FROM _migrations ORDER BY id")]
            tables = {
                r["table_name"]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()"
                )
            }
        assert names == [name for name, _ in schema.MIGRATIONS]
        assert {"sessions", "messages", "state_meta", "summary_cache", "curated_memory"} <= tables
        with store.connection() as conn:
            conn.execute("INSERT INTO _migrations (name, applied_at) VALUES ('m999_future', 0)")
    with pytest.raises(SchemaError, match="newer memstrata"):
        PostgresSessionStore(private_dsn, namespace="a")


def test_dropped_index_and_missing_bigrams_are_found_and_rebuilt(private_dsn: str) -> None:
    """check_indexes names a dropped index and rows without bigrams; reindex repairs both."""
    with PostgresSessionStore(private_dsn, namespace="a") as store:
        store.create_session("s")
        mid = store.append_message("s", "user", "偷偷写入 sneaky")
        assert store.check_indexes() == []
        with store.connection() as conn:
            conn.execute("DROP INDEX idx_messages_ns_trgm")
            conn.execute("UPDATE messages SET cjk = NULL")
        problems = store.check_indexes()
        assert any("idx_messages_ns_trgm is missing" in p for p in problems)
        assert any("lacks 1 message" in p for p in problems)
        report = store.integrity_check()
        assert not report["ok"] and "reindex" in report["fix"]
        assert store.search_messages("偷偷") == []
        stages: list[str] = []
        counts = store.reindex(lambda stage, done, total: stages.append(stage))
        assert counts == {"messages_fts": 1, "messages_fts_trigram": 1, "messages_fts_cjk": 1}
        assert set(stages) == {"messages_fts", "messages_fts_trigram", "messages_fts_cjk"}
        assert store.check_indexes() == []
        assert [h["id"] for h in store.search_messages("偷偷")] == [mid]
        store.optimize()
        store.vacuum()
        assert store.integrity_check() == {"ok": True, "sqlite": ["ok"], "indexes": [], "fix": None}


def test_forget_works_through_the_public_methods(pg: PostgresSessionStore) -> None:
    """memstrata.ops.forget removes a conversation and a query's messages, counted per index."""
    from memstrata.ops.forget import forget, plan_forget

    pg.create_session("a", started_at=1.0)
    pg.end_session("a", "compression", ended_at=2.0)
    pg.create_session("b", parent_session_id="a", lineage_kind="compression", started_at=2.0)
    first = pg.append_message("a", "user", "old address 旧地址", timestamp=1.5)
    pg.append_message("b", "user", "still about the move", timestamp=3.0)
    pg.create_session("c", started_at=5.0)
    keep = pg.append_message("c", "user", "unrelated", timestamp=6.0)
    again = pg.append_message("c", "user", "my old address again", timestamp=7.0)
    assert pg.get_compression_chain("b") == ["a", "b"]
    assert pg.list_message_ids(since=5.0) == [keep, again]
    assert pg.list_message_ids(session_ids=["a"], until=2.0) == [first]

    report = forget(pg, plan_forget(pg, sessions=["b"]))
    assert sorted(report.sessions) == ["a", "b"] and report.messages == 2
    assert report.removed["word_index"] == 2 and report.removed["cjk_index"] == 1
    report = forget(pg, plan_forget(pg, query='"old address"'))
    assert report.messages == 1
    assert [m["id"] for m in pg.get_messages("c")] == [keep]
    assert pg.index_counts() == {
        "messages_fts": 1,
        "messages_fts_trigram": 1,
        "messages_fts_cjk": 0,
        "summary_cache": 0,
    }


def test_delete_namespace_removes_one_tenant_only(
    pg: PostgresSessionStore, other: PostgresSessionStore
) -> None:
    """delete_namespace deletes every row of the tenant, lineage included, and no other."""
    for store in (pg, other):
        store.create_session("p")
        store.create_session("c", parent_session_id="p", lineage_kind="delegate")
        store.append_message("c", "user", "hello")
        store.set_meta("k", "v")
    assert pg.delete_namespace() == {
        "message_vectors": 0,
        "messages": 1,
        "summary_cache": 0,
        "query_expansions": 0,
        "state_meta": 1,
        "curated_memory": 0,
        "curated_memory_history": 0,
        "fact_vectors": 0,
        "fact_history": 0,
        "facts": 0,
        "sessions": 2,
    }
    assert pg.stats()["sessions"] == 0
    assert other.stats()["messages"] == 1 and other.get_meta("k") == "v"


# -- many processes ---------------------------------------------------------------------

# The subprocess side of the concurrency tests (run with python -c, so that it imports
# the store and nothing else); prints one JSON line.
WORKER = """
import json, sys
from memstrata.store.postgres import PostgresSessionStore

command, dsn, namespace = sys.argv[1:4]
if command == "open":
    with PostgresSessionStore(dsn, namespace=namespace, pool_size=1) as store:
        store.create_session("s")
        store.append_message("s", "user", "opened")
    print(json.dumps({"ok": True}))
    sys.exit(0)
worker, turns = int(sys.argv[4]), int(sys.argv[5])
errors, ids, searched, found = [], [], 0, 0
with PostgresSessionStore(dsn, namespace=namespace, pool_size=2) as store:
    sid = f"w{worker}"
    store.create_session(sid)
    for i in range(turns):
        token = f"tok{worker}x{i}"
        call = [{"id": f"c{i}", "function": {"name": "grep", "arguments": token}}]
        try:
            ids += store.append_messages(sid, [
                {"role": "user", "content": f"please find {token} 中文{worker}"},
                {"role": "assistant", "content": None, "tool_calls": call},
            ])
            ids.append(store.append_message("shared", "user", f"{token} shared"))
            if i % 5 == 4:
                searched += 1
                hits = store.search_messages(token, limit=5)
                found += {h["session_id"] for h in hits} == {sid, "shared"}
                store.search_messages("please find", limit=5)
        except Exception as exc:  # reported to the parent, which fails the test
            errors.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"errors": errors, "ids": ids, "searched": searched, "found": found}))
"""


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def _results(procs: list[subprocess.Popen[str]], timeout: float) -> list[dict[str, Any]]:
    """Every worker's last line as JSON; the rest are killed if one fails or hangs."""
    out: list[dict[str, Any]] = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, stderr
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


def test_concurrent_opens_migrate_once(private_dsn: str) -> None:
    """Several processes opening a fresh database at once apply each migration once."""
    procs = [_spawn("open", private_dsn, f"n{i}") for i in range(4)]
    results = _results(procs, timeout=60)
    assert all(r["ok"] for r in results)
    with psycopg.connect(private_dsn) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY id")]
    assert names == [name for name, _ in schema.MIGRATIONS]


def test_eight_clients_append_and_search_at_once(pg: PostgresSessionStore) -> None:
    """8 processes append turns (own and shared session) and search: no errors, no loss."""
    workers, turns = 8, 30
    pg.create_session("shared")
    procs = [_spawn("append", DSN, pg.namespace, str(w), str(turns)) for w in range(workers)]
    results = _results(procs, timeout=120)
    assert [r["errors"] for r in results] == [[] for _ in range(workers)]
    assert all(r["found"] == r["searched"] > 0 for r in results)
    shared = pg.get_session("shared")
    assert shared is not None and shared["message_count"] == workers * turns
    for w in range(workers):
        session = pg.get_session(f"w{w}")
        assert session is not None and session["message_count"] == 2 * turns
        assert session["tool_call_count"] == turns
        assert len(pg.get_messages(f"w{w}")) == 2 * turns
    ids = [i for r in results for i in r["ids"]]
    assert len(ids) == len(set(ids)) == workers * turns * 3
    for w in (0, workers - 1):
        hits = pg.search_messages(f"tok{w}x{turns - 1}")
        assert {h["session_id"] for h in hits} == {f"w{w}", "shared"}


def test_docs_session_store_example_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example of the "Session store" section of docs/postgres.md runs as written."""
    # The example reads its server from MEMSTRATA_PG_DSN: point it at the test server,
    # so it runs against the database (and schema version) the rest of this file uses.
    monkeypatch.setenv("MEMSTRATA_PG_DSN", DSN)
    doc = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    section = doc.split("## Session store", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    tenants = {name: _namespace() for name in ("alice", "bob")}
    for name, fresh in tenants.items():
        code = code.replace(f'namespace="{name}"', f'namespace="{fresh}"')
    try:
        exec(compile(code, "docs/postgres.md", "exec"), {})
    finally:
        for fresh in tenants.values():
            with PostgresSessionStore(DSN, namespace=fresh) as store:
                store.delete_namespace()
    out = capsys.readouterr().out
    assert "20250101_kyoto Plan two days in >>>京都<<<, >>>temples<<< first" in out
    assert "['Kyoto trip']" in out and out.rstrip().endswith("None")
