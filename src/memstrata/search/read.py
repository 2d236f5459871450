"""Verbatim drill-down for ``session_search``: read a session, scroll around a message.

Both shapes show what a past conversation actually said, bounded so one call cannot
flood the model's context: a read returns the first 20 and last 10 messages of a long
session, a scroll at most 20 messages on each side of an anchor, and every message is
cut at :data:`MESSAGE_CHARS`. Neither shows the live rows of the current conversation
(the model has them already), nor rewound rows (undone on purpose).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.search.truncate import message_block
from memstrata.store.sqlite import lineage as store_lineage
from memstrata.store.sqlite.fulltext import text_of
from memstrata.store.sqlite.store import SessionStore

READ_HEAD = 20
READ_TAIL = 10
MESSAGE_CHARS = 2_000
DEFAULT_WINDOW = 5
MAX_WINDOW = 20
_COLUMNS = "id, session_id, role, content, tool_name, tool_calls, tool_call_id, timestamp, active"


def when(ts: float | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM UTC`` ("unknown" when absent)."""
    if ts is None:
        return "unknown"
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):  # NaN, or outside years 1-9999
        return f"{ts} (not a date)"


def live_session_ids(conn: sqlite3.Connection, current_session_id: str | None) -> list[str]:
    """The current session and its descendants through compression and delegate links.

    Their live rows are the model's present context. Ancestors are not included: what
    compression removed lives there and must stay findable.
    """
    if not current_session_id:
        return []
    out = [current_session_id]
    seen = {current_session_id}
    frontier = [current_session_id]
    while frontier and len(out) < store_lineage.MAX_HOPS * 10:
        marks = ", ".join("?" for _ in frontier)
        rows = conn.execute(
            "SELECT s.id FROM sessions s JOIN sessions p ON p.id = s.parent_session_id "
            f"WHERE s.parent_session_id IN ({marks}) "
            f"AND {store_lineage.KIND_SQL} IN ('compression', 'delegate')",
            frontier,
        ).fetchall()
        frontier = [str(r[0]) for r in rows if r[0] not in seen]
        seen.update(frontier)
        out.extend(frontier)
    return out


def visible_sql(live: Sequence[str], alias: str = "") -> tuple[str, list[Any]]:
    """WHERE fragment (starting with AND) for rows recall may show, and its parameters.

    Live and compaction-archived rows are visible; rewound rows are not; live rows of
    the ``live`` sessions (the current conversation) are not.
    """
    p = f"{alias}." if alias else ""
    where = f" AND ({p}active = 1 OR {p}compacted = 1)"
    if not live:
        return where, []
    marks = ", ".join("?" for _ in live)
    return where + f" AND NOT ({p}active = 1 AND {p}session_id IN ({marks}))", list(live)


def message_view(row: sqlite3.Row | dict[str, Any], *, anchor: bool = False) -> dict[str, Any]:
    """A stored message as the model sees it: id, role, content (cut), time, tool fields."""
    content = text_of(row["content"])
    item: dict[str, Any] = {"id": int(row["id"]), "role": row["role"]}
    if row["role"] == "assistant" and row["tool_calls"]:
        # The calls rendered as in transcripts: name and trimmed arguments.
        calls = message_block({"role": "assistant", "tool_calls": row["tool_calls"]})
        item["tool_calls"] = [
            line.removeprefix("[ASSISTANT]: [Called: ").removesuffix("]")
            for line in calls.splitlines()
        ]
    if len(content) > MESSAGE_CHARS:
        # Head and tail: a tool's output states its outcome (an error, a total) at the end.
        head, tail = content[: MESSAGE_CHARS * 3 // 4], content[-MESSAGE_CHARS // 4 :]
        item["content"] = f"{head}...[message truncated]...{tail}"
        item["content_chars"] = len(content)
    else:
        item["content"] = content
    item["when"] = when(row["timestamp"])
    if row["tool_name"]:
        item["tool_name"] = row["tool_name"]
    if not row["active"]:
        item["archived"] = True
    if anchor:
        item["anchor"] = True
    return item


def _session_meta(conn: sqlite3.Connection, session_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT id, title, source, model, started_at, ended_at, end_reason, parent_session_id "
        "FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        raise SessionNotFoundError(
            f"session_id {session_id!r} was not found: use an id from a session_search result."
        )
    meta = {
        "title": row["title"],
        "source": row["source"],
        "model": row["model"],
        "started": when(row["started_at"]),
    }
    if row["end_reason"]:
        meta["end_reason"] = row["end_reason"]
    if row["parent_session_id"]:
        meta["parent_session_id"] = row["parent_session_id"]
    return meta


def _in_context_error(session_id: str) -> SessionStoreError:
    return SessionStoreError(
        f"Session {session_id} is the current conversation and its messages are already "
        "in your context; search with a query to find what compression removed from it."
    )


def read_session(
    store: SessionStore,
    session_id: str,
    *,
    current_session_id: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One session's visible messages; a long one gives its first 20 and last 10."""
    resolved = store.resolve_session_id(session_id)
    with store.read_conn() as conn:
        conn.execute("BEGIN")
        meta = _session_meta(conn, resolved)
        live = live_session_ids(conn, current_session_id)
        visible, params = visible_sql(live)
        total = int(
            conn.execute(
                f"SELECT count(*) FROM messages WHERE session_id = ?{visible}",
                [resolved, *params],
            ).fetchone()[0]
        )
        if total == 0 and resolved in live:
            raise _in_context_error(resolved)
        head = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ?{visible} ORDER BY id LIMIT ?",
            [resolved, *params, READ_HEAD if total > READ_HEAD + READ_TAIL else total],
        ).fetchall()
        tail: list[sqlite3.Row] = []
        if total > READ_HEAD + READ_TAIL:
            tail = conn.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE session_id = ?{visible} "
                "ORDER BY id DESC LIMIT ?",
                [resolved, *params, READ_TAIL],
            ).fetchall()[::-1]
    truncated = bool(tail)
    result: dict[str, Any] = {
        "success": True,
        "mode": "read",
        "session_id": resolved,
        "session_meta": meta,
        "message_count": total,
        "messages": [message_view(r) for r in [*head, *tail]],
        "truncated": truncated,
    }
    if truncated:
        gap_from = int(head[-1]["id"])
        result["omitted_messages"] = total - len(head) - len(tail)
        result["hint"] = (
            f"Messages between id {gap_from} and id {int(tail[0]['id'])} were left out. "
            f"Scroll with session_id={resolved!r}, around_message_id=<an id in that range>, "
            f"window up to {MAX_WINDOW}."
        )
    if note:
        result["note"] = note
    return result


