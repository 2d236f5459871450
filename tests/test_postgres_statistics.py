"""The PostgreSQL store keeps its own planner statistics when autovacuum is off.

A server with autovacuum off (some managed and tuned servers, for bulk loads) never
refreshes the statistics of tables written through the public API; search plans chosen
without them read a tenant's every row. The store ANALYZEs and VACUUMs its tables itself
past autovacuum's thresholds, and its search statements keep their plans either way.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from helpers import PG_DSN as DSN  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore, maintenance  # noqa: E402

pytestmark = pytest.mark.postgres

WORDS = [f"{a}{b}" for a in ("deploy", "cache", "token", "merge", "shard") for b in "abcdefgh"]
CJK = ["数据库", "服务端", "客户端", "问题", "迁移"]
ROWS = 6_000


@pytest.fixture
def dsn() -> Iterator[str]:
    """A fresh schema whose tables have autovacuum off, dropped afterwards."""
    name = f"mst_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    dsn = psycopg.conninfo.make_conninfo(DSN, options=f"-csearch_path={name},public")
    try:
        with PostgresSessionStore(dsn, namespace="setup") as store, store.connection() as conn:
            for table in maintenance.KEPT_TABLES:
                conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        yield dsn
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def write(dsn: str, namespace: str, rows: int) -> None:
    """``rows`` messages through the public API, 50 per session, then close the store."""
    with PostgresSessionStore(dsn, namespace=namespace, durability="normal") as store:
        write_sessions(store, rows)


def write_sessions(store: PostgresSessionStore, rows: int, first: int = 0) -> None:
    """``rows`` messages through ``store``, 50 per session (``s{first}`` on)."""
    rng = random.Random(7)
    for s in range(first, first + rows // 50):
        store.create_session(f"s{s}")
        store.append_messages(
            f"s{s}",
            [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": " ".join(rng.choices(WORDS, k=12)) + " " + rng.choice(CJK),
                }
                for i in range(50)
            ],
        )


def settle(dsn: str) -> None:
    """Wait until the server's counters show every row written so far, then vacuum and
    analyze the tables: a closed store's connections publish their counters as they
    exit, which may be after its last pass, and a store opened next would then find
    those rows unanalyzed and run a pass of its own at its first write."""
    published(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) messages, sessions")


def published(dsn: str) -> None:
    """Wait until the server's counters show every row written so far (each backend
    publishes its own up to seconds after its writes)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM messages) <= m.n_tup_ins "
                "AND (SELECT count(*) FROM sessions) <= s.n_tup_ins "
                "FROM pg_stat_user_tables m, pg_stat_user_tables s "
                "WHERE m.relid = 'messages'::regclass AND s.relid = 'sessions'::regclass"
            ).fetchone()
            if row is not None and row[0]:
                return
            assert time.monotonic() < deadline, "the server's counters never showed the rows"
            time.sleep(0.05)


def estimated_rows(dsn: str, namespace: str) -> tuple[float, dict[str, Any]]:
    """The planner's estimate of the tenant's messages, and the table's counters."""
    with psycopg.connect(dsn) as conn:
        plan = conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT id FROM messages WHERE namespace = %s", (namespace,)
        ).fetchone()
        assert plan is not None
        doc = plan[0] if not isinstance(plan[0], str) else json.loads(plan[0])
        stats = conn.execute(
            "SELECT s.last_analyze, s.last_vacuum, s.n_mod_since_analyze, c.relallvisible "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.relid = 'messages'::regclass"
        ).fetchone()
    assert stats is not None
    keys = ("last_analyze", "last_vacuum", "changed", "all_visible")
    return float(doc[0]["Plan"]["Plan Rows"]), dict(zip(keys, stats, strict=True))


