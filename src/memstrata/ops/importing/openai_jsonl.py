"""Import generic OpenAI-format JSONL: one conversation per line.

Each line is an object ``{"messages": [...]}`` with optional ``id``, ``title`` and
``created`` (epoch seconds or ISO-8601), the shape of OpenAI fine-tuning files and of
many agent logs. Messages are OpenAI chat messages (``role``, ``content``,
``tool_calls``, ``tool_call_id``, ``name``; the legacy ``function_call`` becomes a tool
call). The session id is ``openai-<id>``, or ``openai-<hash of the messages>`` when a
line has no id, so importing the same file twice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from memstrata.ops.importing.records import (
    BadRecord,
    Item,
    ParsedSource,
    SessionRecord,
    ended_at_last_message,
    epoch,
    guarded,
    message,
    opt_text,
    session_id,
    title_text,
    tool_call,
)
from memstrata.ops.importing.sources import decode_text, json_line, jsonl_lines, read_bytes

FORMAT = "openai"
PREFIX = "openai"
# Sessions are marked with the format they came from, as ChatGPT and Claude ones are.
SOURCE = "openai"
# The roles of the OpenAI chat format; anything else is a bad message, not a new role.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def read(path: Path) -> ParsedSource:
    """Open a ``.jsonl`` file for import."""
    return parse_bytes(read_bytes(path), str(path))


def parse_bytes(raw: bytes, origin: str) -> ParsedSource:
    """Parse the bytes of an OpenAI-format JSONL file."""
    lines = jsonl_lines(decode_text(raw, origin))
    return ParsedSource(FORMAT, origin, len(lines), _records(lines, Path(origin).name))


def _records(lines: list[tuple[int, str]], name: str) -> Iterator[Item]:
    for number, line in lines:
        location = f"{name}:{number}"
        yield guarded(location, partial(line_record, line, location))


def _digest(messages: object) -> str:
    canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _calls(raw: Mapping[str, Any], index: int) -> list[dict[str, Any]] | None:
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [c for c in calls if isinstance(c, Mapping)] or None  # type: ignore[misc]
    legacy = raw.get("function_call")
    if isinstance(legacy, Mapping) and isinstance(legacy.get("name"), str):
        return [tool_call(f"call_{index}", str(legacy["name"]), legacy.get("arguments", ""))]
    return None


def line_record(line: str, location: str) -> SessionRecord:
    """Convert one JSONL line."""
    item = json_line(line)
    if not isinstance(item, Mapping):
        raise ValueError(f"a line must be a JSON object, got {type(item).__name__}")
    raw_messages = item.get("messages")
    if not isinstance(raw_messages, list):
        raise ValueError("the line has no 'messages' list")
    raw_id = item.get("id")
    started = epoch(item.get("created", item.get("created_at")))
    record = SessionRecord(
        id=session_id(PREFIX, raw_id if raw_id not in (None, "") else _digest(raw_messages)),
        location=location,
        source=SOURCE,
        title=title_text(item.get("title")),
        started_at=started,
        model=opt_text(item.get("model")),
    )
    for index, raw in enumerate(raw_messages):
        where = f"{location} messages[{index}]"
        if not isinstance(raw, Mapping):
            reason = f"a message must be a JSON object, got {type(raw).__name__}"
            record.problems.append(BadRecord(where, reason))
            continue
        role = raw.get("role")
        if isinstance(role, str) and role.strip() and role not in ROLES:
            reason = f"unknown role {role[:40]!r} (the OpenAI format has {', '.join(ROLES)})"
            record.problems.append(BadRecord(where, reason))
            continue
        converted = guarded(
            where,
            partial(
                message,
                role,
                raw.get("content"),
                timestamp=epoch(raw.get("timestamp")) or started,
                tool_calls=_calls(raw, index),
                tool_call_id=raw.get("tool_call_id"),
                tool_name=raw.get("name") if role in ("tool", "function") else None,
            ),
        )
        if isinstance(converted, dict):
            record.messages.append(converted)
        else:
            record.problems.append(converted)
    return ended_at_last_message(record)