def clamp_window(window: object) -> int:
    """A scroll window clamped to 1-20; a missing or non-integer value means 5."""
    if isinstance(window, bool) or not isinstance(window, int):
        return DEFAULT_WINDOW
    return max(1, min(MAX_WINDOW, window))


def scroll_session(
    store: SessionStore,
    session_id: str,
    around_message_id: int,
    *,
    window: int | None = None,
    current_session_id: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Up to ``window`` visible messages on each side of ``around_message_id``.

    The anchor may belong to another session of the same compression chain (ids from a
    result's excerpt span the chain); the scroll then moves there and says so.
    """
    if isinstance(around_message_id, bool) or not isinstance(around_message_id, int):
        raise SessionStoreError(
            f"around_message_id must be an integer message id, got {around_message_id!r}."
        )
    size = clamp_window(window)
    resolved = store.resolve_session_id(session_id)
    warning = None
    with store.read_conn() as conn:
        conn.execute("BEGIN")
        # An id past SQLite's 64-bit range names no message (binding it would overflow).
        row = (
            conn.execute(
                f"SELECT {_COLUMNS}, compacted FROM messages WHERE id = ?", (around_message_id,)
            ).fetchone()
            if -(2**63) <= around_message_id < 2**63
            else None
        )
        if row is None:
            raise SessionStoreError(
                f"around_message_id {around_message_id} does not exist: use an id from a "
                "session_search result."
            )
        owner = str(row["session_id"])
        if owner != resolved:
            chain = {
                *store_lineage.compression_ancestors(conn, resolved),
                *store_lineage.compression_chain(conn, resolved),
            }
            if owner not in chain:
                raise SessionStoreError(
                    f"around_message_id {around_message_id} is not in session {resolved}; "
                    "pass the session_id of the result the id came from."
                )
            warning = f"Message {around_message_id} belongs to session {owner} of the same "
            warning += "conversation; showing it there."
            resolved = owner
        live = live_session_ids(conn, current_session_id)
        if row["active"] and owner in live:
            raise _in_context_error(owner)
        if not row["active"] and not row["compacted"]:
            raise SessionStoreError(
                f"Message {around_message_id} was rewound (undone) and is not shown; "
                "scroll around another id."
            )
        meta = _session_meta(conn, resolved)
        visible, params = visible_sql(live)
        before = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id < ?{visible} "
            "ORDER BY id DESC LIMIT ?",
            [resolved, around_message_id, *params, size],
        ).fetchall()[::-1]
        after = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id > ?{visible} "
            "ORDER BY id LIMIT ?",
            [resolved, around_message_id, *params, size],
        ).fetchall()
        first = int(before[0]["id"]) if before else around_message_id
        last = int(after[-1]["id"]) if after else around_message_id
        counts = conn.execute(
            f"SELECT sum(id < ?), sum(id > ?) FROM messages WHERE session_id = ?{visible}",
            [first, last, resolved, *params],
        ).fetchone()
    messages = [message_view(r) for r in before]
    messages.append(message_view(row, anchor=True))
    messages += [message_view(r) for r in after]
    result: dict[str, Any] = {
        "success": True,
        "mode": "scroll",
        "session_id": resolved,
        "around_message_id": around_message_id,
        "session_meta": meta,
        "window": size,
        "messages": messages,
        "messages_before": int(counts[0] or 0),
        "messages_after": int(counts[1] or 0),
    }
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    return result
