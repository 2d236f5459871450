"""How message values are written to and read from the ``messages`` table.

* Every text is scrubbed of lone surrogates (a broken emoji from a streaming chunk would
  otherwise make SQLite's UTF-8 conversion fail and lose the whole turn).
* Structured content (a list of parts, or a dict) is stored as ``\\x00json:`` followed by
  its JSON, the same sentinel Hermes uses, and decoded on read; the index sees its text.
* ``tool_calls`` is stored as JSON; the number of calls feeds ``tool_call_count``.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from memstrata.errors import SessionStoreError
from memstrata.query.paging import SQL_INTEGERS

# Lineage kinds live here, the lowest layer, so that validation and lineage share them.
LINEAGE_KINDS = ("compression", "branch", "delegate", "reset")
SESSION_ID_MAX = 200
# A session's source is a label (cli, mcp, a platform's name) that listings filter on:
# PostgreSQL indexes it with the tenant, and an index row past about 2,700 bytes fails
# the insert there; one bound for both backends, far above any label.
SOURCE_MAX = 200
JSON_SENTINEL = "\x00json:"
_SURROGATES = re.compile("[\ud800-\udfff]")

Content = str | list[Any] | dict[str, Any] | None

# Keys a message mapping may carry in append_messages / replace_messages; "name" is the
# OpenAI spelling of tool_name on tool results.
MESSAGE_KEYS = frozenset(
    {
        "role",
        "content",
        "tool_name",
        "name",
        "tool_calls",
        "tool_call_id",
        "timestamp",
        "token_count",
        "finish_reason",
        "reasoning",
        "api_content",
    }
)


# The per-call usage counters of a session, in the order update_token_counts takes them
# (both backends add to the same columns).
TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def prune_cutoff(older_than: float | timedelta) -> float:
    """The Unix time ``older_than`` before now (a number counts days; a timedelta as is)."""
    days = older_than.total_seconds() / 86400 if isinstance(older_than, timedelta) else older_than
    if isinstance(days, bool) or not isinstance(days, int | float) or days < 0:
        raise SessionStoreError("older_than must be a non-negative number of days or a timedelta.")
    return time.time() - float(days) * 86400


def timestamp_bounds(since: float | None, until: float | None) -> list[tuple[str, float]]:
    """The comparisons (``">="`` since, ``"<="`` until) of the bounds given, each checked
    as a Unix timestamp; both are inclusive."""
    bounds: list[tuple[str, float]] = []
    for bound, op, name in ((since, ">=", "since"), (until, "<=", "until")):
        if bound is None:
            continue
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            raise SessionStoreError(f"{name} must be a Unix timestamp (seconds), got {bound!r}.")
        bounds.append((op, float(bound)))
    return bounds


def decode_model_config(session: dict[str, Any]) -> dict[str, Any]:
    """``session`` with its ``model_config`` decoded when it holds JSON (kept as text if not)."""
    raw = session.get("model_config")
    if isinstance(raw, str):
        try:
            session["model_config"] = json.loads(raw)
        except ValueError:
            pass
    return session


def usage_values(
    counts: tuple[int, ...], api_calls: int, estimated_cost_usd: float | None
) -> list[Any]:
    """Check one API call's usage; return the values to add, in TOKEN_COLUMNS order, then
    ``api_calls``, then the cost when one was given.

    ``True`` is refused as a count (Python would add it as 1), and so is a cost that is
    negative, infinite or NaN: one bad value would poison the session's total for good.
    """
    values = (*counts, api_calls)
    if any(
        isinstance(c, bool) or not isinstance(c, int) or c < 0 or c not in SQL_INTEGERS
        for c in values
    ):
        raise SessionStoreError(
            f"Token counts and api_calls must be non-negative integers below 2**63, got {values!r}."
        )
    if estimated_cost_usd is None:
        return list(values)
    if isinstance(estimated_cost_usd, bool) or not isinstance(estimated_cost_usd, int | float):
        raise SessionStoreError(f"estimated_cost_usd must be a number, got {estimated_cost_usd!r}.")
    if not math.isfinite(estimated_cost_usd) or estimated_cost_usd < 0:
        raise SessionStoreError(
            f"estimated_cost_usd must be a finite non-negative number, got {estimated_cost_usd!r}."
        )
    return [*values, float(estimated_cost_usd)]


def scrub(text: str | None) -> str | None:
    """Replace lone surrogates with U+FFFD so the text can be encoded as UTF-8."""
    if text is None:
        return None
    return _SURROGATES.sub("\ufffd", text)


def text_field(value: object, field: str) -> str | None:
    """Check that ``value`` is text (or None) and scrub it."""
    if value is None or isinstance(value, str):
        return scrub(value)
    raise SessionStoreError(f"{field} must be text, not {type(value).__name__}.")


def source_label(source: object) -> str:
    """A session's ``source``, checked: text of at most SOURCE_MAX characters ("cli" when
    empty)."""
    label = text_field(source, "source") or "cli"
    if len(label) > SOURCE_MAX:
        raise SessionStoreError(
            f"A session's source is a label of at most {SOURCE_MAX} characters, got "
            f"{len(label):,}: use a short name such as 'cli' or 'telegram'."
        )
    return label


def is_epoch(value: object) -> bool:
    """Whether ``value`` can be a timestamp: a finite number (``True`` is not one). NaN
    broke SQLite's NOT NULL (it stores NaN as NULL) and sorted anywhere on PostgreSQL;
    an infinite start put a session before or after every other for good."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past any float
        return False


