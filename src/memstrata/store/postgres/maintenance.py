"""Index health, reindexing, statistics and counts for the PostgreSQL session store.

On PostgreSQL the word index (a generated ``tsvector``) and the trigram index (an
expression index) are derived by the server and cannot drift from the rows; what can go
wrong is an index dropped or left invalid (a failed ``CREATE INDEX CONCURRENTLY``), and
CJK bigrams written by an older or foreign writer. Those are what is checked and fixed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from memstrata.query.cjk import CJK_RUN
from memstrata.store.postgres.messages import cjk_row
from memstrata.store.postgres.schema import (
    GIN_INDEXES,
    MAINTENANCE_LOCK,
    SEARCH_INDEXES,
    TABLE_MESSAGES,
    TENANT_MESSAGES,
    schema_lock,
)

if TYPE_CHECKING:
    from memstrata.store.postgres.database import Database

Conn = psycopg.Connection[Any]
Progress = Callable[[str, int, int], None]
REINDEX_HINT = "Rebuild it with `memstrata sessions reindex` (or PostgresSessionStore.reindex())."
_BATCH = 2000
# The CJK character class of memstrata.query.cjk as a PostgreSQL regular expression.
CJK_CLASS_RE = CJK_RUN.pattern


def check(conn: Conn, ns: str) -> list[str]:
    """Missing or invalid search indexes, and the tenant's rows lacking CJK bigrams."""
    problems = []
    rows = conn.execute(
        "SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = 'messages'::regclass"
    ).fetchall()
    found = {r["name"]: r["valid"] for r in rows}
    for name in SEARCH_INDEXES:
        if name not in found:
            problems.append(f"index {name} is missing")
        elif not found[name]:
            problems.append(f"index {name} is invalid")
    stale = conn.execute(
        "SELECT count(*) AS n FROM messages WHERE namespace = %s AND cjk IS NULL "
        "AND (coalesce(content, '') ~ %s OR coalesce(tool_name, '') ~ %s "
        "OR coalesce(tool_calls, '') ~ %s)",
        (ns, CJK_CLASS_RE, CJK_CLASS_RE, CJK_CLASS_RE),
    ).fetchone()
    if stale and stale["n"]:
        problems.append(f"the CJK bigram index lacks {stale['n']} message(s) with CJK text")
    return problems


def reindex(db: Database, ns: str, progress: Progress | None = None) -> dict[str, int]:
    """Recreate missing indexes, rebuild invalid ones, recompute the tenant's CJK bigrams."""
    with db.connection() as conn:
        present = {
            r["name"]: r["valid"]
            for r in conn.execute(
                "SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = 'messages'::regclass"
            ).fetchall()
        }
        for name, sql in SEARCH_INDEXES.items():
            if name in present and not present[name]:
                conn.execute(f"DROP INDEX {name}")
            conn.execute(sql)
        total_row = conn.execute(
            "SELECT count(*) AS n FROM messages WHERE namespace = %s", (ns,)
        ).fetchone()
    total = int(total_row["n"]) if total_row else 0
    done = 0
    last_id = 0
    # Batches in their own transactions: a big tenant never holds row locks for long.
    while True:
        with db.connection() as conn:
            rows = conn.execute(
                "SELECT id, content, tool_name, tool_calls FROM messages "
                "WHERE namespace = %s AND id > %s ORDER BY id LIMIT %s",
                (ns, last_id, _BATCH),
            ).fetchall()
            if not rows:
                break
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE messages SET cjk = %s::tsvector, cjk_tokens = %s WHERE id = %s",
                    [
                        (*cjk_row(r["content"], r["tool_name"], r["tool_calls"]), r["id"])
                        for r in rows
                    ],
                )
        last_id = int(rows[-1]["id"])
        done += len(rows)
        if progress is not None:
            progress("messages_fts_cjk", done, total)
    with db.connection() as conn:
        cjk_count = conn.execute(
            "SELECT count(*) AS n FROM messages WHERE namespace = %s AND cjk IS NOT NULL", (ns,)
        ).fetchone()
    for stage in ("messages_fts", "messages_fts_trigram"):
        if progress is not None:
            progress(stage, total, total)
    return {
        "messages_fts": total,
        "messages_fts_trigram": total,
        "messages_fts_cjk": int(cjk_count["n"]) if cjk_count else 0,
    }


