"""Index health, reindexing, statistics and counts for the PostgreSQL session store.

On PostgreSQL the word index (a generated ``tsvector``) and the trigram index (an
expression index) are derived by the server and cannot drift from the rows; what can go
wrong is an index dropped or left invalid (a failed ``CREATE INDEX CONCURRENTLY``), and
CJK bigrams written by an older or foreign writer. Those are what is checked and fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from memstrata.query.cjk import CJK_RUN
from memstrata.store.postgres.messages import cjk_vector
from memstrata.store.postgres.schema import SEARCH_INDEXES

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
                    "UPDATE messages SET cjk = %s::tsvector WHERE id = %s",
                    [
                        (cjk_vector(r["content"], r["tool_name"], r["tool_calls"]), r["id"])
                        for r in rows
                    ],
                )
        last_id = int(rows[-1]["id"])
        done += len(rows)
        if progress is not None:
            progress("messages_fts_cjk", done, total)
    with db.connection() as conn:
        cjk_row = conn.execute(
            "SELECT count(*) AS n FROM messages WHERE namespace = %s AND cjk IS NOT NULL", (ns,)
        ).fetchone()
    for stage in ("messages_fts", "messages_fts_trigram"):
        if progress is not None:
            progress(stage, total, total)
    return {
        "messages_fts": total,
        "messages_fts_trigram": total,
        "messages_fts_cjk": int(cjk_row["n"]) if cjk_row else 0,
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


def optimize(db: Database) -> None:
    """ANALYZE the tables and flush the GIN pending lists into the indexes."""
    statements = [f"ANALYZE {t}" for t in _TABLES]
    statements += [
        f"SELECT gin_clean_pending_list('{name}'::regclass)"
        for name, sql in SEARCH_INDEXES.items()
        if "USING gin" in sql  # the tenant's id order is a btree: no pending list
    ]
    _autocommit(db, statements)


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
