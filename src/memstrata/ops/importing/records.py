"""What every importer produces: sessions with their messages, and bad records.

A format module turns its source into a :class:`ParsedSource`: a stream of
:class:`SessionRecord` (one conversation, ready for the session store's public API) and
:class:`BadRecord` (something that could not be read, with its position). The stream
never raises: a record that cannot be converted becomes a ``BadRecord`` and the rest is
kept. Only a source that cannot be read at all raises
:class:`~memstrata.errors.ImportDataError`.

The helpers below coerce loosely typed source values (numbers given as text, ISO dates,
titles that are too long) the same way for every format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from memstrata.errors import ImportDataError
from memstrata.store.codec import SESSION_ID_MAX
from memstrata.store.titles import TITLE_MAX_CHARS

# Everything a malformed record can make a converter raise. Converters are written to
# check types, so these are the safety net that keeps one record from ending the import.
RECORD_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
)
# Timestamps outside these bounds are typos or milliseconds; they are not trusted as
# seconds since the epoch (year 2001 to year 2286).
_MIN_EPOCH = 978_307_200.0
_MAX_EPOCH = 9_999_999_999.0
_MAX_COUNT = 2**62
# The per-session usage counters a session row keeps, under the same names in every
# format that carries them (Hermes state.db, memstrata exports).
COUNTERS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
)


@dataclass(frozen=True)
class BadRecord:
    """A record that was skipped: where it is in the source and why."""

    location: str
    reason: str

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class SessionRecord:
    """One session to import, with its messages in order.

    ``messages`` hold the keys :meth:`SessionStore.append_messages` accepts.
    ``inactive`` maps the index of an archived message to its ``compacted`` flag (True:
    summarised away by compaction and still searchable; False: rewound or undone).
    ``problems`` lists the messages of this session that were skipped.
    """

    id: str
    location: str
    source: str = "import"
    title: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    parent_id: str | None = None
    lineage_kind: str | None = None
    model: str | None = None
    model_config: Mapping[str, Any] | str | None = None
    system_prompt: str | None = None
    user_id: str | None = None
    archived: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    estimated_cost_usd: float | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    inactive: dict[int, bool] = field(default_factory=dict)
    problems: list[BadRecord] = field(default_factory=list)


Item = SessionRecord | BadRecord


def ended_at_last_message(record: SessionRecord) -> SessionRecord:
    """End ``record`` at its last message when its source keeps no end time.

    An export holds finished conversations; left without an end they would count as
    live and `memstrata sessions prune` (which removes sessions ended before a cutoff)
    could never remove a year-old history.
    """
    if record.ended_at is None and record.end_reason is None:
        times = [m["timestamp"] for m in record.messages if m.get("timestamp") is not None]
        # No time at all: ended when imported (the store's time for an end without one).
        record.ended_at = max(times, default=record.started_at)
        record.end_reason = "imported"
    return record


@dataclass
class ParsedSource:
    """A readable source: its format, how many records to expect, and the records.

    ``total`` sizes the progress bar (records, not messages); ``memory_dirs`` are
    folders whose ``MEMORY.md``/``USER.md`` are merged into curated memory.
    """

    format: str
    origin: str
    total: int
    records: Iterable[Item]
    memory_dirs: list[Path] = field(default_factory=list)


T = TypeVar("T")


def guarded(location: str, convert: Callable[[], T]) -> T | BadRecord:
    """Run ``convert``; a malformed record becomes a :class:`BadRecord` at ``location``."""
    try:
        return convert()
    except RECORD_ERRORS as exc:
        reason = str(exc) or type(exc).__name__
        return BadRecord(location, f"{type(exc).__name__}: {reason[:200]}")


def guarded_items(items: Iterable[tuple[str, Callable[[], Item]]]) -> Iterator[Item]:
    """Convert each ``(location, converter)`` pair, turning failures into bad records."""
    for location, convert in items:
        yield guarded(location, convert)


def conversation_export(
    data: Any,
    origin: str,
    *,
    fmt: str,
    label: str,
    marker: str,
    convert: Callable[[Any, str], SessionRecord],
) -> ParsedSource:
    """Parse a chat service's ``conversations.json``: a list of conversations.

    One conversation object (recognised by its ``marker`` key) is accepted as a list of
    one. Each conversation is converted by ``convert(item, location)`` as the import
    reads it; ``label`` names the service in the error for anything else.
    """
    if isinstance(data, dict) and marker in data:
        data = [data]
    if not isinstance(data, list):
        raise ImportDataError(
            f"{origin} is not a {label} export: expected a list of conversations, got "
            f"{type(data).__name__}. Give conversations.json from the unzipped export."
        )
    name = Path(origin).name
    locations = [f"{name}[{index}]" for index in range(len(data))]
    items = (
        (where, partial(convert, item, where)) for where, item in zip(locations, data, strict=True)
    )
    return ParsedSource(fmt, origin, len(data), guarded_items(items))


def session_counters(session: Mapping[str, Any]) -> dict[str, int]:
    """The usage counters of a session row (see :data:`COUNTERS`); missing ones are 0."""
    return {key: count(session.get(key)) for key in COUNTERS}


def session_id(prefix: str, raw: object) -> str:
    """A stable store id ``"<prefix>-<raw>"`` from a source's own id."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise ValueError(f"the conversation id must be text, got {type(raw).__name__}")
    text = str(raw).strip()
    if not text:
        raise ValueError("the conversation has an empty id")
    sid = f"{prefix}-{text}" if prefix else text
    if len(sid) > SESSION_ID_MAX:
        raise ValueError(f"the conversation id is longer than {SESSION_ID_MAX} characters")
    return sid