def _autocommit(db: Database, statements: list[str]) -> None:
    # VACUUM cannot run inside a transaction block: a pooled connection in autocommit.
    with db.autocommit() as conn:
        for sql in statements:
            conn.execute(sql)


_TABLES = (
    "sessions",
    "messages",
    "state_meta",
    "summary_cache",
    "curated_memory",
    "curated_memory_history",
)


def analyze(db: Database) -> None:
    """ANALYZE the store's tables."""
    _autocommit(db, [f"ANALYZE {t}" for t in _TABLES])


# Merge each GIN search index's pending list into the index. Only an owner of the index may (as for
# VACUUM and ANALYZE, which skip what the role does not own): a store connected as a role
# that only reads and writes the rows leaves the merging to the owner's maintenance or
# autovacuum, instead of failing every pass; a missing index (check_indexes reports it)
# is skipped too.
MERGE_PENDING = (
    "SELECT c.relname, gin_clean_pending_list(c.oid) FROM pg_class c "
    "WHERE c.oid IN (SELECT to_regclass(n) FROM unnest("
    f"'{{{','.join(GIN_INDEXES)}}}'::text[]) n) AND pg_has_role(c.relowner, 'USAGE')"
)


def merge_pending(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Merge the GIN pending lists (:data:`MERGE_PENDING`) on ``conn``; the pages each
    index's list held, by index name (what a writer left waiting, for measurements)."""
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        return {str(name): int(pages) for name, pages in cur.execute(MERGE_PENDING).fetchall()}


def unmarked_rows(conn: psycopg.Connection[Any], tenant: str) -> int:
    """The tenant's rows on pages not marked all-visible: the heap visits an index-only
    read of its ids makes (``EXPLAIN ANALYZE``, reading every id of the tenant; for
    measurements). What :func:`mark_visible` saves a search's reads of the newest ids."""
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        cur.execute("SELECT set_config('enable_seqscan', 'off', false)")
        cur.execute("SELECT set_config('enable_bitmapscan', 'off', false)")
        try:
            row = cur.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM messages "
                "WHERE namespace = ANY(%s) ORDER BY namespace DESC, id DESC",
                ([tenant],),
            ).fetchone()
        finally:
            cur.execute("RESET enable_seqscan")
            cur.execute("RESET enable_bitmapscan")
    plan = row[0][0]["Plan"] if row else {}
    while "Heap Fetches" not in plan and plan.get("Plans"):
        plan = plan["Plans"][0]
    return int(plan.get("Heap Fetches", 0))


def optimize(db: Database) -> None:
    """ANALYZE the tables and flush the GIN pending lists into the indexes (those the
    store's role owns)."""
    _autocommit(db, [*(f"ANALYZE {t}" for t in _TABLES), MERGE_PENDING])


def index_counts(conn: Conn, ns: str) -> dict[str, int]:
    """Rows of one tenant each search index covers, and its cached summaries.

    Keyed by the SQLite store's index tables (word, trigram, CJK), so that callers of
    either store (reindex progress, forget reports) read the same names.
    """
    row = conn.execute(
        "SELECT count(*) AS n, count(cjk) AS cjk FROM messages WHERE namespace = %s", (ns,)
    ).fetchone()
    cache = conn.execute(
        "SELECT count(*) AS n FROM summary_cache WHERE namespace = %s", (ns,)
    ).fetchone()
    assert row is not None and cache is not None  # aggregates always return a row
    return {
        "messages_fts": int(row["n"]),
        "messages_fts_trigram": int(row["n"]),
        "messages_fts_cjk": int(row["cjk"]),
        "summary_cache": int(cache["n"]),
    }


def vacuum(db: Database) -> None:
    """VACUUM (ANALYZE) the store's tables."""
    _autocommit(db, [f"VACUUM (ANALYZE) {t}" for t in _TABLES])


def integrity(conn: Conn, ns: str) -> dict[str, Any]:
    """The report of :meth:`PostgresSessionStore.integrity_check`."""
    problems = check(conn, ns)
    return {
        "ok": not problems,
        "sqlite": ["ok"],
        "indexes": problems,
        "fix": REINDEX_HINT if problems else None,
    }


