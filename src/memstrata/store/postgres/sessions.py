"""PostgreSQL primitives over the ``sessions`` table: rows, titles, lineage links, listings.

Every statement is scoped to the transaction's tenant (``namespace``); the rules that
combine them are in :mod:`memstrata.store`, shared with SQLite.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

import psycopg

from memstrata.errors import TitleConflictError
from memstrata.store.backend import (
    FILLED_ON_CONFLICT,
    KIND_BY_TIMING,
    Dialect,
    Edge,
    ListingFilter,
    Transaction,
)
from memstrata.store.postgres.codec import from_pg_content, pg_text, session_row
from memstrata.store.titles import escape_like

Conn = psycopg.Connection[Any]

# The classification of a child (memstrata.store.lineage documents the rule), with
# memstrata_json_has_key standing in for SQLite's json_valid/json_type.
KIND_SQL = f"""(CASE
    WHEN s.parent_session_id IS NULL OR p.id IS NULL THEN NULL
    WHEN s.lineage_kind IS NOT NULL THEN s.lineage_kind
    WHEN memstrata_json_has_key(s.model_config, '_delegate_from') THEN 'delegate'
    WHEN memstrata_json_has_key(s.model_config, '_branched_from') THEN 'branch'
{KIND_BY_TIMING}
END)"""
_FROM = (
    "FROM sessions s LEFT JOIN sessions p "
    "ON p.namespace = s.namespace AND p.id = s.parent_session_id"
)
_EDGE = "s.id, s.parent_session_id, s.end_reason, s.ended_at, s.started_at, s.last_active"
# A session's activity as the listing orders by it (a zero last_active counts as unset).
_ACTIVITY = "COALESCE(NULLIF(s.last_active, 0), s.started_at)"
_LISTED = f"COALESCE({KIND_SQL}, 'root') NOT IN ('compression', 'delegate')"
# Rows the listing's server-side cursor brings over per round trip.
_LISTING_BATCH = 200


# PostgreSQL's parameters: an ``IN`` list is one array parameter.
DIALECT = Dialect("%s", lambda column, values: (f"{column} = ANY(%s)", [list(values)]))


class SessionRows(Transaction):
    """The session primitives of a PostgreSQL transaction."""

    conn: Conn
    ns: str
    # Sessions deleted (see memstrata.store.postgres.ranking.changed).
    recounted: bool

    def session_exists(self, session_id: str, *, lock: bool = False) -> bool:
        # ``lock`` takes the row lock, which serialises writers of one session (counters,
        # compaction) the way SQLite's single writer does.
        sql = "SELECT 1 AS one FROM sessions WHERE namespace = %s AND id = %s"
        row = self.conn.execute(sql + (" FOR UPDATE" if lock else ""), (self.ns, session_id))
        return row.fetchone() is not None

    def session_rows(self, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT * FROM sessions WHERE namespace = %s AND id = ANY(%s)",
            (self.ns, list(dict.fromkeys(session_ids))),
        )
        return {r["id"]: session_row(r) for r in rows}

    def upsert_session(self, values: Mapping[str, Any]) -> None:
        clean = {k: pg_text(v) if isinstance(v, str) else v for k, v in values.items()}
        columns = ["namespace", *clean]
        updates = ", ".join(
            f"{c} = COALESCE(sessions.{c}, EXCLUDED.{c})" for c in FILLED_ON_CONFLICT
        )
        self.conn.execute(
            f"INSERT INTO sessions ({', '.join(columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT (namespace, id) DO UPDATE SET {updates}",
            [self.ns, *clean.values()],
        )

    def update_session(
        self, session_id: str, values: Mapping[str, Any], add: Mapping[str, float], live: bool
    ) -> int:
        sets = DIALECT.updates(values, add)
        alive = " AND ended_at IS NULL" if live else ""
        clean = [pg_text(v) if isinstance(v, str) else v for v in values.values()]
        return int(
            self.conn.execute(
                f"UPDATE sessions SET {', '.join(sets)} WHERE namespace = %s AND id = %s{alive}",
                [*clean, *add.values(), self.ns, session_id],
            ).rowcount
        )

    def titled(self, title: str, *, numbered: bool = False) -> list[dict[str, Any]]:
        sql = "SELECT id, title, started_at FROM sessions WHERE namespace = %s AND (title = %s"
        params: list[Any] = [self.ns, title]
        if numbered:
            sql += " OR title LIKE %s"
            params.append(escape_like(title) + " #%")
        return [dict(r) for r in self.conn.execute(sql + ")", params).fetchall()]

    def write_title(self, session_id: str, title: str | None) -> None:
        try:
            # A savepoint, so that losing the race for the title leaves the transaction
            # usable for the error path.
            with self.conn.transaction():
                self.conn.execute(
                    "UPDATE sessions SET title = %s WHERE namespace = %s AND id = %s",
                    (title, self.ns, session_id),
                )
        except psycopg.errors.UniqueViolation as exc:
            raise TitleConflictError(
                f"Title '{title}' was just taken by another session. Choose another title."
            ) from exc

    def namespace_counts(self) -> list[dict[str, Any]]:
        # Across tenants on purpose (an administrator's view): a tenant with only
        # curated memory rows is listed too.
        rows = self.conn.execute(
            "SELECT n.namespace, coalesce(s.n, 0) AS sessions, coalesce(m.n, 0) AS messages, "
            "coalesce(c.n, 0) AS memory_rows, greatest(s.last, m.last) AS last_active "
            "FROM (SELECT namespace FROM sessions UNION SELECT namespace FROM curated_memory "
            "UNION SELECT namespace FROM curated_memory_history) n "
            "LEFT JOIN (SELECT namespace, count(*) AS n, max(started_at) AS last "
            "FROM sessions GROUP BY namespace) s ON s.namespace = n.namespace "
            "LEFT JOIN (SELECT namespace, count(*) AS n, max(timestamp) AS last "
            "FROM messages GROUP BY namespace) m ON m.namespace = n.namespace "
            "LEFT JOIN (SELECT namespace, count(*) AS n FROM curated_memory "
            "WHERE content <> '' GROUP BY namespace) c ON c.namespace = n.namespace "
            "ORDER BY n.namespace"
        ).fetchall()
        return [
            {
                "namespace": str(r["namespace"]),
                "sessions": int(r["sessions"]),
                "messages": int(r["messages"]),
                "memory_rows": int(r["memory_rows"]),
                "last_active": None if r["last_active"] is None else float(r["last_active"]),
            }
            for r in rows
        ]

    def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM sessions WHERE namespace = %s AND id LIKE %s "
            "ORDER BY started_at DESC LIMIT %s",
            (self.ns, escape_like(prefix) + "%", limit),
        )
        return [str(r["id"]) for r in rows.fetchall()]

    def delete_sessions(self, session_ids: Sequence[str]) -> None:
        ids = list(session_ids)
        self.recounted = True
        # Vectors go with their messages (ON DELETE CASCADE).
        self.conn.execute(
            "DELETE FROM messages WHERE namespace = %s AND session_id = ANY(%s)", (self.ns, ids)
        )
        self.conn.execute(
            "DELETE FROM sessions WHERE namespace = %s AND id = ANY(%s)", (self.ns, ids)
        )

    def ended_before(self, cutoff: float, source: str | None) -> list[str]:
        sql = (
            "SELECT id FROM sessions WHERE namespace = %s AND ended_at IS NOT NULL "
            "AND ended_at < %s"
        )
        params: list[Any] = [self.ns, cutoff]
        if source is not None:
            sql += " AND source = %s"
            params.append(source)
        return [r["id"] for r in self.conn.execute(sql + " ORDER BY ended_at", params).fetchall()]

    # -- lineage -------------------------------------------------------------------------

    def parent_kind(self, session_id: str) -> tuple[str | None, str | None]:
        row = self.conn.execute(
            f"SELECT s.parent_session_id AS parent, {KIND_SQL} AS kind {_FROM} "
            "WHERE s.namespace = %s AND s.id = %s",
            (self.ns, session_id),
        ).fetchone()
        if row is None or row["kind"] is None:
            return None, None
        return row["parent"], row["kind"]

    def continuations(self, parent: str | None) -> list[Edge]:
        sql = f"SELECT {_EDGE} {_FROM} WHERE s.namespace = %s AND {KIND_SQL} = 'compression'"
        params: list[Any] = [self.ns]
        if parent is not None:
            sql += " AND s.parent_session_id = %s"
            params.append(parent)
        return [Edge.from_row(r) for r in self.conn.execute(sql, params).fetchall()]

    def children(self, parents: Sequence[str], kinds: Sequence[str]) -> list[str]:
        rows = self.conn.execute(
            f"SELECT s.id {_FROM} WHERE s.namespace = %s AND p.id IS NOT NULL "
            f"AND s.parent_session_id = ANY(%s) AND {KIND_SQL} = ANY(%s) "
            "ORDER BY s.started_at, s.id",
            (self.ns, list(parents), list(kinds)),
        )
        return [str(r["id"]) for r in rows.fetchall()]

    def with_parent(self, session_ids: Sequence[str]) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM sessions WHERE namespace = %s AND id = ANY(%s) "
            "AND parent_session_id IS NOT NULL",
            (self.ns, list(session_ids)),
        )
        return [str(r["id"]) for r in rows.fetchall()]

    def listed_by_start(self, where: ListingFilter, limit: int, offset: int) -> list[str]:
        clauses, params = where.clauses(DIALECT)
        rows = self.conn.execute(
            f"SELECT s.id {_FROM} WHERE {' AND '.join(['s.namespace = %s', _LISTED, *clauses])} "
            "ORDER BY s.started_at DESC, s.id DESC LIMIT %s OFFSET %s",
            [self.ns, *params, limit, offset],
        )
        return [str(r["id"]) for r in rows.fetchall()]

    def listed_by_activity(
        self, where: ListingFilter
    ) -> Generator[tuple[str, str | None, float], None, None]:
        clauses, params = where.clauses(DIALECT)
        passes = " AND ".join([_LISTED, *clauses])
        # Sessions without a parent (most of them) are roots: no join, no kind to work out.
        roots = " AND ".join(["s.namespace = %s", "s.parent_session_id IS NULL", *clauses])
        # A server-side cursor: the rows come over in batches, and the scan stops with the page.
        with self.conn.cursor(name="memstrata_listing") as cursor:
            cursor.itersize = _LISTING_BATCH
            cursor.execute(
                f"SELECT s.id, NULL AS kind, {_ACTIVITY} AS activity FROM sessions s "
                f"WHERE {roots} UNION ALL "
                f"SELECT s.id, {KIND_SQL} AS kind, {_ACTIVITY} AS activity {_FROM} "
                "WHERE s.namespace = %s AND s.parent_session_id IS NOT NULL "
                f"AND ({KIND_SQL} = 'compression' OR ({passes})) "
                "ORDER BY activity DESC",
                [self.ns, *params, self.ns, *params],
            )
            for row in cursor:
                yield row["id"], row["kind"], row["activity"]

    def is_listed(self, session_id: str, where: ListingFilter) -> bool:
        clauses, params = where.clauses(DIALECT)
        row = self.conn.execute(
            f"SELECT 1 AS one {_FROM} WHERE s.namespace = %s AND s.id = %s AND "
            f"{' AND '.join([_LISTED, *clauses])}",
            [self.ns, session_id, *params],
        )
        return row.fetchone() is not None

    def first_user_content(self, session_id: str) -> Any:
        row = self.conn.execute(
            "SELECT content FROM messages WHERE namespace = %s AND session_id = %s "
            "AND role = 'user' ORDER BY id LIMIT 1",
            (self.ns, session_id),
        ).fetchone()
        return None if row is None else from_pg_content(row["content"])

    # -- meta and caches -----------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute(
            "SELECT value FROM state_meta WHERE namespace = %s AND key = %s", (self.ns, key)
        ).fetchone()
        return row["value"] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        self.conn.execute(
            "INSERT INTO state_meta(namespace, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value",
            (self.ns, pg_text(key), pg_text(value)),
        )

    def clear_summaries(self, session_ids: Sequence[str] | None) -> int:
        if session_ids is None:
            cur = self.conn.execute("DELETE FROM summary_cache WHERE namespace = %s", (self.ns,))
        else:
            wanted = list(session_ids)
            cur = self.conn.execute(
                "DELETE FROM summary_cache WHERE namespace = %s "
                "AND (tip_session_id = ANY(%s) OR root_session_id = ANY(%s))",
                (self.ns, wanted, wanted),
            )
        return int(cur.rowcount)

    def clear_expansions(self) -> int:
        cur = self.conn.execute("DELETE FROM query_expansions WHERE namespace = %s", (self.ns,))
        return int(cur.rowcount)

    def cached_summary(
        self, tip_session_id: str, message_count: int, last_message_id: int, query: str
    ) -> str | None:
        row = self.conn.execute(
            "SELECT summary FROM summary_cache WHERE namespace = %s AND tip_session_id = %s "
            "AND message_count = %s AND last_message_id = %s AND query = %s",
            (self.ns, tip_session_id, message_count, last_message_id, pg_text(query)),
        ).fetchone()
        return None if row is None else str(row["summary"])

    def put_summary(self, entry: Mapping[str, Any]) -> None:
        clean = {k: pg_text(v) if isinstance(v, str) else v for k, v in entry.items()}
        self.conn.execute(
            "DELETE FROM summary_cache WHERE namespace = %s AND tip_session_id = %s AND query = %s",
            (self.ns, clean["tip_session_id"], clean["query"]),
        )
        columns = ["namespace", *clean]
        self.conn.execute(
            f"INSERT INTO summary_cache ({', '.join(columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))}) "
            "ON CONFLICT (namespace, tip_session_id, message_count, last_message_id, query) "
            "DO UPDATE SET summary = EXCLUDED.summary, model = EXCLUDED.model, "
            "created_at = EXCLUDED.created_at",
            [self.ns, *clean.values()],
        )

    def cached_expansion(self, model: str, query: str) -> str | None:
        row = self.conn.execute(
            "SELECT subqueries FROM query_expansions WHERE namespace = %s AND model = %s "
            "AND query = %s",
            (self.ns, pg_text(model), pg_text(query)),
        ).fetchone()
        return None if row is None else str(row["subqueries"])

    def put_expansion(self, model: str, query: str, subqueries: str, created_at: float) -> None:
        self.conn.execute(
            "INSERT INTO query_expansions(namespace, model, query, subqueries, created_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, model, query) "
            "DO UPDATE SET subqueries = EXCLUDED.subqueries, created_at = EXCLUDED.created_at",
            (self.ns, pg_text(model), pg_text(query), pg_text(subqueries), created_at),
        )
