"""Verbatim drill-down for ``session_search``: read a session, scroll around a message.

Both shapes show what a past conversation actually said, bounded so one call cannot
flood the model's context: a read returns the first 20 and last 10 messages of a long
session, a scroll at most 20 messages on each side of an anchor, and every message is
cut at :data:`MESSAGE_CHARS`. Neither shows the live rows of the current conversation
(the model has them already), nor rewound rows (undone on purpose).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.search.truncate import message_block
from memstrata.store.hits import text_of

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

READ_HEAD = 20
READ_TAIL = 10
MESSAGE_CHARS = 2_000
DEFAULT_WINDOW = 5
MAX_WINDOW = 20


def when(ts: float | None) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM UTC`` ("unknown" when absent)."""
    if ts is None:
        return "unknown"
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):  # NaN, or outside years 1-9999
        return f"{ts} (not a date)"


def message_view(row: Mapping[str, Any], *, anchor: bool = False) -> dict[str, Any]:
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


def _session_meta(store: SessionStoreContract, session_id: str) -> dict[str, Any]:
    row = store.get_session(session_id)
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
    store: SessionStoreContract,
    session_id: str,
    *,
    current_session_id: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One session's visible messages; a long one gives its first 20 and last 10."""
    resolved = store.resolve_session(session_id)
    meta = _session_meta(store, resolved)
    live = store.live_session_ids(current_session_id)
    total = store.count_visible([resolved], hide_live=live)
    if total == 0 and resolved in live:
        raise _in_context_error(resolved)
    long = total > READ_HEAD + READ_TAIL
    head = store.visible_messages([resolved], hide_live=live, limit=READ_HEAD if long else None)
    tail: list[dict[str, Any]] = []
    if long:
        tail = store.visible_messages(
            [resolved], hide_live=live, newest_first=True, limit=READ_TAIL
        )[::-1]
    result: dict[str, Any] = {
        "success": True,
        "mode": "read",
        "session_id": resolved,
        "session_meta": meta,
        "message_count": total,
        "messages": [message_view(r) for r in [*head, *tail]],
        "truncated": long,
    }
    if long:
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
    store: SessionStoreContract,
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
    resolved = store.resolve_session(session_id)
    warning = None
    row = store.get_message(around_message_id)
    if row is None:
        raise SessionStoreError(
            f"around_message_id {around_message_id} does not exist: use an id from a "
            "session_search result."
        )
    owner = str(row["session_id"])
    if owner != resolved:
        if owner not in store.get_compression_chain(resolved):
            raise SessionStoreError(
                f"around_message_id {around_message_id} is not in session {resolved}; "
                "pass the session_id of the result the id came from."
            )
        warning = f"Message {around_message_id} belongs to session {owner} of the same "
        warning += "conversation; showing it there."
        resolved = owner
    live = store.live_session_ids(current_session_id)
    if row["active"] and owner in live:
        raise _in_context_error(owner)
    if not row["active"] and not row["compacted"]:
        raise SessionStoreError(
            f"Message {around_message_id} was rewound (undone) and is not shown; "
            "scroll around another id."
        )
    meta = _session_meta(store, resolved)
    before = store.visible_messages(
        [resolved], hide_live=live, below=around_message_id, newest_first=True, limit=size
    )[::-1]
    after = store.visible_messages([resolved], hide_live=live, above=around_message_id, limit=size)
    first = int(before[0]["id"]) if before else around_message_id
    last = int(after[-1]["id"]) if after else around_message_id
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
        "messages_before": store.count_visible([resolved], hide_live=live, below=first),
        "messages_after": store.count_visible([resolved], hide_live=live, above=last),
    }
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    return result
