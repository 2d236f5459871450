"""Message rows on PostgreSQL: insert, read, archive, replace, delete.

The rules of :mod:`memstrata.store.sqlite.messages` (counters, validation before the first
write, archived rows kept searchable when compacted) for one tenant. The word and
trigram indexes follow the row by themselves (a generated column and an expression
index); the CJK bigram column is computed here, with the row, from the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from memstrata.errors import SessionStoreError
from memstrata.query.cjk import cjk_terms
from memstrata.store.postgres.codec import MESSAGE_SELECT, pg_text, row_to_message, to_pg_content
from memstrata.store.sqlite.messages import _values

Conn = psycopg.Connection[Any]
MAX_POSITION = 16383

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
    terms = cjk_terms(content, tool_name, tool_calls)
    if not terms:
        return None
    positions: dict[str, list[int]] = {}
    for pos, token in enumerate(terms.split(), start=1):
        # PostgreSQL positions stop at 16383; later tokens share the last one.
        positions.setdefault(token.lower(), []).append(min(pos, MAX_POSITION))
    return " ".join(
        f"{quote_lexeme(tok)}:{','.join(str(p) for p in dict.fromkeys(ps))}"
        for tok, ps in positions.items()
    )


def quote_lexeme(token: str) -> str:
    """``token`` as a quoted lexeme of a tsvector or tsquery literal (taken verbatim)."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def prepare(ns: str, session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Validate every message and return the rows to insert plus counter deltas.

    Returns a list of ``(values, n_tool_calls)``; nothing is written, so a bad message
    leaves the session untouched.
    """
    rows = []
    for index, message in enumerate(messages):
        values, n_calls = _values(session_id, message, index)
        (sid, role, content, call_id, calls, tool, stamp, tokens, finish, reasoning, api) = values
        content = to_pg_content(content)
        row = [
            ns,
            sid,
            pg_text(role),
            content,
            pg_text(call_id),
            pg_text(calls),
            pg_text(tool),
            stamp,
            tokens,
            pg_text(finish),
            pg_text(reasoning),
            to_pg_content(api),
            cjk_vector(content, tool, calls),
        ]
        rows.append((row, n_calls))
    return rows


def insert_messages(
    conn: Conn, ns: str, session_id: str, messages: Sequence[Mapping[str, Any]]
) -> list[int]:
    """Insert ``messages`` as live rows and bump the session's counters; return the ids."""
    return insert_prepared(conn, ns, session_id, prepare(ns, session_id, messages))


def insert_prepared(conn: Conn, ns: str, session_id: str, rows: Sequence[Any]) -> list[int]:
    """Insert rows made by :func:`prepare` (validated, encoded) and bump the counters."""
    if not rows:
        return []
    placeholders = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)"
    params: list[Any] = []
    for values, _ in rows:
        params.extend(values)
    # One statement for the whole turn; RETURNING keeps the order of VALUES.
    cursor = conn.execute(
        f"INSERT INTO messages ({_INSERT_COLUMNS}) VALUES "
        + ", ".join([placeholders] * len(rows))
        + " RETURNING id",
        params,
    )
    ids = [int(r["id"]) for r in cursor.fetchall()]
    newest = max(values[7] for values, _ in rows)
    conn.execute(
        "UPDATE sessions SET message_count = message_count + %s, "
        "tool_call_count = tool_call_count + %s, "
        "last_active = GREATEST(COALESCE(last_active, %s), %s) "
        "WHERE namespace = %s AND id = %s",
        (len(rows), sum(n for _, n in rows), newest, newest, ns, session_id),
    )
    return ids


def recount(conn: Conn, ns: str, session_id: str) -> None:
    """Recompute message_count, tool_call_count and last_active from the rows."""
    conn.execute(
        "UPDATE sessions SET "
        "message_count = (SELECT count(*) FROM messages "
        "  WHERE namespace = %(ns)s AND session_id = %(sid)s AND active = 1), "
        f"tool_call_count = (SELECT {_TOOL_CALLS_IN_ROWS} FROM messages "
        "  WHERE namespace = %(ns)s AND session_id = %(sid)s), "
        "last_active = (SELECT max(timestamp) FROM messages "
        "  WHERE namespace = %(ns)s AND session_id = %(sid)s) "
        "WHERE namespace = %(ns)s AND id = %(sid)s",
        {"ns": ns, "sid": session_id},
    )


