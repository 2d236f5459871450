"""Message rows of the session store: insert, read, archive, replace.

Every function takes a connection; the write functions run inside the caller's
``BEGIN IMMEDIATE`` transaction, so a whole turn (or a whole compaction) is one commit.
Counters follow Hermes: ``message_count`` counts the live (``active=1``) messages,
``tool_call_count`` the tool calls stored in the session's rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memstrata.errors import SessionStoreError
from memstrata.store.codec import (
    check_message_keys,
    encode_content,
    encode_tool_calls,
    row_to_message,
    text_field,
)

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


def _text(value: object, field: str, index: int) -> str | None:
    return text_field(value, f"Message {index}: {field}")


def _values(session_id: str, message: Mapping[str, Any], index: int) -> tuple[list[Any], int]:
    check_message_keys(message, index)
    tool_name = message.get("tool_name", message.get("name"))
    tool_calls, n_calls = encode_tool_calls(message.get("tool_calls"))
    stamp = message.get("timestamp")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int | float)):
        raise SessionStoreError(f"Message {index}: timestamp must be epoch seconds.")
    tokens = message.get("token_count")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)):
        raise SessionStoreError(f"Message {index}: token_count must be an integer.")
    return [
        session_id,
        _text(message["role"], "role", index),
        encode_content(message.get("content")),
        _text(message.get("tool_call_id"), "tool_call_id", index),
        tool_calls,
        _text(tool_name, "tool_name", index),
        float(stamp) if stamp is not None else time.time(),
        tokens,
        _text(message.get("finish_reason"), "finish_reason", index),
        _text(message.get("reasoning"), "reasoning", index),
        encode_content(message.get("api_content"), "api_content"),
    ], n_calls


def insert_messages(
    conn: sqlite3.Connection, session_id: str, messages: Sequence[Mapping[str, Any]]
) -> list[int]:
    """Insert ``messages`` as live rows and bump the session's counters; return the ids.

    Every message is validated before the first row is written, so a bad message
    leaves the session untouched.
    """
    rows = [_values(session_id, m, i) for i, m in enumerate(messages)]
    ids: list[int] = []
    for values, _ in rows:
        cursor = conn.execute(_INSERT, values)
        ids.append(int(cursor.lastrowid or 0))
    if rows:
        newest = max(values[6] for values, _ in rows)
        conn.execute(
            "UPDATE sessions SET message_count = message_count + ?, "
            "tool_call_count = tool_call_count + ?, "
            "last_active = max(COALESCE(last_active, ?), ?) WHERE id = ?",
            (len(rows), sum(n for _, n in rows), newest, newest, session_id),
        )
    return ids


def recount(conn: sqlite3.Connection, session_id: str) -> None:
    """Recompute message_count, tool_call_count and last_active from the rows."""
    conn.execute(
        "UPDATE sessions SET "
        "message_count = (SELECT count(*) FROM messages WHERE session_id = ?1 AND active = 1), "
        f"tool_call_count = (SELECT {_TOOL_CALLS_IN_ROWS} FROM messages WHERE session_id = ?1), "
        "last_active = (SELECT max(timestamp) FROM messages WHERE session_id = ?1) "
        "WHERE id = ?1",
        (session_id,),
    )


def get_messages(
    conn: sqlite3.Connection, session_id: str, *, include_inactive: bool = False
) -> list[dict[str, Any]]:
    """The session's messages ordered by id (live ones only unless asked)."""
    active = "" if include_inactive else " AND active = 1"
    rows = conn.execute(
        f"SELECT * FROM messages WHERE session_id = ?{active} ORDER BY id", (session_id,)
    ).fetchall()
    return [row_to_message(r) for r in rows]


def as_conversation(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat message dicts (role, content, tool_calls, tool_call_id, name)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        if message.get("tool_name") and message["role"] == "tool":
            item["name"] = message["tool_name"]
        out.append(item)
    return out


def around(conn: sqlite3.Connection, message_id: int, window: int) -> dict[str, Any]:
    """The message ``message_id`` with up to ``window`` neighbours on each side.

    Archived rows are included (and flagged by ``active``): scrolling through a hit in
    a compacted part of a conversation must show its context.
    """
    if window < 0:
        raise SessionStoreError("window must be zero or more.")
    row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        raise SessionStoreError(
            f"No message {message_id}: it may have been deleted; search again for fresh ids."
        )
    sid = row["session_id"]
    before = conn.execute(
        "SELECT * FROM messages WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (sid, message_id, window),
    ).fetchall()
    after = conn.execute(
        "SELECT * FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
        (sid, message_id, window),
    ).fetchall()
    first = before[-1]["id"] if before else message_id
    last = after[-1]["id"] if after else message_id
    counts = conn.execute(
        "SELECT sum(id < ?), sum(id > ?) FROM messages WHERE session_id = ?", (first, last, sid)
    ).fetchone()
    anchor = row_to_message(row)
    return {
        "session_id": sid,
        "anchor": anchor,
        "messages": [row_to_message(r) for r in reversed(before)]
        + [anchor]
        + [row_to_message(r) for r in after],
        "messages_before": int(counts[0] or 0),
        "messages_after": int(counts[1] or 0),
        "window": window,
    }


def archive(
    conn: sqlite3.Connection, session_id: str, ids: Sequence[int] | None, compacted: bool
) -> int:
    """Set live rows (``ids``, or all when None) to ``active=0``; return how many.

    ``compacted=True`` marks compaction archives, which stay searchable; False marks
    rewound or undone rows, which search skips. The index is untouched either way.
    """
    if ids is None:
        changed = conn.execute(
            "UPDATE messages SET active = 0, compacted = ? WHERE session_id = ? AND active = 1",
            (int(compacted), session_id),
        ).rowcount
    else:
        changed = 0
        id_list = [int(i) for i in ids]
        for start in range(0, len(id_list), 500):
            part = id_list[start : start + 500]
            changed += conn.execute(
                "UPDATE messages SET active = 0, compacted = ? WHERE session_id = ? "
                f"AND active = 1 AND id IN ({','.join('?' * len(part))})",
                (int(compacted), session_id, *part),
            ).rowcount
    recount(conn, session_id)
    return changed


def delete_rows(conn: sqlite3.Connection, session_id: str, *, active_only: bool) -> int:
    """Delete the session's rows (the index triggers remove them from every index)."""
    active = " AND active = 1" if active_only else ""
    return conn.execute(
        f"DELETE FROM messages WHERE session_id = ?{active}", (session_id,)
    ).rowcount
