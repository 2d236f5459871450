"""Import memstrata's own JSONL export (``memstrata export``), losslessly.

The format (written by :func:`memstrata.ops.export.export_sessions`): a header line
``{"format": "memstrata-sessions", "version": 1, ...}``, then one line per session,
``{"session": {...}, "messages": [...]}``, parents before children. Session ids are
kept as they are, so exporting a store and importing it into a fresh home rebuilds the
same sessions; importing it twice adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from memstrata.errors import ImportDataError
from memstrata.ops.importing.records import (
    BadRecord,
    Item,
    ParsedSource,
    SessionRecord,
    count,
    finite,
    guarded,
    message,
    opt_text,
    session_counters,
    session_id,
    title_text,
)
from memstrata.ops.importing.sources import decode_text, json_line, jsonl_lines, read_bytes
from memstrata.store.codec import LINEAGE_KINDS

FORMAT = "memstrata"
EXPORT_FORMAT = "memstrata-sessions"
EXPORT_VERSION = 1
SESSIONS_FILE = "sessions.jsonl"


def read(path: Path) -> ParsedSource:
    """Open an export folder (``sessions.jsonl`` and ``memories/``) or the file itself."""
    if path.is_dir():
        file = path / SESSIONS_FILE
        memory_dirs = [path / "memories"] if (path / "memories").is_dir() else []
        if not file.exists():
            return ParsedSource(FORMAT, str(path), 0, [], memory_dirs)
        parsed = parse_bytes(read_bytes(file), str(file))
        parsed.memory_dirs = memory_dirs
        return parsed
    return parse_bytes(read_bytes(path), str(path))


def is_header(item: object) -> bool:
    """True for the header line of a memstrata export."""
    return isinstance(item, Mapping) and item.get("format") == EXPORT_FORMAT


def parse_bytes(raw: bytes, origin: str) -> ParsedSource:
    """Parse the bytes of a memstrata JSONL export."""
    lines = jsonl_lines(decode_text(raw, origin))
    if lines:
        try:
            header = json_line(lines[0][1])
        except ValueError:
            header = None
        if is_header(header):
            version = header.get("version")
            if not isinstance(version, int) or version > EXPORT_VERSION:
                raise ImportDataError(
                    f"{origin} is a memstrata export of version {version!r}; this memstrata "
                    f"reads version {EXPORT_VERSION}. Upgrade memstrata to import it."
                )
            lines = lines[1:]
    return ParsedSource(FORMAT, origin, len(lines), _records(lines, Path(origin).name))


def _records(lines: list[tuple[int, str]], name: str) -> Iterator[Item]:
    for number, line in lines:
        location = f"{name}:{number}"
        yield guarded(location, partial(line_record, line, location))


def _message(raw: Mapping[str, Any]) -> dict[str, Any]:
    return message(
        raw.get("role"),
        raw.get("content"),
        timestamp=finite(raw.get("timestamp")),
        tool_calls=raw.get("tool_calls"),
        tool_call_id=raw.get("tool_call_id"),
        tool_name=raw.get("tool_name"),
        token_count=raw.get("token_count"),
        finish_reason=raw.get("finish_reason"),
        reasoning=raw.get("reasoning"),
        api_content=raw.get("api_content"),
    )


def line_record(line: str, location: str) -> SessionRecord:
    """Convert one exported session line."""
    item = json_line(line)
    if not isinstance(item, Mapping) or not isinstance(item.get("session"), Mapping):
        raise ValueError("the line is not an exported session ({'session': ..., 'messages': ...})")
    session: Mapping[str, Any] = item["session"]
    messages = item.get("messages", [])
    if not isinstance(messages, list):
        raise ValueError("'messages' must be a list")
    config = session.get("model_config")
    cost = session.get("estimated_cost_usd")
    kind = session.get("lineage_kind")
    record = SessionRecord(
        id=session_id("", session.get("id")),
        location=location,
        source=opt_text(session.get("source")) or "cli",
        title=title_text(session.get("title")),
        started_at=finite(session.get("started_at")),
        ended_at=finite(session.get("ended_at")),
        end_reason=opt_text(session.get("end_reason")),
        parent_id=opt_text(session.get("parent_session_id")),
        lineage_kind=kind if kind in LINEAGE_KINDS else None,
        model=opt_text(session.get("model")),
        model_config=config if isinstance(config, Mapping | str) else None,
        system_prompt=opt_text(session.get("system_prompt")),
        user_id=opt_text(session.get("user_id")),
        archived=bool(count(session.get("archived"))),
        counters=session_counters(session),
        estimated_cost_usd=finite(cost),
    )
    for index, raw in enumerate(messages):
        where = f"{location} messages[{index}]"
        if not isinstance(raw, Mapping):
            record.problems.append(BadRecord(where, "a message must be a JSON object"))
            continue
        converted = guarded(where, partial(_message, raw))
        if isinstance(converted, BadRecord):
            record.problems.append(converted)
            continue
        if raw.get("active", 1) in (0, False):
            record.inactive[len(record.messages)] = bool(count(raw.get("compacted")))
        record.messages.append(converted)
    return record