def session_values(
    session_id: str,
    *,
    source: str,
    user_id: str | None,
    model: str | None,
    model_config: Mapping[str, Any] | str | None,
    system_prompt: str | None,
    parent_session_id: str | None,
    lineage_kind: str | None,
    started_at: float | None,
) -> dict[str, Any]:
    """Validate ``create_session``'s arguments; return the ``sessions`` columns to insert."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise SessionStoreError("A session id must be non-empty text.")
    if len(session_id) > SESSION_ID_MAX:
        raise SessionStoreError(f"A session id is at most {SESSION_ID_MAX} characters.")
    if lineage_kind is not None and lineage_kind not in LINEAGE_KINDS:
        raise SessionStoreError(
            f"Unknown lineage_kind {lineage_kind!r}; use one of {', '.join(LINEAGE_KINDS)}."
        )
    if lineage_kind is not None and parent_session_id is None:
        raise SessionStoreError("lineage_kind needs a parent_session_id to refer to.")
    if parent_session_id == session_id:
        raise SessionStoreError("A session cannot be its own parent.")
    if started_at is not None and not is_epoch(started_at):
        raise SessionStoreError(
            f"started_at must be epoch seconds (a finite number), got {started_at!r}."
        )
    if isinstance(model_config, Mapping):
        try:
            config_text = json.dumps(dict(model_config), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise SessionStoreError(f"model_config cannot be stored as JSON ({exc}).") from exc
    else:
        config_text = text_field(model_config, "model_config") or ""
    return {
        "id": session_id,
        "source": source_label(source),
        "user_id": text_field(user_id, "user_id"),
        "model": text_field(model, "model"),
        "model_config": scrub(config_text) or None,
        "system_prompt": text_field(system_prompt, "system_prompt"),
        "parent_session_id": text_field(parent_session_id, "parent_session_id"),
        "lineage_kind": lineage_kind,
        "started_at": float(started_at) if started_at is not None else time.time(),
        "title": None,  # set afterwards: titles are unique and may move
    }


def encode_content(value: object, field: str = "content") -> str | None:
    """Encode a content value: text as is (scrubbed), lists and dicts as sentinel JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list | dict):
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise SessionStoreError(
                f"Message {field} is a {type(value).__name__} that cannot be stored as JSON "
                f"({exc}): pass text, or lists/dicts of JSON values."
            ) from exc
        except RecursionError as exc:  # see _TOO_DEEP
            raise SessionStoreError(
                f"Message {field} nests too deeply to store as JSON: pass text, or parts "
                "a few levels deep."
            ) from exc
        return JSON_SENTINEL + (scrub(text) or "")
    raise SessionStoreError(
        f"Message {field} must be text, a list of parts or a dict, not {type(value).__name__}."
    )


def decode_content(value: str | None) -> Content:
    """Decode a stored content value (the inverse of :func:`encode_content`)."""
    if value is not None and value.startswith(JSON_SENTINEL):
        try:
            decoded: list[Any] | dict[str, Any] = json.loads(value[len(JSON_SENTINEL) :])
        except (ValueError, RecursionError):
            return value
        return decoded
    return value


