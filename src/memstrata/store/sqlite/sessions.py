"""SQLite primitives over the ``sessions`` table: rows, titles, lineage links, listings.

Each method is one or two statements on the transaction's connection; the rules that
combine them (title numbering, chain walks, the listing's page) are in :mod:`memstrata.store`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from memstrata.errors import TitleConflictError
from memstrata.store.backend import (
    FILLED_ON_CONFLICT,
    KIND_BY_TIMING,
    Dialect,
    Edge,
    ListingFilter,
    Transaction,
)
from memstrata.store.codec import decode_content
from memstrata.store.titles import escape_like

# SQLite caps bound parameters per statement: id lists go in slices.
CHUNK = 500
# Embedding rows of messages (created by migration m003), keyed by message id.
VECTOR_TABLE = "message_vectors"

# The kind of child ``s`` of parent ``p`` (NULL for a root or an orphan), one SQL
# expression so that every query classifies a row the same way (memstrata.store.lineage
# documents the rule).
KIND_SQL = f"""(CASE
    WHEN s.parent_session_id IS NULL OR p.id IS NULL THEN NULL
    WHEN s.lineage_kind IS NOT NULL THEN s.lineage_kind
    WHEN json_valid(s.model_config)
         AND json_type(s.model_config, '$._delegate_from') IS NOT NULL THEN 'delegate'
    WHEN json_valid(s.model_config)
         AND json_type(s.model_config, '$._branched_from') IS NOT NULL THEN 'branch'
{KIND_BY_TIMING}
END)"""
_FROM = "FROM sessions s LEFT JOIN sessions p ON p.id = s.parent_session_id"
_EDGE = "s.id, s.parent_session_id, s.end_reason, s.ended_at, s.started_at, s.last_active"
# A session's activity as the listing orders by it (a zero last_active counts as unset).
_ACTIVITY = "COALESCE(NULLIF(s.last_active, 0), s.started_at)"
_LISTED = f"COALESCE({KIND_SQL}, 'root') NOT IN ('compression', 'delegate')"


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def marks(n: int) -> str:
    """``?,?,...`` for ``n`` parameters."""
    return ",".join("?" * n)


# SQLite's parameters: one ``?`` per value of an ``IN`` list.
DIALECT = Dialect("?", lambda column, values: (f"{column} IN ({marks(len(values))})", [*values]))


class SessionRows(Transaction):
    """The session primitives of a SQLite transaction."""

    conn: sqlite3.Connection

    def session_exists(self, session_id: str, *, lock: bool = False) -> bool:
        # One writer at a time already: ``lock`` has nothing to add on SQLite.
        row = self.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return row is not None

    def session_rows(self, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for part in chunks(list(dict.fromkeys(session_ids))):
            for row in self.conn.execute(
                f"SELECT * FROM sessions WHERE id IN ({marks(len(part))})", list(part)
            ):
                out[row["id"]] = dict(row)
        return out

    def upsert_session(self, values: Mapping[str, Any]) -> None:
        updates = ", ".join(
            f"{c} = COALESCE(sessions.{c}, excluded.{c})" for c in FILLED_ON_CONFLICT
        )
        self.conn.execute(
            f"INSERT INTO sessions ({', '.join(values)}) VALUES ({marks(len(values))}) "
            f"ON CONFLICT(id) DO UPDATE SET {updates}",
            list(values.values()),
        )

    def update_session(
        self, session_id: str, values: Mapping[str, Any], add: Mapping[str, float], live: bool
    ) -> int:
        sets = DIALECT.updates(values, add)
        alive = " AND ended_at IS NULL" if live else ""
        return self.conn.execute(
            f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?{alive}",
            [*values.values(), *add.values(), session_id],
        ).rowcount

    def titled(self, title: str, *, numbered: bool = False) -> list[dict[str, Any]]:
        sql = "SELECT id, title, started_at FROM sessions WHERE title = ?"
        params: list[Any] = [title]
        if numbered:
            sql += " OR title LIKE ? ESCAPE '\\'"
            params.append(escape_like(title) + " #%")
        return [dict(r) for r in self.conn.execute(sql, params)]

    def write_title(self, session_id: str, title: str | None) -> None:
        try:
            self.conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
        except sqlite3.IntegrityError as exc:
            raise TitleConflictError(
                f"Title '{title}' was just taken by another session. Choose another title."
            ) from exc

    def namespace_counts(self) -> list[dict[str, Any]]:
        # One file, one tenant: curated memory lives in files, not in this database.
        row = self.conn.execute(
            "SELECT (SELECT count(*) FROM sessions) AS sessions, "
            "(SELECT count(*) FROM messages) AS messages, "
            "(SELECT max(timestamp) FROM messages) AS last_active"
        ).fetchone()
        return [
            {
                "namespace": None,
                "sessions": int(row["sessions"]),
                "messages": int(row["messages"]),
                "memory_rows": 0,
                "last_active": row["last_active"],
            }
        ]

    def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\' ORDER BY started_at DESC LIMIT ?",
            (escape_like(prefix) + "%", limit),
        )
        return [str(r["id"]) for r in rows]

    def delete_sessions(self, session_ids: Sequence[str]) -> None:
        key = vector_key(self.conn)
        for part in chunks(session_ids):
            if key is not None:
                self.conn.execute(
                    f"DELETE FROM {VECTOR_TABLE} WHERE {key} IN "
                    f"(SELECT id FROM messages WHERE session_id IN ({marks(len(part))}))",
                    part,
                )
            # Deleted explicitly (not by cascade) so the index triggers visibly run.
            self.conn.execute(
                f"DELETE FROM messages WHERE session_id IN ({marks(len(part))})", part
            )
            self.conn.execute(f"DELETE FROM sessions WHERE id IN ({marks(len(part))})", part)

    def ended_before(self, cutoff: float, source: str | None) -> list[str]:
        sql = "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?"
        params: list[Any] = [cutoff]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        return [r["id"] for r in self.conn.execute(sql + " ORDER BY ended_at", params)]

    # -- lineage -------------------------------------------------------------------------

    def parent_kind(self, session_id: str) -> tuple[str | None, str | None]:
        row = self.conn.execute(
            f"SELECT s.parent_session_id AS parent, {KIND_SQL} AS kind {_FROM} WHERE s.id = ?",
            (session_id,),
        ).fetchone()
        if row is None or row["kind"] is None:
            return None, None
        return row["parent"], row["kind"]

    def continuations(self, parent: str | None) -> list[Edge]:
        if parent is None:
            sql, params = f"SELECT {_EDGE} {_FROM} WHERE {KIND_SQL} = 'compression'", []
        else:
            sql = (
                f"SELECT {_EDGE} {_FROM} WHERE s.parent_session_id = ? "
                f"AND {KIND_SQL} = 'compression'"
            )
            params = [parent]
        return [Edge.from_row(r) for r in self.conn.execute(sql, params)]

    def children(self, parents: Sequence[str], kinds: Sequence[str]) -> list[str]:
        out: list[str] = []
        for part in chunks(parents):
            out += [
                str(r["id"])
                for r in self.conn.execute(
                    f"SELECT s.id FROM sessions s JOIN sessions p ON p.id = s.parent_session_id "
                    f"WHERE s.parent_session_id IN ({marks(len(part))}) "
                    f"AND {KIND_SQL} IN ({marks(len(kinds))}) ORDER BY s.started_at, s.id",
                    [*part, *kinds],
                )
            ]
        return out

    def with_parent(self, session_ids: Sequence[str]) -> list[str]:
        out: list[str] = []
        for part in chunks(session_ids):
            out += [
                str(r["id"])
                for r in self.conn.execute(
                    f"SELECT id FROM sessions WHERE id IN ({marks(len(part))}) "
                    "AND parent_session_id IS NOT NULL",
                    list(part),
                )
            ]
        return out

    def listed_by_start(self, where: ListingFilter, limit: int, offset: int) -> list[str]:
        clauses, params = where.clauses(DIALECT)
        rows = self.conn.execute(
            f"SELECT s.id {_FROM} WHERE {' AND '.join([_LISTED, *clauses])} "
            "ORDER BY s.started_at DESC, s.id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [str(r["id"]) for r in rows]

    def listed_by_activity(
        self, where: ListingFilter
    ) -> Generator[tuple[str, str | None, float], None, None]:
        clauses, params = where.clauses(DIALECT)
        passes = " AND ".join([_LISTED, *clauses])
        # Sessions without a parent (most of them) are roots: no join, no kind to work out.
        roots = " AND ".join(["s.parent_session_id IS NULL", *clauses])
        cursor = self.conn.execute(
            f"SELECT s.id, NULL AS kind, {_ACTIVITY} AS activity FROM sessions s "
            f"WHERE {roots} UNION ALL "
            f"SELECT s.id, {KIND_SQL} AS kind, {_ACTIVITY} AS activity {_FROM} "
            f"WHERE s.parent_session_id IS NOT NULL AND ({KIND_SQL} = 'compression' OR ({passes})) "
            "ORDER BY activity DESC",
            [*params, *params],
        )
        try:
            for row in cursor:
                yield row["id"], row["kind"], row["activity"]
        finally:
            cursor.close()

    def is_listed(self, session_id: str, where: ListingFilter) -> bool:
        clauses, params = where.clauses(DIALECT)
        row = self.conn.execute(
            f"SELECT 1 {_FROM} WHERE s.id = ? AND {' AND '.join([_LISTED, *clauses])}",
            [session_id, *params],
        ).fetchone()
        return row is not None

    def first_user_content(self, session_id: str) -> Any:
        row = self.conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
            "ORDER BY id LIMIT 1",
            (session_id,),
        ).fetchone()
        return None if row is None else decode_content(row["content"])

    # -- meta and caches -----------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def set_meta(self, key: str, value: str | None) -> None:
        self.conn.execute(
            "INSERT INTO state_meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def clear_summaries(self, session_ids: Sequence[str] | None) -> int:
        if session_ids is None:
            return self.conn.execute("DELETE FROM summary_cache").rowcount
        removed = 0
        for part in chunks(session_ids):
            removed += self.conn.execute(
                f"DELETE FROM summary_cache WHERE tip_session_id IN ({marks(len(part))}) "
                f"OR root_session_id IN ({marks(len(part))})",
                [*part, *part],
            ).rowcount
        return removed

    def clear_expansions(self) -> int:
        return self.conn.execute("DELETE FROM query_expansions").rowcount

    def cached_summary(
        self, tip_session_id: str, message_count: int, last_message_id: int, query: str
    ) -> str | None:
        row = self.conn.execute(
            "SELECT summary FROM summary_cache WHERE tip_session_id = ? "
            "AND message_count = ? AND last_message_id = ? AND query = ?",
            (tip_session_id, message_count, last_message_id, query),
        ).fetchone()
        return None if row is None else str(row[0])

    def put_summary(self, entry: Mapping[str, Any]) -> None:
        self.conn.execute(
            "DELETE FROM summary_cache WHERE tip_session_id = ? AND query = ?",
            (entry["tip_session_id"], entry["query"]),
        )
        self.conn.execute(
            f"INSERT OR REPLACE INTO summary_cache ({', '.join(entry)}) "
            f"VALUES ({marks(len(entry))})",
            list(entry.values()),
        )

    def cached_expansion(self, model: str, query: str) -> str | None:
        row = self.conn.execute(
            "SELECT subqueries FROM query_expansions WHERE model = ? AND query = ?",
            (model, query),
        ).fetchone()
        return None if row is None else str(row[0])

    def put_expansion(self, model: str, query: str, subqueries: str, created_at: float) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO query_expansions(model, query, subqueries, created_at) "
            "VALUES (?, ?, ?, ?)",
            (model, query, subqueries, created_at),
        )


def vector_key(conn: sqlite3.Connection) -> str | None:
    """The message-id column of the vector table, or None when there is no such table.

    A delete removes its rows explicitly so that no vector of a deleted message
    survives, trigger or not.
    """
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({VECTOR_TABLE})").fetchall()]
    if not columns:
        return None
    for name in ("message_id", "id"):
        if name in columns:
            return name
    return "rowid"