def test_bulk_writes_leave_fresh_statistics_without_autovacuum(dsn: str) -> None:
    write(dsn, "bulk", ROWS)
    estimate, stats = estimated_rows(dsn, "bulk")
    # Only an ANALYZE run by the store sets last_analyze on a table autovacuum skips.
    assert stats["last_analyze"] is not None, stats
    assert stats["last_vacuum"] is not None and stats["all_visible"] > 0, stats
    assert estimate >= ROWS / 2, (estimate, stats)
    # Search at its bound, generously: each class well under a second on this tenant.
    with PostgresSessionStore(dsn, namespace="bulk") as store:
        for query in (
            "deploya",
            "deploya cachec merge",
            '"tokenb shardc"',
            "shar*",
            "数据库",
            "问题",
        ):
            started = time.perf_counter()
            hits = store.search_messages(query, limit=20)
            elapsed = time.perf_counter() - started
            assert hits, query
            assert elapsed < 1.0, (query, elapsed)


def test_without_the_store_the_planner_would_guess(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same writes with the store's passes held back leave the planner
    with no statistics, estimating a small fraction of the tenant."""
    monkeypatch.setattr(maintenance, "CHECK_EVERY", 10**9)
    monkeypatch.setattr(maintenance, "MERGE_ROWS", 10**9)
    monkeypatch.setattr(maintenance.Keeper, "close", maintenance.Keeper.wait)
    write(dsn, "unkept", ROWS)
    estimate, stats = estimated_rows(dsn, "unkept")
    assert stats["last_analyze"] is None, stats
    assert estimate < ROWS / 2, (estimate, stats)
    # What the store would do now, and then did.
    with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        assert "VACUUM (ANALYZE) messages" in maintenance.due(conn)
    with PostgresSessionStore(dsn, namespace="unkept") as store:
        assert "VACUUM (ANALYZE) messages" in store.keep_statistics()
        assert store.keep_statistics() == []  # nothing left to do
    assert estimated_rows(dsn, "unkept")[0] >= ROWS / 2


def test_probes_count_a_common_term_as_common_and_return_all_of_a_rare_one(dsn: str) -> None:
    """One probe per index arm: COMMON_DF ids for a term in more rows than that (never a
    sample passing for all of its rows), every id of a rare term."""
    from memstrata.query.compile import compile_query
    from memstrata.store.postgres import ranking
    from memstrata.store.postgres import search as pg_search
    from memstrata.store.rank import COMMON_DF

    with PostgresSessionStore(dsn, namespace="probe", durability="normal") as store:
        for s in range(13):
            store.create_session(f"p{s}")
            store.append_messages(
                f"p{s}",
                [
                    {"role": "user", "content": f"alpha step {i}" + (" omega" if i == 7 else "")}
                    for i in range(50)
                ],
            )
        tree = compile_query("alpha omega").tree
        assert tree is not None
        terms = [pg_search.term_sql(t, substrings=False) for t in tree.positive_terms()]
        with store.connection() as conn:
            _, total, _ = ranking.sample(conn, "probe")
            assert total == 13 * 50
            probed = pg_search.Probed(total)
            probed.add(conn, "probe", [a for t in terms for a in t.arms])
            assert [probed.df(t) for t in terms] == [COMMON_DF, 13]
            rare = probed.rows(terms[1])
            contents = conn.execute(
                "SELECT content FROM messages WHERE id = ANY(%s)", (sorted(rare),)
            ).fetchall()
            assert len(contents) == 13 and all("omega" in r["content"] for r in contents)


def pending_pages(dsn: str) -> dict[str, int]:
    """Pages each GIN search index had in its pending list (merged by asking)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pages = maintenance.merge_pending(conn)
    assert set(pages) == set(maintenance.GIN_INDEXES), pages
    return pages


def test_a_writer_leaves_the_gin_pending_lists_merged(dsn: str) -> None:
    """Rows wait in 4 MB pending lists that every search reads; the store that wrote
    them merges the lists when it closes, autovacuum or not."""
    with PostgresSessionStore(dsn, namespace="merged", durability="normal") as store:
        store.create_session("s")
        for i in range(10):
            store.append_messages("s", [{"role": "user", "content": f"turn {i} shardc 数据库"}])
    left = pending_pages(dsn)
    assert left == dict.fromkeys(left, 0), left


def test_without_the_writers_pass_rows_wait_in_the_pending_lists(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same writes with the store's passes held back leave rows in
    every GIN index's pending list (so the test above can fail)."""
    monkeypatch.setattr(maintenance.Keeper, "wrote", lambda self, messages=0: None)
    monkeypatch.setattr(maintenance.Keeper, "close", lambda self: None)
    with PostgresSessionStore(dsn, namespace="waiting", durability="normal") as store:
        store.create_session("s")
        for i in range(10):
            store.append_messages("s", [{"role": "user", "content": f"turn {i} shardc 数据库"}])
    assert all(pages > 0 for pages in pending_pages(dsn).values()), pending_pages(dsn)


def hold_maintenance_lock(dsn: str, seconds: float, held: threading.Event) -> None:
    """Hold the schema's maintenance lock for ``seconds`` (another process's pass)."""
    from memstrata.store.postgres.schema import MAINTENANCE_LOCK, schema_lock

    with (
        psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn,
        schema_lock(conn, MAINTENANCE_LOCK) as got,
    ):
        assert got
        held.set()
        time.sleep(seconds)


@pytest.mark.parametrize("rows", [1_000, 100], ids=["bulk", "few"])
def test_a_writer_closing_during_another_pass_waits_to_merge_its_rows(dsn: str, rows: int) -> None:
    """Writers of one bulk load close together: the first to take the lock merges what
    was written when its pass began. A writer that leaves MERGE_ROWS rows or more waits
    for that pass and merges the rest; a writer of fewer rows does not wait."""
    store = PostgresSessionStore(dsn, namespace="closing", durability="normal")
    write_sessions(store, rows)
    first = store._keeper._thread  # the pass of its first write, if still running
    if first is not None:
        first.join()
    held = threading.Event()
    holder = threading.Thread(target=hold_maintenance_lock, args=(dsn, 1.5, held))
    holder.start()
    assert held.wait(10)
    started = time.monotonic()
    store.close()
    took = time.monotonic() - started
    holder.join()
    left = pending_pages(dsn)
    if rows >= maintenance.MERGE_ROWS:
        assert took >= 1.0, took  # it waited for the pass under way
        assert left == dict.fromkeys(left, 0), left
    else:
        assert took < 1.0, took
        assert any(left.values()), left  # the few rows wait for a later pass


@pytest.mark.parametrize("naptime", [None, 0.0], ids=["default", "control"])
def test_a_bulk_load_is_analyzed_and_merged_at_its_end_not_at_every_pass(
    dsn: str, monkeypatch: pytest.MonkeyPatch, naptime: float | None
) -> None:
    """Within NAPTIME_S of its first pass a writer merges and vacuums nothing (a merge
    beside writers costs more than their own flushes), and analyzes only each time its
    writes doubled (GROWN_ROWS); its close() analyzes, vacuums and merges the whole load
    (control: with no naptime, a pass every CHECK_EVERY writes)."""
    if naptime is not None:
        monkeypatch.setattr(maintenance, "NAPTIME_S", naptime)
    monkeypatch.setattr(maintenance, "CHECK_EVERY", 20)
    with PostgresSessionStore(dsn, namespace="load", durability="normal") as store:
        keeper = store._keeper  # the passes it ran are what is tested
        write_sessions(store, ROWS)
        # Before close(): the statistics count a good part of the tenant (a pass asks
        # each time the writer doubled its writes, and analyzes when the tenant is
        # counted at half its size or less).
        estimate, _ = estimated_rows(dsn, "load")
    # The last pass is close()'s, the others ran during the load.
    during = [sql for p in keeper.passes[:-1] for sql in p]
    if naptime is None:
        # Asked at 500, 1,000, 2,000 and 4,000 messages of 6,000: analysis only, when
        # the tenant was counted short.
        assert set(during) == {"ANALYZE messages"} and len(during) >= 2, keeper.passes
        assert estimate >= ROWS / 3, estimate
        assert "VACUUM (ANALYZE) messages" in keeper.passes[-1], keeper.passes
        estimate, stats = estimated_rows(dsn, "load")
        assert estimate >= ROWS / 2 and stats["last_vacuum"] is not None, (estimate, stats)
        left = pending_pages(dsn)
        assert left == dict.fromkeys(left, 0), left
    else:
        assert len(during) > 2, keeper.passes


def test_a_role_that_does_not_own_the_indexes_keeps_writing_and_searching(dsn: str) -> None:
    """Only an owner may merge a GIN pending list: a store connected as a role granted
    the rows alone skips the merge (as ANALYZE skips what it does not own) instead of
    failing its every pass, and its rows are found."""
    role = f"mst_app_{uuid.uuid4().hex[:8]}"
    schema = psycopg.conninfo.conninfo_to_dict(dsn)["options"].split("=", 1)[1].split(",")[0]
    with psycopg.connect(DSN, autocommit=True) as conn:
        try:
            conn.execute(f"CREATE ROLE {role} LOGIN")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test server's role may not create roles")
    try:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
            conn.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
            )
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        app = psycopg.conninfo.make_conninfo(dsn, user=role)
        with PostgresSessionStore(app, namespace="app", durability="normal") as store:
            store.create_session("s")
            for i in range(50):
                store.append_messages(
                    "s", [{"role": "user", "content": f"turn {i} shardc"} for _ in range(10)]
                )
            keeper = store._keeper  # the passes it ran are what is tested
            assert store.search_messages("shardc", limit=5)
        assert keeper.error is None, keeper.error
        assert any(maintenance.MERGE_PENDING in p for p in keeper.passes), keeper.passes
        assert pending_pages(dsn)["idx_messages_ns_tsv"] > 0  # the owner's to merge
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_grown_tenant_is_analyzed_only_when_the_statistics_count_it_short(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new tenant beside one the statistics know well: the table's counters call its
    rows a small change, but the grown pass analyzes it; asked again once counted, it
    does nothing (another writer of the tenant analyzed already)."""
    write(dsn, "known", 4_000)  # close() analyzes the table with this tenant in it
    settle(dsn)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row)

    monkeypatch.setattr(maintenance, "CHECK_EVERY", 10**9)
    monkeypatch.setattr(maintenance, "MERGE_ROWS", 10**9)
    monkeypatch.setattr(maintenance.Keeper, "close", maintenance.Keeper.wait)
    write(dsn, "newcomer", 300)
    assert estimated_rows(dsn, "newcomer")[0] < 150
    with connect() as conn:
        assert maintenance.due(conn, 300) == []  # 300 new rows: little for the table
    assert maintenance.keep_statistics(connect, grown="newcomer") == ["ANALYZE messages"]
    assert estimated_rows(dsn, "newcomer")[0] >= 150
    assert maintenance.keep_statistics(connect, grown="newcomer") == []


def test_a_tenant_the_common_values_leave_out_is_counted_as_the_planner_counts_it(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More tenants than the statistics' list of most common values holds (one value
    here, a hundred by default): a tenant left out of it is counted by the rows the list
    leaves over, as the planner counts it, so a grown pass analyzes only when that
    estimate is short, not every time."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE messages ALTER COLUMN namespace SET STATISTICS 1")
    for namespace, rows in [("big", 2_000), ("a", 300), ("b", 300), ("newcomer", 300)]:
        write(dsn, namespace, rows)  # the last close() analyzes all four
    settle(dsn)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row)

    def listed() -> list[str]:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT most_common_vals::text::text[] FROM pg_stats WHERE "
                "schemaname = current_schema() AND tablename = 'messages' "
                "AND attname = 'namespace'"
            ).fetchone()
        assert row is not None
        return list(row[0] or [])

    assert listed() == ["big"]
    assert estimated_rows(dsn, "newcomer")[0] >= 150
    assert maintenance.keep_statistics(connect, grown="newcomer") == []

    monkeypatch.setattr(maintenance, "CHECK_EVERY", 10**9)
    monkeypatch.setattr(maintenance, "MERGE_ROWS", 10**9)
    monkeypatch.setattr(maintenance.Keeper, "close", maintenance.Keeper.wait)
    with PostgresSessionStore(dsn, namespace="newcomer", durability="normal") as store:
        write_sessions(store, 800, first=6)  # 1,100 rows, still counted as 300
    assert estimated_rows(dsn, "newcomer")[0] < 550
    assert maintenance.keep_statistics(connect, grown="newcomer") == ["ANALYZE messages"]
    assert "newcomer" not in listed()
    assert estimated_rows(dsn, "newcomer")[0] > 550  # (3,700 - 2,000) / 3 rows
    assert maintenance.keep_statistics(connect, grown="newcomer") == []


def heap_fetches(dsn: str, namespace: str) -> int:
    """The heap visits an index-only read of the tenant's ids makes: one for each row on
    a page not marked all-visible (what marking the pages saves a search)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return maintenance.unmarked_rows(conn, namespace)


@pytest.mark.parametrize("writers,each", [(2, 2_000), (5, 1_100)], ids=["two", "five"])
def test_a_tenant_small_beside_its_table_gets_its_pages_marked_visible(
    dsn: str, writers: int, each: int
) -> None:
    """Writers that inserted more than VACUUM_BASE rows, when the rows inserted since the
    table's last VACUUM pass the VACUUM threshold of their tenant, in a table too big for
    the table's rule to call for a VACUUM, mark the pages all-visible on close (no index
    read): two writers each past the tenant's threshold, and five that pass it only
    together (1,100 each, a tenant of 5,500: threshold 2,100); a writer of a few rows
    does not."""
    write(dsn, "known", 20_000)  # close() vacuums and analyzes the fresh table
    settle(dsn)
    stores = [
        PostgresSessionStore(dsn, namespace="small", durability="normal") for _ in range(writers)
    ]
    threads = [
        # short of 20 % of the table (1,000 + 0.2 x 24,000-25,500)
        threading.Thread(target=write_sessions, args=(store, each, 100 * i))
        for i, store in enumerate(stores)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    published(dsn)
    closing = [threading.Thread(target=store.close) for store in stores]
    for t in closing:
        t.start()
    for t in closing:
        t.join()
    ran = [sql for store in stores for p in store._keeper.passes for sql in p]
    assert maintenance.MARK_VISIBLE in ran and "VACUUM (ANALYZE) messages" not in ran, ran
    assert heap_fetches(dsn, "small") == 0  # the last rows' pages too (_wal_flushed)
    with PostgresSessionStore(dsn, namespace="few", durability="normal") as store:
        write_sessions(store, 100)
        keeper = store._keeper
    assert all(maintenance.MARK_VISIBLE not in p for p in keeper.passes), keeper.passes
    assert heap_fetches(dsn, "few") > 0  # the few rows' page is left to a later pass


def test_a_pass_of_another_schema_leaves_this_schemas_pass_to_run(dsn: str) -> None:
    """One process at a time keeps a schema's statistics, and the lock that says so is the
    schema's: another schema's pass running in the same database (its lock held here)
    does not make this schema's pass skip; a pass of this schema running does."""
    from memstrata.store.postgres.schema import MAINTENANCE_LOCK

    write(dsn, "locked", 100)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row)

    schema = psycopg.conninfo.conninfo_to_dict(dsn)["options"].split("=", 1)[1].split(",")[0]
    with psycopg.connect(DSN, autocommit=True) as holder:
        for name, runs in ((f"{schema}_elsewhere", True), (schema, False)):
            got = holder.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (MAINTENANCE_LOCK, name)
            ).fetchone()
            assert got is not None and got[0]
            ran = maintenance.keep_statistics(connect, merge=True)
            assert bool(ran) is runs, (name, ran)
            holder.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (MAINTENANCE_LOCK, name))
