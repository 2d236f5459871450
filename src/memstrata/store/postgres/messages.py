"""PostgreSQL primitives over the ``messages`` table: insert, read, archive, delete, vectors.

The trigram index follows the row by itself (an expression index); the word and CJK
vectors and their lengths in tokens are written here, with the row, from the same text.
Every statement is scoped to the transaction's tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from memstrata.query.cjk import cjk_terms
from memstrata.store.backend import Transaction
from memstrata.store.codec import MessageValues
from memstrata.store.hits import text_of
from memstrata.store.postgres.codec import (
    MESSAGE_SELECT,
    pg_text,
    row_to_message,
    sqlite_form,
    to_pg_content,
)
from memstrata.store.postgres.schema import word_vector
from memstrata.store.postgres.sessions import DIALECT

Conn = psycopg.Connection[Any]
MAX_POSITION = 16383
# PostgreSQL keeps a lexeme's first 256 positions (MAXNUMPOS).
MAX_POSITIONS = 256
# The CJK vector's lexemes and positions stop short of the 1 MB a tsvector holds (see
# memstrata.store.postgres.schema.WORD_INDEX_CHARS): the bigrams of a very long Chinese
# message past it are left out of this index, as the word index leaves out what follows
# its first characters.
CJK_VECTOR_BYTES = 1_000_000

_INSERT_COLUMNS = (
    "namespace, session_id, role, content, tool_call_id, tool_calls, tool_name, "
    "timestamp, token_count, finish_reason, reasoning, api_content, cjk"
)
# Tool calls stored in the session's rows: an array counts its elements, anything else one.
_TOOL_CALLS_IN_ROWS = (
    "COALESCE(SUM(CASE WHEN tool_calls IS NULL THEN 0 "
    "WHEN memstrata_json_array_length(tool_calls) IS NOT NULL "
    "THEN memstrata_json_array_length(tool_calls) ELSE 1 END), 0)"
)


def cjk_vector(content: str | None, tool_name: str | None, tool_calls: str | None) -> str | None:
    """The row's CJK bigram ``tsvector`` as text (None without CJK).

    The tokens of :func:`memstrata.query.cjk.cjk_terms`, lower-cased as unicode61 folds them,
    each with its positions, so a CJK word is matched as a phrase of its bigrams
    (``<->``) exactly as the SQLite bigram index matches it.
    """
    return cjk_row(content, tool_name, tool_calls)[0]


def cjk_row(
    content: str | None, tool_name: str | None, tool_calls: str | None
) -> tuple[str | None, int | None]:
    """:func:`cjk_vector` and its length in tokens as the server counts the vector
    (``memstrata_tokens``): each lexeme's distinct positions, at most MAX_POSITIONS."""
    terms = cjk_terms(content, tool_name, tool_calls)
    if not terms:
        return None, None
    positions: dict[str, dict[int, None]] = {}
    size = 0  # the vector's lexemes and positions, in bytes, as the server lays them out
    for pos, token in enumerate(terms.split(), start=1):
        lexeme = token.lower()
        if too_long(lexeme):
            continue  # left out, as to_tsvector leaves it out; its position stays taken
        # PostgreSQL positions stop at 16383; later tokens share the last one.
        held = positions.get(lexeme)
        if held is None:
            # A new lexeme: its bytes, alignment, its count of positions and the first.
            size += len(lexeme.encode()) + 5
            if size > CJK_VECTOR_BYTES:
                break  # the rest of a very long message is not in this index
            held = positions[lexeme] = {}
        elif len(held) < MAX_POSITIONS and min(pos, MAX_POSITION) not in held:
            size += 2
        held[min(pos, MAX_POSITION)] = None
    if not positions:
        return None, None
    vector = " ".join(
        f"{quote_lexeme(tok)}:{','.join(str(p) for p in ps)}" for tok, ps in positions.items()
    )
    return vector, sum(min(len(ps), MAX_POSITIONS) for ps in positions.values())


# The longest lexeme both a tsvector and a tsquery hold, in bytes: a longer one fails
# the whole statement ("word is too long"). A tsvector takes 2,047 (MAXSTRLEN) but a
# tsquery only 2,046 (pushValue refuses lenval >= MAXSTRLEN: PostgreSQL 18 does, some
# 15.x builds let 2,047 through), so a 2,047-byte word stored in the CJK vector could
# be written but never searched. to_tsvector and phraseto_tsquery leave longer words out
# with a notice; the CJK vector and its queries, built here, leave them out the same
# way. A non-CJK word of a chunk holding CJK (a pasted base64 blob or minified line
# beside a Chinese word) failed the append before.
MAX_LEXEME_BYTES = 2046


