"""The ``session_search`` tool: its schema for the model and the handler behind it.

:class:`SessionSearchTool` validates a tool call's arguments (telling the model how to
fix a bad one), opens the session store on first use and calls
:func:`memstrata.search.recall.session_search`. Register it in a
:class:`~memstrata.tools.toolbox.Toolbox` and set :attr:`SessionSearchTool.current_session_id` when
the conversation starts, so the live context is left out of the results.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, time, timedelta
from typing import Any

from memstrata.backends import open_store
from memstrata.config import Config
from memstrata.errors import ToolArgumentError
from memstrata.llm.arguments import describe_type, optional_str, shorten
from memstrata.llm.types import LLMClient
from memstrata.search.read import DEFAULT_WINDOW, MAX_WINDOW
from memstrata.search.recall import DEFAULT_LIMIT, MAX_LIMIT, session_search
from memstrata.store.contract import SessionStoreContract

NAME = "session_search"

DESCRIPTION = """\
Recall past conversations with this user from the session archive (everything ever \
discussed, including parts of this conversation that were compressed away).

CALLING SHAPES
- {} or {"query": ""}: list recent conversations (titles, previews). Free.
- {"query": "..."}: search. Returns the best conversations (default 3, max 5), each with \
a summary focused on the query (or a verbatim excerpt when no summary is available), a \
snippet and message ids.
- {"session_id": "..."}: read one session (first 20 and last 10 messages when long).
- {"session_id": "...", "around_message_id": 123, "window": 5}: read the messages \
around one message (window 1-20 each side).

QUERY: natural language works (words are ORed and ranked); "exact phrase", prefix*, \
AND, OR, NOT keep their meaning. Use distinctive words: names, file paths, error \
messages, commands. Chinese and other CJK text works.

