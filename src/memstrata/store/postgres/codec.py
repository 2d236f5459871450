"""Value encoding between memstrata and PostgreSQL rows.

The SQLite encoding (:mod:`memstrata.store.codec`) is reused with one difference:
PostgreSQL ``text`` cannot hold U+0000, which SQLite's structured-content sentinel
(``"\\x00json:"``) starts with. Here the sentinel is ``"\\x01json:"`` and any other NUL
in a text becomes U+FFFD, so a message with a stray NUL is stored instead of refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memstrata.store.codec import JSON_SENTINEL, decode_content, decode_tool_calls

PG_SENTINEL = "\x01json:"


def pg_text(value: str | None) -> str | None:
    """``value`` with NUL characters replaced, so PostgreSQL accepts it."""
    if value is None or "\x00" not in value:
        return value
    return value.replace("\x00", "\ufffd")


def to_pg_content(value: str | None) -> str | None:
    """SQLite-encoded content (see ``encode_content``) in its PostgreSQL form."""
    if value is not None and value.startswith(JSON_SENTINEL):
        return PG_SENTINEL + (pg_text(value[len(JSON_SENTINEL) :]) or "")
    return pg_text(value)


def from_pg_content(value: str | None) -> Any:
    """Decode stored content: structured content comes back as a list or dict."""
    if value is not None and value.startswith(PG_SENTINEL):
        return decode_content(JSON_SENTINEL + value[len(PG_SENTINEL) :])
    return value


def sqlite_form(value: str | None) -> str | None:
    """Stored content in the SQLite encoding, for code shared with the SQLite store."""
    if value is not None and value.startswith(PG_SENTINEL):
        return JSON_SENTINEL + value[len(PG_SENTINEL) :]
    return value


# Columns the SQLite store returns for a message; the PostgreSQL-only ones (namespace,
# tsv, cjk) stay inside the database.
MESSAGE_COLUMNS = (
    "id",
    "session_id",
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "api_content",
    "active",
    "compacted",
)
MESSAGE_SELECT = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS)


def row_to_message(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``messages`` row as the SQLite store returns it: decoded content and tool calls."""
    message = {c: row[c] for c in MESSAGE_COLUMNS if c in row}
    message["content"] = from_pg_content(message.get("content"))
    if "api_content" in message:
        message["api_content"] = from_pg_content(message["api_content"])
    message["tool_calls"] = decode_tool_calls(message.get("tool_calls"))
    return message


def session_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``sessions`` row without its namespace column, as the SQLite store returns it."""
    return {k: v for k, v in row.items() if k != "namespace"}