def too_long(lexeme: str) -> bool:
    """Whether ``lexeme`` is past :data:`MAX_LEXEME_BYTES` (a character is at most 4)."""
    return len(lexeme) * 4 > MAX_LEXEME_BYTES and len(lexeme.encode()) > MAX_LEXEME_BYTES


def quote_lexeme(token: str) -> str:
    """``token`` as a quoted lexeme of a tsvector or tsquery literal (taken verbatim)."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


# Rows recall may show: live and compaction-archived ones, not rewound ones.
_SHOWN = "(m.active = 1 OR m.compacted = 1)"
# The columns of a turn, one array each (after the namespace and session, the same for
# every row), with their types: a NULL stays typed inside its array.
_ARRAYS = (
    ("role", "text"),
    ("content", "text"),
    ("tool_call_id", "text"),
    ("tool_calls", "text"),
    ("tool_name", "text"),
    ("timestamp", "float8"),
    ("token_count", "int8"),
    ("finish_reason", "text"),
    ("reasoning", "text"),
    ("api_content", "text"),
    ("cjk", "text"),
    ("cjk_tokens", "int4"),
)
# A whole turn in one statement, the session's counters with it: the UPDATE also says
# whether the session exists (its row gives each message its tenant and session; no row,
# nothing inserted), so an append is one round trip.
# The rows come as arrays, so the text of the statement is the same for a turn of any
# size: psycopg parses it once and the server prepares it (a VALUES list of the turn's
# rows was a new statement per size, and past 50 parameters was parsed again on every
# call). Each row gets its word vector made once (OFFSET 0 keeps the planner from
# copying its expression into each use) and its lengths in tokens (m006): the CJK length
# counted here, the word vector's by the server. ORDER BY the arrays' order: ids, and
# what RETURNING lists, follow the turn.
_APPEND = (
    "WITH counted AS (UPDATE sessions SET message_count = message_count + %s, "
    "tool_call_count = tool_call_count + %s, "
    "last_active = GREATEST(COALESCE(last_active, %s), %s) "
    "WHERE namespace = %s AND id = %s RETURNING namespace, id) "
    f"INSERT INTO messages ({_INSERT_COLUMNS}, cjk_tokens, tsv, tsv_tokens) "
    "SELECT c.namespace, c.id, v.role, v.content, v.tool_call_id, v.tool_calls, v.tool_name, "
    "v.timestamp, v.token_count, v.finish_reason, v.reasoning, v.api_content, "
    "v.cjk::tsvector, v.cjk_tokens, w.tsv, memstrata_tokens(w.tsv) "
    "FROM unnest("
    + ", ".join(f"%s::{kind}[]" for _, kind in _ARRAYS)
    + ") WITH ORDINALITY AS v("
    + ", ".join(name for name, _ in _ARRAYS)
    + ", ord) CROSS JOIN counted c "
    f"CROSS JOIN LATERAL (SELECT {word_vector('v.content', 'v.tool_name', 'v.tool_calls')} "
    "AS tsv OFFSET 0) AS w ORDER BY v.ord RETURNING id"
)


def _columns(rows: Sequence[MessageValues]) -> list[list[Any]]:
    """The rows of a turn as one list per column of :data:`_ARRAYS`."""
    columns: list[list[Any]] = [[] for _ in _ARRAYS]
    for v in rows:
        content = to_pg_content(v.content)
        calls = pg_text(v.tool_calls)
        tool = pg_text(v.tool_name)
        values = (
            pg_text(v.role),
            content,
            pg_text(v.tool_call_id),
            calls,
            tool,
            v.timestamp,
            v.token_count,
            pg_text(v.finish_reason),
            pg_text(v.reasoning),
            to_pg_content(v.api_content),
            *cjk_row(content, tool, calls),
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns


def _visible_where(
    ns: str,
    session_ids: Sequence[str],
    hide_live: Sequence[str],
    below: int | None,
    above: int | None,
) -> tuple[str, list[Any]]:
    window, params = DIALECT.window("m.", hide_live, below, above)
    return f"m.namespace = %s AND m.session_id = ANY(%s) AND {_SHOWN}{window}", [
        ns,
        list(session_ids),
        *params,
    ]


class MessageRows(Transaction):
    """The message primitives of a PostgreSQL transaction."""

    conn: Conn
    ns: str
    # Messages inserted so far: the store's own statistics keeper counts them.
    inserted: int
    # Sessions recounted (see memstrata.store.postgres.ranking.changed).
    recounted: bool

    def insert_messages(self, session_id: str, rows: Sequence[MessageValues]) -> list[int] | None:
        newest = max(v.timestamp for v in rows)
        params: list[Any] = [
            len(rows),
            sum(v.n_tool_calls for v in rows),
            newest,
            newest,
            self.ns,
            session_id,
            *_columns(rows),
        ]
        cursor = self.conn.execute(_APPEND, params)
        ids = [int(r["id"]) for r in cursor.fetchall()]
        if not ids:
            return None  # no such session: nothing written
        self.inserted += len(ids)
        return ids

    def messages(self, session_id: str, *, include_inactive: bool) -> list[dict[str, Any]]:
        active = "" if include_inactive else " AND m.active = 1"
        rows = self.conn.execute(
            f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s "
            f"AND m.session_id = %s{active} ORDER BY m.id",
            (self.ns, session_id),
        ).fetchall()
        return [row_to_message(r) for r in rows]

    def message(self, message_id: int) -> dict[str, Any] | None:
        row = self.conn.execute(
            f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s AND m.id = %s",
            (self.ns, message_id),
        ).fetchone()
        return None if row is None else row_to_message(row)

    def neighbours(
        self, session_id: str, message_id: int, count: int, *, before: bool
    ) -> list[dict[str, Any]]:
        op, order = ("<", "DESC") if before else (">", "ASC")
        rows = self.conn.execute(
            f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s "
            f"AND m.session_id = %s AND m.id {op} %s ORDER BY m.id {order} LIMIT %s",
            (self.ns, session_id, message_id, count),
        ).fetchall()
        return [row_to_message(r) for r in rows]

    def count_beyond(self, session_id: str, first: int, last: int) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE id < %s) AS b, count(*) FILTER (WHERE id > %s) AS a "
            "FROM messages WHERE namespace = %s AND session_id = %s",
            (first, last, self.ns, session_id),
        ).fetchone()
        return (int(row["b"]), int(row["a"])) if row else (0, 0)

    def archive_messages(self, session_id: str, ids: Sequence[int] | None, compacted: bool) -> int:
        sql = (
            "UPDATE messages SET active = 0, compacted = %s WHERE namespace = %s "
            "AND session_id = %s AND active = 1"
        )
        params: list[Any] = [int(compacted), self.ns, session_id]
        if ids is not None:
            sql += " AND id = ANY(%s)"
            params.append(list(ids))
        return int(self.conn.execute(sql, params).rowcount)

    def delete_session_messages(self, session_id: str, *, active_only: bool) -> int:
        active = " AND active = 1" if active_only else ""
        return int(
            self.conn.execute(
                f"DELETE FROM messages WHERE namespace = %s AND session_id = %s{active}",
                (self.ns, session_id),
            ).rowcount
        )

    def delete_messages(self, message_ids: Sequence[int]) -> tuple[int, list[str]]:
        rows = self.conn.execute(
            "DELETE FROM messages WHERE namespace = %s AND id = ANY(%s) RETURNING session_id",
            (self.ns, list(message_ids)),
        ).fetchall()
        return len(rows), sorted({str(r["session_id"]) for r in rows})

    def recount(self, session_id: str) -> None:
        self.recounted = True
        self.conn.execute(
            "UPDATE sessions SET "
            "message_count = (SELECT count(*) FROM messages "
            "  WHERE namespace = %(ns)s AND session_id = %(sid)s AND active = 1), "
            f"tool_call_count = (SELECT {_TOOL_CALLS_IN_ROWS} FROM messages "
            "  WHERE namespace = %(ns)s AND session_id = %(sid)s), "
            "last_active = (SELECT max(timestamp) FROM messages "
            "  WHERE namespace = %(ns)s AND session_id = %(sid)s) "
            "WHERE namespace = %(ns)s AND id = %(sid)s",
            {"ns": self.ns, "sid": session_id},
        )

    def message_ids(
        self, since: float | None, until: float | None, session_ids: Sequence[str] | None
    ) -> list[int]:
        sql = "SELECT id FROM messages WHERE namespace = %s"
        params: list[Any] = [self.ns]
        if since is not None:
            sql += " AND timestamp >= %s"
            params.append(since)
        if until is not None:
            sql += " AND timestamp <= %s"
            params.append(until)
        if session_ids is not None:
            sql += " AND session_id = ANY(%s)"
            params.append(list(session_ids))
        return [int(r["id"]) for r in self.conn.execute(sql + " ORDER BY id", params).fetchall()]

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
        where, params = _visible_where(self.ns, session_ids, hide_live, below, above)
        sql = (
            f"SELECT {MESSAGE_SELECT} FROM messages m WHERE {where} "
            f"ORDER BY m.id {'DESC' if newest_first else 'ASC'}"
        )
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return [row_to_message(r) for r in self.conn.execute(sql, params).fetchall()]

    def count_visible(
        self,
        session_ids: Sequence[str],
        hide_live: Sequence[str],
        *,
        below: int | None = None,
        above: int | None = None,
    ) -> int:
        where, params = _visible_where(self.ns, session_ids, hide_live, below, above)
        row = self.conn.execute(f"SELECT count(*) AS n FROM messages m WHERE {where}", params)
        found = row.fetchone()
        return int(found["n"]) if found else 0

    def visible_size(
        self, session_ids: Sequence[str], hide_live: Sequence[str]
    ) -> tuple[int, int, int]:
        where, params = _visible_where(self.ns, session_ids, hide_live, None, None)
        # Lengths as SQLite counts them: the stored text, structured content in its
        # SQLite encoding (the sentinel has the same length on both).
        row = self.conn.execute(
            "SELECT count(*) AS n, coalesce(max(m.id), 0) AS last, "
            "coalesce(sum(length(m.content)), 0) + coalesce(sum(length(m.tool_calls)), 0) "
            f"AS chars FROM messages m WHERE {where}",
            params,
        ).fetchone()
        return (int(row["n"]), int(row["last"]), int(row["chars"])) if row else (0, 0, 0)

    # -- vectors -------------------------------------------------------------------------

    def count_unvectored(self, model: str) -> int:
        row = self.conn.execute(
            "SELECT count(*) AS n FROM messages m WHERE m.namespace = %s AND NOT EXISTS "
            "(SELECT 1 FROM message_vectors v WHERE v.namespace = m.namespace "
            "AND v.model = %s AND v.message_id = m.id)",
            (self.ns, model),
        ).fetchone()
        return int(row["n"]) if row else 0

    def unvectored(self, model: str, after: int, limit: int) -> list[tuple[int, str, str | None]]:
        rows = self.conn.execute(
            "SELECT m.id, m.content, m.tool_name FROM messages m WHERE m.namespace = %s "
            "AND m.id > %s AND NOT EXISTS (SELECT 1 FROM message_vectors v "
            "WHERE v.namespace = m.namespace AND v.model = %s AND v.message_id = m.id) "
            "ORDER BY m.id LIMIT %s",
            (self.ns, after, model, limit),
        ).fetchall()
        return [(int(r["id"]), text_of(sqlite_form(r["content"])), r["tool_name"]) for r in rows]

    def live_ids(self, ids: Iterable[int]) -> set[int]:
        """Those of ``ids`` that are messages of this tenant (a vector computed for a
        message deleted meanwhile is dropped, not stored)."""
        return {
            int(r["id"])
            for r in self.conn.execute(
                "SELECT id FROM messages WHERE namespace = %s AND id = ANY(%s)",
                (self.ns, list(ids)),
            ).fetchall()
        }

    def put_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes], at: float) -> int:
        alive = self.live_ids(vectors)
        rows = [
            (self.ns, model, mid, dims, blob, at) for mid, blob in vectors.items() if mid in alive
        ]
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO message_vectors(namespace, model, message_id, dims, vector, "
                "created_at) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (namespace, model, message_id) DO UPDATE SET dims = EXCLUDED.dims, "
                "vector = EXCLUDED.vector, created_at = EXCLUDED.created_at",
                rows,
            )
        return len(rows)

    def session_vectors(
        self, model: str, session_ids: Sequence[str], limit: int
    ) -> dict[int, bytes]:
        return self._vectors(
            "SELECT v.message_id, v.vector FROM messages m JOIN message_vectors v "
            "ON v.namespace = m.namespace AND v.model = %s AND v.message_id = m.id "
            "WHERE m.namespace = %s AND m.session_id = ANY(%s) ORDER BY m.id DESC LIMIT %s",
            (model, self.ns, list(session_ids), limit),
        )

    def recent_vectors(self, model: str, limit: int) -> dict[int, bytes]:
        return self._vectors(
            "SELECT message_id, vector FROM message_vectors WHERE namespace = %s "
            "AND model = %s ORDER BY message_id DESC LIMIT %s",
            (self.ns, model, limit),
        )

    def vectors_of(self, model: str, message_ids: Sequence[int]) -> dict[int, bytes]:
        return self._vectors(
            "SELECT message_id, vector FROM message_vectors WHERE namespace = %s "
            "AND model = %s AND message_id = ANY(%s)",
            (self.ns, model, [int(i) for i in message_ids]),
        )

    def _vectors(self, sql: str, params: Sequence[Any]) -> dict[int, bytes]:
        return {
            int(r["message_id"]): bytes(r["vector"])
            for r in self.conn.execute(sql, params).fetchall()
        }