LIMITS: summaries can miss details, so drill down with session_id/around_message_id \
before relying on exact values. No match is not proof that something was never \
discussed: try other words, and check the original source (files, repository) first."""

SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What to look for; empty lists recent conversations.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": f"Conversations to return (default {DEFAULT_LIMIT}, "
                    f"max {MAX_LIMIT}).",
                },
                "role_filter": {
                    "type": "string",
                    "description": "Only match messages of these roles, comma-separated "
                    "(user, assistant, tool).",
                },
                "source": {
                    "type": "string",
                    "description": "Only conversations from these sources, comma-separated "
                    "(e.g. cli, telegram, mcp).",
                },
                "since": {
                    "type": "string",
                    "description": "Only messages at or after this time: ISO date "
                    "(2026-03-01 or 2026-03-01T14:00) in UTC, or Unix seconds.",
                },
                "until": {
                    "type": "string",
                    "description": "Only messages at or before this time (a date "
                    "includes that whole day), same formats as since.",
                },
                "session_id": {
                    "type": "string",
                    "description": "Read this session (an id from a result).",
                },
                "around_message_id": {
                    "type": "integer",
                    "description": "With session_id: show the messages around this id.",
                },
                "window": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_WINDOW,
                    "description": f"Messages each side of around_message_id "
                    f"(default {DEFAULT_WINDOW}, max {MAX_WINDOW}).",
                },
                "summarize": {
                    "type": "boolean",
                    "description": "false: verbatim excerpts only (faster, no model call). "
                    "Default true when a summary model is configured.",
                },
            },
            "required": [],
        },
    },
}


# Unix seconds of 0001-01-01 and 9999-12-31T23:59:59 UTC: the dates Python can show.
_FIRST_SECOND = -62_135_596_800.0
_LAST_SECOND = 253_402_300_799.0


def _in_calendar(seconds: float, name: str) -> float:
    # NaN, infinities and years past 9999 cannot be shown as a date in a reply, and
    # no message was written then.
    if not math.isfinite(seconds) or not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        raise ToolArgumentError(
            f"{name}={shorten(str(seconds))} is not a usable time: send Unix seconds between "
            "years 1 and 9999, or a date like 2026-03-01."
        )
    return seconds


def parse_time(value: object, name: str, *, end_of_day: bool = False) -> float | None:
    """Parse ``since``/``until``: Unix seconds (number or digits) or an ISO date/time.

    A date without a time means the start of that day (UTC), or its end with
    ``end_of_day``; a time without a zone is UTC.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ToolArgumentError(f"{name} must be a date or Unix seconds, got a boolean.")
    if isinstance(value, int | float):
        return _in_calendar(float(value), name)
    if not isinstance(value, str):
        raise ToolArgumentError(
            f"{name} must be a date string or Unix seconds, got {describe_type(value)}."
        )
    text = value.strip()
    try:
        return _in_calendar(float(text), name)
    except ValueError:
        pass
    try:
        if len(text) == 10:
            day = datetime.fromisoformat(text).date()
            moment = datetime.combine(day, time.min, UTC)
            if end_of_day:
                moment += timedelta(days=1) - timedelta(microseconds=1)
            return moment.timestamp()
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ToolArgumentError(
            f"{name}={shorten(value)!r} is not a date: use YYYY-MM-DD, YYYY-MM-DDTHH:MM "
            "(UTC) or Unix seconds."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


# SQLite integers are 64-bit; a larger id or count cannot name anything in the store.
_INT_RANGE = range(-(2**63), 2**63)
# Longer strings are refused, not searched: no real question or id is this long, and a
# huge argument must not be echoed back into the model's context.
MAX_QUERY_CHARS = 2_000
MAX_ID_CHARS = 200


def _integer(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())  # some models quote numbers
        except ValueError:
            pass
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolArgumentError(
            f"{key} must be an integer, got {describe_type(value)} {shorten(value)!r}."
        )
    if value not in _INT_RANGE:
        raise ToolArgumentError(f"{key} is out of range ({shorten(str(value))}).")
    return value


def _bounded_str(args: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = optional_str(args, key)
    if value is not None and not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value):
        # JSON may carry a lone "\ud800" escape; SQLite cannot bind it as text.
        raise ToolArgumentError(f"{key} holds an unpaired UTF-16 surrogate: resend it as text.")
    if value is not None and len(value) > limit:
        raise ToolArgumentError(
            f"{key} is {len(value):,} chars; session_search takes at most {limit:,}. "
            + (
                "Search for the few distinctive words (names, paths, error text) instead."
                if key == "query"
                else "Send a shorter value."
            )
        )
    return value


def _flag(args: Mapping[str, Any], key: str) -> bool | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ToolArgumentError(f"{key} must be true or false, got {describe_type(value)}.")
    return value


_KNOWN = frozenset(SCHEMA["function"]["parameters"]["properties"])


def search_arguments(args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a tool call's arguments into keyword arguments of ``session_search``."""
    unknown = sorted(shorten(str(k), 40) for k in args if k not in _KNOWN)
    if unknown:
        shown = ", ".join(unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise ToolArgumentError(
            f"Unknown argument(s) {shown} for session_search. Known: {', '.join(sorted(_KNOWN))}."
        )
    limit = _integer(args, "limit")
    if limit is not None and limit < 1:
        raise ToolArgumentError(f"limit must be from 1 to {MAX_LIMIT}, got {limit}.")
    return {
        "query": _bounded_str(args, "query", MAX_QUERY_CHARS) or "",
        "limit": limit,
        "role_filter": _bounded_str(args, "role_filter", MAX_QUERY_CHARS),
        "source": _bounded_str(args, "source", MAX_QUERY_CHARS),
        "since": parse_time(args.get("since"), "since"),
        "until": parse_time(args.get("until"), "until", end_of_day=True),
        "session_id": (_bounded_str(args, "session_id", MAX_ID_CHARS) or "").strip() or None,
        "around_message_id": _integer(args, "around_message_id"),
        "window": _integer(args, "window"),
        "summarize": _flag(args, "summarize"),
    }


class SessionSearchTool:
    """The ``session_search`` tool over one session store.

    ``store`` is used as given; otherwise ``$MEMSTRATA_HOME/state.db`` is opened on the
    first call (building a toolbox creates no database). ``llm`` overrides the summary
    client; ``current_session_id`` is the caller's session, whose live messages are left
    out of results (set it when a conversation starts or switches).
    """

    name = NAME
    schema: Mapping[str, Any] = SCHEMA

    def __init__(
        self,
        store: SessionStoreContract | None = None,
        *,
        config: Config | None = None,
        current_session_id: str | None = None,
        llm: LLMClient | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._llm = llm
        self._lock = threading.Lock()
        self.current_session_id = current_session_id

    @property
    def store(self) -> SessionStoreContract:
        """The session store the configuration names (SQLite or store.dsn), opened on first
        use."""
        with self._lock:
            if self._store is None:
                config = self._config if self._config is not None else Config.load()
                self._config = config
                self._store = open_store(config)
            return self._store

    def handle(self, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run one call with parsed arguments; return the model-facing dict."""
        kwargs = search_arguments(args)
        return session_search(
            self.store,
            current_session_id=self.current_session_id,
            llm=self._llm,
            config=self._config,
            **kwargs,
        )

    def reset_turn(self) -> None:
        """Nothing is kept per turn."""
