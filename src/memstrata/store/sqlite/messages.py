"""SQLite primitives over the ``messages`` table: insert, read, archive, delete, vectors.

Counters follow Hermes: ``message_count`` counts the live (``active=1``) messages,
``tool_call_count`` the tool calls stored in the session's rows. The full-text indexes
follow the rows through triggers (``migrations.m001``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from memstrata.store.backend import Transaction
from memstrata.store.codec import MessageValues, row_to_message
from memstrata.store.hits import text_of
from memstrata.store.sqlite.sessions import DIALECT, VECTOR_TABLE, chunks, marks, vector_key

_TOOL_CALLS_IN_ROWS = (
    "COALESCE(SUM(CASE WHEN tool_calls IS NULL THEN 0 "
    "WHEN json_valid(tool_calls) AND json_type(tool_calls) = 'array' "
    "THEN json_array_length(tool_calls) ELSE 1 END), 0)"
)
_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
    "timestamp, token_count, finish_reason, reasoning, api_content) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Rows recall may show: live and compaction-archived ones, not rewound ones.
_SHOWN = "(active = 1 OR compacted = 1)"


def _visible_where(
    session_ids: Sequence[str],
    hide_live: Sequence[str],
    below: int | None,
    above: int | None,
) -> tuple[str, list[Any]]:
    window, params = DIALECT.window("", hide_live, below, above)
    return f"session_id IN ({marks(len(session_ids))}) AND {_SHOWN}{window}", [
        *session_ids,
        *params,
    ]


class MessageRows(Transaction):
    """The message primitives of a SQLite transaction."""

    conn: sqlite3.Connection

    def insert_messages(self, session_id: str, rows: Sequence[MessageValues]) -> list[int] | None:
        newest = max(v.timestamp for v in rows)
        counted = self.conn.execute(
            "UPDATE sessions SET message_count = message_count + ?, "
            "tool_call_count = tool_call_count + ?, "
            "last_active = max(COALESCE(last_active, ?), ?) WHERE id = ?",
            (len(rows), sum(v.n_tool_calls for v in rows), newest, newest, session_id),
        )
        if counted.rowcount == 0:
            return None  # no such session: nothing written
        ids: list[int] = []
        for v in rows:
            cursor = self.conn.execute(
                _INSERT,
                (
                    session_id,
                    v.role,
                    v.content,
                    v.tool_call_id,
                    v.tool_calls,
                    v.tool_name,
                    v.timestamp,
                    v.token_count,
                    v.finish_reason,
                    v.reasoning,
                    v.api_content,
                ),
            )
            ids.append(int(cursor.lastrowid or 0))
        return ids

    def messages(self, session_id: str, *, include_inactive: bool) -> list[dict[str, Any]]:
        active = "" if include_inactive else " AND active = 1"
        rows = self.conn.execute(
            f"SELECT * FROM messages WHERE session_id = ?{active} ORDER BY id", (session_id,)
        )
        return [row_to_message(r) for r in rows]

    def message(self, message_id: int) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
        return None if row is None else row_to_message(row)

    def neighbours(
        self, session_id: str, message_id: int, count: int, *, before: bool
    ) -> list[dict[str, Any]]:
        op, order = ("<", "DESC") if before else (">", "ASC")
        rows = self.conn.execute(
            f"SELECT * FROM messages WHERE session_id = ? AND id {op} ? ORDER BY id {order} "
            "LIMIT ?",
            (session_id, message_id, count),
        )
        return [row_to_message(r) for r in rows]

    def count_beyond(self, session_id: str, first: int, last: int) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT sum(id < ?), sum(id > ?) FROM messages WHERE session_id = ?",
            (first, last, session_id),
        ).fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    def archive_messages(self, session_id: str, ids: Sequence[int] | None, compacted: bool) -> int:
        if ids is None:
            return self.conn.execute(
                "UPDATE messages SET active = 0, compacted = ? WHERE session_id = ? AND active = 1",
                (int(compacted), session_id),
            ).rowcount
        changed = 0
        for part in chunks(ids):
            changed += self.conn.execute(
                "UPDATE messages SET active = 0, compacted = ? WHERE session_id = ? "
                f"AND active = 1 AND id IN ({marks(len(part))})",
                (int(compacted), session_id, *part),
            ).rowcount
        return changed

    def delete_session_messages(self, session_id: str, *, active_only: bool) -> int:
        active = " AND active = 1" if active_only else ""
        return self.conn.execute(
            f"DELETE FROM messages WHERE session_id = ?{active}", (session_id,)
        ).rowcount

    def delete_messages(self, message_ids: Sequence[int]) -> tuple[int, list[str]]:
        sessions: set[str] = set()
        deleted = 0
        key = vector_key(self.conn)
        for part in chunks(message_ids):
            where = f"id IN ({marks(len(part))})"
            sessions.update(
                str(r[0])
                for r in self.conn.execute(
                    f"SELECT DISTINCT session_id FROM messages WHERE {where}", part
                )
            )
            if key is not None:
                self.conn.execute(
                    f"DELETE FROM {VECTOR_TABLE} WHERE {key} IN ({marks(len(part))})", part
                )
            deleted += self.conn.execute(f"DELETE FROM messages WHERE {where}", part).rowcount
        return deleted, sorted(sessions)

    def recount(self, session_id: str) -> None:
        self.conn.execute(
            "UPDATE sessions SET "
            "message_count = (SELECT count(*) FROM messages WHERE session_id = ?1 AND active = 1), "
            f"tool_call_count = (SELECT {_TOOL_CALLS_IN_ROWS} FROM messages "
            "WHERE session_id = ?1), "
            "last_active = (SELECT max(timestamp) FROM messages WHERE session_id = ?1) "
            "WHERE id = ?1",
            (session_id,),
        )

    def message_ids(
        self, since: float | None, until: float | None, session_ids: Sequence[str] | None
    ) -> list[int]:
        sql = "SELECT id FROM messages WHERE 1 = 1"
        params: list[Any] = []
        if since is not None:
            sql += " AND timestamp >= ?"
            params.append(since)
        if until is not None:
            sql += " AND timestamp <= ?"
            params.append(until)
        if session_ids is None:
            return [int(r[0]) for r in self.conn.execute(sql + " ORDER BY id", params)]
        found: list[int] = []
        for part in chunks(session_ids):
            clause = f" AND session_id IN ({marks(len(part))})"
            found += [int(r[0]) for r in self.conn.execute(sql + clause, [*params, *part])]
        return sorted(found)

    # -- recall --------------------------------------------------------------------------

    def visible(
        self,
        session_ids: Sequence[str],
        hide_live: Sequence[str],
        *,
        below: int | None = None,
        above: int | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        if not session_ids:
            return []
        where, params = _visible_where(session_ids, hide_live, below, above)
        sql = f"SELECT * FROM messages WHERE {where} ORDER BY id {'DESC' if newest_first else ''}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [row_to_message(r) for r in self.conn.execute(sql, params)]

    def count_visible(
        self,
        session_ids: Sequence[str],
        hide_live: Sequence[str],
        *,
        below: int | None = None,
        above: int | None = None,
    ) -> int:
        if not session_ids:
            return 0
        where, params = _visible_where(session_ids, hide_live, below, above)
        return int(
            self.conn.execute(f"SELECT count(*) FROM messages WHERE {where}", params).fetchone()[0]
        )

    def visible_size(
        self, session_ids: Sequence[str], hide_live: Sequence[str]
    ) -> tuple[int, int, int]:
        if not session_ids:
            return 0, 0, 0
        where, params = _visible_where(session_ids, hide_live, None, None)
        row = self.conn.execute(
            "SELECT count(*), coalesce(max(id), 0), "
            "coalesce(sum(length(content)), 0) + coalesce(sum(length(tool_calls)), 0) "
            f"FROM messages WHERE {where}",
            params,
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    # -- vectors -------------------------------------------------------------------------

    def count_unvectored(self, model: str) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM message_vectors v "
            "WHERE v.model = ? AND v.message_id = m.id)",
            (model,),
        ).fetchone()
        return int(row[0])

    def unvectored(self, model: str, after: int, limit: int) -> list[tuple[int, str, str | None]]:
        rows = self.conn.execute(
            "SELECT m.id, m.content, m.tool_name FROM messages m WHERE m.id > ? AND NOT EXISTS "
            "(SELECT 1 FROM message_vectors v WHERE v.model = ? AND v.message_id = m.id) "
            "ORDER BY m.id LIMIT ?",
            (after, model, limit),
        )
        return [(int(r[0]), text_of(r[1]), r[2]) for r in rows]

    def put_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes], at: float) -> int:
        ids = list(vectors)
        alive: set[int] = set()
        for part in chunks(ids):
            alive.update(
                int(r[0])
                for r in self.conn.execute(
                    f"SELECT id FROM messages WHERE id IN ({marks(len(part))})", list(part)
                )
            )
        rows = [(model, mid, dims, blob, at) for mid, blob in vectors.items() if mid in alive]
        self.conn.executemany(
            "INSERT OR REPLACE INTO message_vectors(model, message_id, dims, vector, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        return len(rows)

    def session_vectors(
        self, model: str, session_ids: Sequence[str], limit: int
    ) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for part in chunks(list(session_ids)):
            for mid, blob in self.conn.execute(
                "SELECT v.message_id, v.vector FROM messages m JOIN message_vectors v "
                f"ON v.model = ? AND v.message_id = m.id WHERE m.session_id IN "
                f"({marks(len(part))}) ORDER BY m.id DESC LIMIT ?",
                [model, *part, limit],
            ):
                found[int(mid)] = blob
        # Several chunks each bring their newest: keep the newest of all.
        return dict(sorted(found.items(), reverse=True)[:limit])

    def recent_vectors(self, model: str, limit: int) -> dict[int, bytes]:
        return {
            int(mid): blob
            for mid, blob in self.conn.execute(
                "SELECT message_id, vector FROM message_vectors WHERE model = ? "
                "ORDER BY message_id DESC LIMIT ?",
                (model, limit),
            )
        }

    def vectors_of(self, model: str, message_ids: Sequence[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for part in chunks(list(message_ids)):
            for mid, blob in self.conn.execute(
                "SELECT message_id, vector FROM message_vectors WHERE model = ? "
                f"AND message_id IN ({marks(len(part))})",
                [model, *part],
            ):
                found[int(mid)] = blob
        return found