def get_messages(
    conn: Conn, ns: str, session_id: str, *, include_inactive: bool = False
) -> list[dict[str, Any]]:
    """The session's messages ordered by id (live ones only unless asked)."""
    active = "" if include_inactive else " AND m.active = 1"
    rows = conn.execute(
        f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s "
        f"AND m.session_id = %s{active} ORDER BY m.id",
        (ns, session_id),
    ).fetchall()
    return [row_to_message(r) for r in rows]


def around(conn: Conn, ns: str, message_id: int, window: int) -> dict[str, Any]:
    """The message ``message_id`` with up to ``window`` neighbours on each side."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise SessionStoreError("window must be zero or more.")
    row = conn.execute(
        f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s AND m.id = %s",
        (ns, int(message_id)),
    ).fetchone()
    if row is None:
        raise SessionStoreError(
            f"No message {message_id}: it may have been deleted; search again for fresh ids."
        )
    sid = row["session_id"]
    before = conn.execute(
        f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s AND m.session_id = %s "
        "AND m.id < %s ORDER BY m.id DESC LIMIT %s",
        (ns, sid, message_id, window),
    ).fetchall()
    after = conn.execute(
        f"SELECT {MESSAGE_SELECT} FROM messages m WHERE m.namespace = %s AND m.session_id = %s "
        "AND m.id > %s ORDER BY m.id LIMIT %s",
        (ns, sid, message_id, window),
    ).fetchall()
    first = before[-1]["id"] if before else message_id
    last = after[-1]["id"] if after else message_id
    counts = conn.execute(
        "SELECT count(*) FILTER (WHERE id < %s) AS b, count(*) FILTER (WHERE id > %s) AS a "
        "FROM messages WHERE namespace = %s AND session_id = %s",
        (first, last, ns, sid),
    ).fetchone()
    anchor = row_to_message(row)
    return {
        "session_id": sid,
        "anchor": anchor,
        "messages": [row_to_message(r) for r in reversed(before)]
        + [anchor]
        + [row_to_message(r) for r in after],
        "messages_before": int(counts["b"] if counts else 0),
        "messages_after": int(counts["a"] if counts else 0),
        "window": window,
    }


def archive(
    conn: Conn, ns: str, session_id: str, ids: Sequence[int] | None, compacted: bool
) -> int:
    """Set live rows (``ids``, or all when None) to ``active=0``; return how many."""
    sql = (
        "UPDATE messages SET active = 0, compacted = %s WHERE namespace = %s "
        "AND session_id = %s AND active = 1"
    )
    params: list[Any] = [int(compacted), ns, session_id]
    if ids is not None:
        sql += " AND id = ANY(%s)"
        params.append([int(i) for i in ids])
    changed = conn.execute(sql, params).rowcount
    recount(conn, ns, session_id)
    return changed


def delete_rows(conn: Conn, ns: str, session_id: str, *, active_only: bool) -> int:
    """Delete the session's rows; they leave every index with them."""
    active = " AND active = 1" if active_only else ""
    return conn.execute(
        f"DELETE FROM messages WHERE namespace = %s AND session_id = %s{active}", (ns, session_id)
    ).rowcount


def delete_by_id(conn: Conn, ns: str, message_ids: Sequence[int]) -> int:
    """Delete the tenant's messages with these ids, recount their sessions; return how many."""
    rows = conn.execute(
        "DELETE FROM messages WHERE namespace = %s AND id = ANY(%s) RETURNING session_id",
        (ns, [int(i) for i in message_ids]),
    ).fetchall()
    for sid in sorted({r["session_id"] for r in rows}):
        recount(conn, ns, sid)
    return len(rows)