def counts(conn: Conn, ns: str) -> dict[str, Any]:
    """Session and message counts of one tenant (the keys of SessionStore.stats)."""
    sessions = conn.execute(
        "SELECT count(*) AS n, count(*) FILTER (WHERE ended_at IS NULL) AS live, "
        "count(*) FILTER (WHERE archived <> 0) AS archived FROM sessions WHERE namespace = %s",
        (ns,),
    ).fetchone()
    messages = conn.execute(
        "SELECT count(*) AS n, count(*) FILTER (WHERE active = 0) AS archived, "
        "count(*) FILTER (WHERE cjk IS NOT NULL) AS cjk FROM messages WHERE namespace = %s",
        (ns,),
    ).fetchone()
    by_source = conn.execute(
        "SELECT source, count(*) AS n FROM sessions WHERE namespace = %s "
        "GROUP BY source ORDER BY 2 DESC, 1",
        (ns,),
    ).fetchall()
    # The tenant's own rows: the tables (and their size on disk) are shared by every
    # namespace of the database, so their total says nothing about this one.
    size = conn.execute(
        "SELECT (SELECT coalesce(sum(pg_column_size(m.*)), 0) FROM messages m "
        "WHERE m.namespace = %s) + (SELECT coalesce(sum(pg_column_size(s.*)), 0) "
        "FROM sessions s WHERE s.namespace = %s) AS b",
        (ns, ns),
    ).fetchone()
    assert sessions is not None and messages is not None  # aggregates always return a row
    return {
        "sessions": int(sessions["n"]),
        "live_sessions": int(sessions["live"]),
        "archived_sessions": int(sessions["archived"]),
        "messages": int(messages["n"]),
        "archived_messages": int(messages["archived"]),
        "cjk_indexed_messages": int(messages["cjk"]),
        "sessions_by_source": {str(r["source"]): int(r["n"]) for r in by_source},
        "tenant_bytes": int(size["b"]) if size else 0,
    }


# -- the store's own statistics -------------------------------------------------------

# When the server's autovacuum is off for the store's tables (some managed and tuned
# servers turn it off for bulk loads), nothing would refresh the planner's statistics,
# mark the fresh rows all-visible or flush the GIN pending lists, and search plans and
# times would drift as the tables grow. The store then does it itself, with the
# thresholds autovacuum uses by default: ANALYZE after 50 + 10 % rows changed, VACUUM
# after 1,000 + 20 % rows inserted (PostgreSQL 13+ counts inserts for that).
ANALYZE_BASE, ANALYZE_SCALE = 50, 0.1
VACUUM_BASE, VACUUM_SCALE = 1000, 0.2
# The tables search plans depend on (and the HNSW index of message_vectors, which
# keeps deleted rows' entries until VACUUM: memstrata.store.postgres.pgvector).
KEPT_TABLES = ("messages", "sessions", "message_vectors")
# A store looks at the counters after this many write transactions (and at its first)
# or MERGE_ROWS messages, but at most once per NAPTIME_S (as autovacuum looks at a
# database at most once per autovacuum_naptime, 60 s by default), and on close()
# whatever the time. A pass also merges the GIN pending lists its rows wait in (see
# keep_statistics). Merging a list that writers keep filling costs the server more than
# the writers' own flushes (benchmarks/results/store_postgres_append.md: passes every 500
# rows kept their thread busy 90 % of a load); between passes a search reads the rows
# waiting (1,000 of them cost a word or a question 0.4-3.4 ms at p50 at 100k messages,
# 3,000 a question or a phrase 4-6 ms, benchmarks/results/pg_pending_lists.md), after
# close() none.
CHECK_EVERY = 200
MERGE_ROWS = 500
NAPTIME_S = 60.0
# A closing writer that leaves MERGE_ROWS rows or more since its last pass began waits
# for another process's pass (up to CLOSE_WAIT_S) instead of skipping its own: writers
# of one bulk load close together, the first to take the lock merges what was written
# until its pass began, and the rest of the load would stay in the pending lists, read
# by every search until the next write (3,800 rows after 4 writers loaded 100k
# messages: p95 1.2-1.7x that of the lists merged, for every query class). A writer of
# fewer rows (one CLI command's) never waits: the rows it leaves cost a search little.
CLOSE_WAIT_S = 30.0
# Except: each time a store's own writes doubled since it last asked (from GROWN_ROWS
# on), it asks how many rows the planner's statistics give its tenant and, at half the
# tenant's size or less, analyzes messages now, naptime or not, whatever the table's
# counters say and whoever looks after the table: a new tenant in a large table is a
# small change to those counters, and plans made while the statistics barely count a
# tenant read its rows where an index would have found a few. Such passes merge
# nothing; a load of N messages runs at most log2(N / GROWN_ROWS) of them, and of
# several writers of one tenant only the first to find it counted short analyzes.
GROWN_ROWS = 500
# The planner's estimate of a tenant's messages, by the planner's own rule for an
# equality on namespace: the tenant's frequency among the most common values, or, for a
# tenant not among them (a new one, or one of more tenants than the list holds: 100 by
# default), the rows the list leaves over shared by the other distinct values, at most
# the list's least frequency; times the table's rows. Beside it the tenant's size by its
# sessions' counters: what a grown pass checks first, so that of several processes
# writing one tenant only the first to find it undercounted analyzes. (Counting only the
# list's frequencies called every tenant past the hundredth short, and each doubling of
# each writer then analyzed for nothing: the planner's estimate was already right.)
_TENANT_COUNTED = (
    f"SELECT {TENANT_MESSAGES} AS size, {TABLE_MESSAGES} * coalesce(("
    "SELECT coalesce("
    "(SELECT u.f FROM unnest(s.most_common_vals::text::text[], s.most_common_freqs) "
    "AS u(v, f) WHERE u.v = %s), "
    "least((1 - coalesce((SELECT sum(f) FROM unnest(s.most_common_freqs) f), 0) "
    "- s.null_frac) / greatest(CASE WHEN s.n_distinct < 0 "
    f"THEN -s.n_distinct * {TABLE_MESSAGES} ELSE s.n_distinct END "
    "- coalesce(cardinality(s.most_common_freqs), 0), 1), "
    "coalesce((SELECT min(f) FROM unnest(s.most_common_freqs) f), 1))) "
    "FROM pg_stats s WHERE s.schemaname = current_schema() "
    "AND s.tablename = 'messages' AND s.attname = 'namespace'), 0) AS counted"
)