def content_text(content: Any) -> str:
    """Plain text of stored or decoded content: a list's ``text`` parts joined."""
    value = decode_content(content) if isinstance(content, str) else content
    if isinstance(value, list):
        return " ".join(
            str(p["text"]) for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if isinstance(value, dict):
        raw = value.get("text", "")
        return raw if isinstance(raw, str) else ""
    return value if isinstance(value, str) else ""


def encode_tool_calls(value: object) -> tuple[str | None, int]:
    """Return the JSON text of ``tool_calls`` and the number of calls it holds."""
    if value is None:
        return None, 0
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise SessionStoreError(
                f"tool_calls is text but not JSON ({exc}): pass the list of calls."
            ) from exc
        except RecursionError as exc:
            raise SessionStoreError(_TOO_DEEP) from exc
        return scrub(value), len(parsed) if isinstance(parsed, list) else 1
    if isinstance(value, list | tuple):
        calls = list(value)
    elif isinstance(value, dict):
        calls = [value]
    else:
        raise SessionStoreError(f"tool_calls must be a list of calls, not {type(value).__name__}.")
    try:
        text = json.dumps(calls, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise SessionStoreError(f"tool_calls cannot be stored as JSON ({exc}).") from exc
    except RecursionError as exc:
        raise SessionStoreError(_TOO_DEEP) from exc
    return scrub(text), len(calls)


# Python's json recurses once per level: a few thousand nested lists ran out of stack.
_TOO_DEEP = (
    "tool_calls nest too deeply to store as JSON: pass the arguments of a call as a "
    "JSON string, as the chat APIs do."
)


def decode_tool_calls(value: str | None) -> Any:
    """Decode stored ``tool_calls`` JSON; text that is not JSON is returned unchanged."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def row_to_message(row: sqlite3.Row) -> dict[str, Any]:
    """A ``messages`` row as a dict with decoded content and tool calls."""
    message = dict(row)
    message["content"] = decode_content(message.get("content"))
    if "api_content" in message:
        message["api_content"] = decode_content(message["api_content"])
    message["tool_calls"] = decode_tool_calls(message.get("tool_calls"))
    return message


def check_message_keys(message: Mapping[str, Any], index: int) -> None:
    """Refuse unknown keys instead of dropping them silently."""
    unknown = set(message) - MESSAGE_KEYS
    if unknown:
        raise SessionStoreError(
            f"Message {index} has unknown keys {sorted(unknown)}; known keys: "
            f"{', '.join(sorted(MESSAGE_KEYS))}."
        )
    if not isinstance(message.get("role"), str) or not message.get("role"):
        raise SessionStoreError(f"Message {index} needs a non-empty 'role'.")


@dataclass(frozen=True)
class MessageValues:
    """One message validated and encoded for a ``messages`` row (content in the SQLite
    encoding: structured content is ``JSON_SENTINEL`` + JSON), plus its tool-call count."""

    role: str
    content: str | None
    tool_call_id: str | None
    tool_calls: str | None
    tool_name: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    api_content: str | None
    n_tool_calls: int


def message_values(message: Mapping[str, Any], index: int) -> MessageValues:
    """Validate one message of an append (``index`` names it in errors) and encode it."""
    check_message_keys(message, index)

    def text(value: object, field: str) -> str | None:
        return text_field(value, f"Message {index}: {field}")

    tool_name = message.get("tool_name", message.get("name"))
    tool_calls, n_calls = encode_tool_calls(message.get("tool_calls"))
    stamp = message.get("timestamp")
    if stamp is not None and not is_epoch(stamp):
        raise SessionStoreError(
            f"Message {index}: timestamp must be epoch seconds (a finite number), got {stamp!r}."
        )
    tokens = message.get("token_count")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens not in SQL_INTEGERS
    ):
        raise SessionStoreError(
            f"Message {index}: token_count must be an integer below 2**63, got {tokens!r}."
        )
    return MessageValues(
        role=text(message["role"], "role") or "",
        content=encode_content(message.get("content")),
        tool_call_id=text(message.get("tool_call_id"), "tool_call_id"),
        tool_calls=tool_calls,
        tool_name=text(tool_name, "tool_name"),
        timestamp=float(stamp) if stamp is not None else time.time(),
        token_count=tokens,
        finish_reason=text(message.get("finish_reason"), "finish_reason"),
        reasoning=text(message.get("reasoning"), "reasoning"),
        api_content=encode_content(message.get("api_content"), "api_content"),
        n_tool_calls=n_calls,
    )