def opt_text(value: object) -> str | None:
    """Text, a number as text, or None for anything else (missing, null, structures)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def title_text(value: object) -> str | None:
    """A title cut to the store's limit (whitespace collapsed); None when blank."""
    text = opt_text(value)
    if text is None:
        return None
    clean = " ".join(text.split())
    if len(clean) > TITLE_MAX_CHARS:
        clean = clean[: TITLE_MAX_CHARS - 1].rstrip() + "…"
    return clean or None


def epoch(value: object) -> float | None:
    """Seconds since the epoch from a number, numeric text or an ISO-8601 date; else None.

    Milliseconds (13-digit values) are recognised and scaled; anything else outside
    2001-2286 is rejected as not a timestamp.
    """
    if isinstance(value, bool):
        return None
    number: float | None = None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                return None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            number = parsed.timestamp()
    if number is None or not math.isfinite(number):
        return None
    if number > _MAX_EPOCH:
        number /= 1000.0
    if not _MIN_EPOCH <= number <= _MAX_EPOCH:
        return None
    return number


def _is_count(value: object) -> bool:
    # SQLite integers are 64-bit; a larger number would fail inside the store.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT


def finite(value: object) -> float | None:
    """A finite number as float (None otherwise): for sources that store epoch seconds
    exactly, such as memstrata's own export, where no range check is wanted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def count(value: object) -> int:
    """A non-negative integer counter that SQLite can hold (0 for anything else)."""
    if isinstance(value, float) and math.isfinite(value):
        value = int(value)
    return value if isinstance(value, int) and _is_count(value) else 0


def json_value(text: object) -> Any:
    """Decode JSON text; None when it is not JSON (or not text)."""
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def arguments_text(value: object) -> str:
    """Tool-call arguments as the JSON text OpenAI uses (dicts are encoded)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(value), ensure_ascii=False)


def tool_call(call_id: str, name: str, arguments: object) -> dict[str, Any]:
    """One OpenAI-format tool call."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_text(arguments)},
    }


def _json_safe(value: object, what: str) -> None:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not plain JSON ({exc})") from exc


def message(
    role: object,
    content: object,
    *,
    timestamp: float | None,
    tool_calls: object = None,
    tool_call_id: object = None,
    tool_name: object = None,
    token_count: object = None,
    finish_reason: object = None,
    reasoning: object = None,
    api_content: object = None,
) -> dict[str, Any]:
    """A message mapping the store accepts, checked field by field.

    Raises ValueError (caught as a bad record) for a missing role or content the store
    could not keep; optional fields of the wrong type are dropped rather than refused.
    """
    if not isinstance(role, str) or not role.strip():
        raise ValueError("the message has no role")
    if content is not None and not isinstance(content, str | list | dict):
        content = str(content) if isinstance(content, int | float) else None
    if isinstance(content, list | dict):
        _json_safe(content, "the message content")
    calls: Any = tool_calls if isinstance(tool_calls, list | dict) and tool_calls else None
    if calls is not None:
        _json_safe(calls, "the tool calls")
    if api_content is not None and not isinstance(api_content, str | list | dict):
        api_content = None
    if isinstance(api_content, list | dict):
        _json_safe(api_content, "the api_content")
    tokens = token_count if _is_count(token_count) else None
    return {
        "role": role,
        "content": content,
        "tool_calls": calls,
        "tool_call_id": opt_text(tool_call_id),
        "tool_name": opt_text(tool_name),
        "timestamp": timestamp,
        "token_count": tokens,
        "finish_reason": opt_text(finish_reason),
        "reasoning": opt_text(reasoning),
        "api_content": api_content,
    }


def parents_first(pairs: Iterable[tuple[str, object]]) -> list[str]:
    """Order ``(id, parent id)`` pairs so that every parent comes before its children.

    Siblings keep their input order; a parent that is not among the ids counts as none,
    and ids caught in a parent loop (never reached from a root) come last.
    """
    items = list(pairs)
    known = {sid for sid, _ in items}
    children: dict[object, list[str]] = {}
    for sid, parent in items:
        key = parent if parent in known and parent != sid else None
        children.setdefault(key, []).append(sid)
    order: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(children.get(None, [])))
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        order.append(sid)
        stack.extend(reversed(children.get(sid, [])))
    order += [sid for sid, _ in items if sid not in seen]
    return order