_UNAUTOVACUUMED = (
    "SELECT c.relname AS name, s.n_mod_since_analyze AS changed, "
    "s.n_ins_since_vacuum AS inserted, greatest(c.reltuples, 0) AS rows "
    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
    "WHERE s.relid = ANY(%s::regclass[]) AND NOT ("
    "current_setting('autovacuum') = 'on' AND NOT EXISTS (SELECT 1 FROM "
    "unnest(coalesce(c.reloptions, '{}')) o WHERE o ~* '^autovacuum_enabled=(f|of|n|0)'))"
)


# A tenant written into a table much larger than itself (a 100k-message user beside a
# million others) stays under the table's VACUUM threshold, which counts the table's
# rows: its pages are not marked all-visible, and every index-only read of its newest
# ids (the walks' window bounds, the probe's sample) visits the heap for each id. So a
# store that inserted more than VACUUM_BASE messages, when the rows inserted since the
# table was last vacuumed pass VACUUM_BASE + VACUUM_SCALE of its tenant's messages,
# marks the pages on close() (mark_visible): this VACUUM reads no index (0.13 s after
# 100k messages beside a million). Searches of that tenant after the load: p95
# 0.82-0.97 of unmarked for every class, word 16.9 -> 15.0 ms, boolean 29.0 -> 24.0
# (benchmarks/results/pg_visibility.md).
MARK_VISIBLE = "VACUUM (INDEX_CLEANUP OFF) messages"


def mark_visible(connect: Callable[[], Conn], tenant: str, inserted: int) -> bool:
    """Mark the messages table's pages all-visible (:data:`MARK_VISIBLE`) when this
    writer added more than VACUUM_BASE messages (``inserted``) to ``tenant`` and the rows
    inserted since the table's last VACUUM pass the VACUUM threshold of the tenant's
    size, on a table the server's autovacuum does not look after; whether it ran.
    Outside the maintenance lock, and waiting for a VACUUM of the table already running.

    The rows since the last VACUUM are this writer's or, when more, the server's count
    of every writer's: each of the N writers of one load holds 1/N of it, and with more
    than four none passed the tenant's threshold on its own (a 100k tenant loaded by 8
    writers beside a million rows was left unmarked). The pass visits only the pages not
    marked yet, so of several writers closing together the first does the work."""
    if inserted <= VACUUM_BASE:
        return False
    with connect() as conn:
        table = conn.execute(_UNAUTOVACUUMED, (["messages"],)).fetchone()
        if table is None:
            return False
        unmarked = max(inserted, int(table["inserted"] or 0))
        row = conn.execute(f"SELECT {TENANT_MESSAGES} AS size", (tenant,)).fetchone()
        if row is None or unmarked <= VACUUM_BASE + VACUUM_SCALE * float(row["size"]):
            return False
        _wal_flushed(conn)
        conn.execute(MARK_VISIBLE)
    return True


def _wal_flushed(conn: Conn, timeout: float = 2.0) -> None:
    """Wait (at most ``timeout`` seconds) until the WAL written so far is on disk.

    VACUUM marks a page all-visible only when its rows carry the hint that their
    inserting transaction committed, and a commit made asynchronously (a store of
    durability "normal") gets that hint only once its WAL is flushed, which the server's
    WAL writer does within a few hundred milliseconds: marked at once, the last pages of
    a load stayed unmarked (the pages a search of the newest rows reads first)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() AS lsn").fetchone()
    if row is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = conn.execute(
            "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn AS done", (row["lsn"],)
        ).fetchone()
        if done is not None and done["done"]:
            return
        time.sleep(0.02)


def due(conn: Conn, written: int = 0, unvacuumed: int | None = None) -> list[str]:
    """The VACUUM and ANALYZE statements the store's tables need now, when the server's
    autovacuum does not look after them (empty when it does).

    ``written`` is how many messages this process inserted since its last pass that
    analyzed messages, ``unvacuumed`` (default: ``written``) since its last that
    vacuumed them: the server publishes its counters up to seconds late (each backend
    flushes them when it has been idle a while), so the counts the writer knows are
    taken when larger, which makes the pass at the end of a bulk load see the whole load.
    """
    statements = []
    for r in conn.execute(_UNAUTOVACUUMED, (list(KEPT_TABLES),)).fetchall():
        rows = float(r["rows"])
        mine = r["name"] == "messages"
        own = written if mine else 0
        own_inserts = (written if unvacuumed is None else unvacuumed) if mine else 0
        inserted = max(int(r["inserted"] or 0), own_inserts)
        changed = max(int(r["changed"] or 0), own)
        if inserted > VACUUM_BASE + VACUUM_SCALE * rows:
            statements.append(f"VACUUM (ANALYZE) {r['name']}")
        elif changed > ANALYZE_BASE + ANALYZE_SCALE * rows:
            statements.append(f"ANALYZE {r['name']}")
    return statements


def keep_statistics(
    connect: Callable[[], Conn],
    written: int = 0,
    unvacuumed: int | None = None,
    *,
    merge: bool = False,
    grown: str | None = None,
    wait: float = 0.0,
) -> list[str]:
    """Run what :func:`due` finds, unless another process is at it; return what ran.

    ``written``, ``unvacuumed``: see :func:`due`. ``grown`` (a tenant): only ``ANALYZE
    messages``, when the statistics count the tenant at half its size or less, whatever
    the table's counters say and whoever looks after the table (see GROWN_ROWS).
    ``merge``: merge the GIN pending lists too (a VACUUM of messages merges them itself).
    The lists take 4 MB (see memstrata.store.postgres.schema.GIN_PENDING_LIST_KB) and
    every search reads them, so a writer merges them in its passes (:class:`Keeper`),
    whether or not autovacuum runs. ``connect`` opens a connection of its own
    (autocommit: VACUUM refuses to run in a transaction), closed afterwards.

    ``wait``: seconds to wait for another process's pass to end instead of skipping (a
    closing writer's last pass: :meth:`Keeper.close`).
    """
    with connect() as conn, schema_lock(conn, MAINTENANCE_LOCK, wait) as got:
        if not got:
            return []
        if grown is not None:
            row = conn.execute(_TENANT_COUNTED, (grown, grown)).fetchone()
            short = row is not None and float(row["counted"]) <= float(row["size"]) / 2
            statements = ["ANALYZE messages"] if short else []
        else:
            statements = due(conn, written, unvacuumed)
        if merge and grown is None and "VACUUM (ANALYZE) messages" not in statements:
            statements.append(MERGE_PENDING)
        for sql in statements:
            conn.execute(sql)
        return statements


class Keeper:
    """Counts a store's write transactions and, every :data:`CHECK_EVERY` (or
    :data:`MERGE_ROWS` messages) but at most once per :data:`NAPTIME_S`, runs
    :func:`keep_statistics` on a thread of its own, so no write waits for it.

    :meth:`close` waits for a running pass and, when there were writes since the last
    pass began, runs one more (waiting for another process's, see
    :data:`CLOSE_WAIT_S`), so a bulk load that ends with ``close()`` leaves its
    statistics fresh and its rows merged into the indexes.
    """

    def __init__(self, connect: Callable[[], Conn], namespace: str | None = None) -> None:
        # namespace: the store's tenant, whose growth may call for a pass of its own
        # (GROWN_ROWS); None: none such.
        self._connect = connect
        self._namespace = namespace
        self._lock = threading.Lock()
        self._writes = 0
        self._checked = 0
        # Messages written since the last pass began (what it merges), and since the
        # last pass that analyzed, and that vacuumed, messages (what due() takes as
        # written: the server's counters may not show them yet).
        self._rows = 0
        self._unanalyzed = 0
        self._unvacuumed = 0
        self._written = 0
        # What the store had written when it last asked whether its tenant is counted.
        self._asked = 0
        self._at_start = (0, 0, 0)
        # When the last pass during writes began (time.monotonic()), None: none yet.
        self._began: float | None = None
        self._thread: threading.Thread | None = None
        self.passes: list[list[str]] = []
        self.error: BaseException | None = None

    def wrote(self, messages: int = 0) -> None:
        """One write transaction committed, inserting ``messages`` messages."""
        with self._lock:
            self._writes += 1
            self._rows += messages
            self._unanalyzed += messages
            self._unvacuumed += messages
            self._written += messages
            if (self._writes - 1) % CHECK_EVERY and self._rows < MERGE_ROWS:
                return
            if self._thread is not None and self._thread.is_alive():
                return
            now = time.monotonic()
            grown = self._namespace is not None and self._written - self._asked >= max(
                GROWN_ROWS, self._asked
            )
            napping = self._began is not None and now - self._began < NAPTIME_S
            if napping and not grown:
                return
            if napping:
                # Statistics only (GROWN_ROWS): what is left to merge, and the writes
                # close() must see a pass for, stay counted for the next full pass.
                self._at_start = (0, self._unanalyzed, 0)
                self._asked = self._written
            else:
                self._began = now
                self._begin()
            self._thread = threading.Thread(
                target=self._run, args=(napping,), name="memstrata-statistics", daemon=True
            )
            self._thread.start()

    def _begin(self) -> None:
        # Under the lock: what the pass starting now covers.
        self._checked = self._writes
        self._at_start = (self._rows, self._unanalyzed, self._unvacuumed)
        self._rows = 0

    def _run(self, grown: bool = False, closing: bool = False) -> None:
        # grown: the pass GROWN_ROWS asks for within the naptime (statistics only);
        # closing: close()'s last pass (see CLOSE_WAIT_S).
        rows, unanalyzed, unvacuumed = self._at_start
        try:
            ran = keep_statistics(
                self._connect,
                unanalyzed,
                unvacuumed,
                merge=rows > 0,
                grown=self._namespace if grown else None,
                wait=CLOSE_WAIT_S if closing and rows >= MERGE_ROWS else 0.0,
            )
        except Exception as exc:  # the next pass retries; a write never fails for this
            self.error = exc
            return
        if ran:
            self.passes.append(ran)
        with self._lock:
            if "VACUUM (ANALYZE) messages" in ran:
                self._unvacuumed -= unvacuumed
                self._unanalyzed -= unanalyzed
            elif "ANALYZE messages" in ran:
                self._unanalyzed -= unanalyzed

    def wait(self) -> bool:
        """Wait for a running pass to end; whether writes came after it began (the next
        pass then sees every write made so far)."""
        thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            pending = self._writes > self._checked
            if pending:
                self._begin()
        return pending

    def close(self) -> None:
        """Wait for a running pass to end; run a last one if writes came after it began,
        and mark the tenant's pages visible if its writes call for it (mark_visible)."""
        if self.wait():
            self._run(closing=True)
        if self._namespace is None or self._unvacuumed <= VACUUM_BASE:
            return
        try:
            if mark_visible(self._connect, self._namespace, self._unvacuumed):
                self.passes.append([MARK_VISIBLE])
                self._unvacuumed = 0
        except Exception as exc:  # as a pass's: the data is written, a later pass retries
            self.error = exc
