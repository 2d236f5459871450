"""Row filters of a full-text search: roles, sources, sessions, time range, visibility.

Every backend applies them inside its candidate queries, as bound parameters, so a
filter never empties a list that the index had already truncated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memstrata.errors import SessionStoreError

# Recall's own traffic, kept in the transcript but out of recall and listings (the
# Hermes integration names the tool memstrata_session_search beside Hermes' own).
HIDDEN_TOOLS: tuple[str, ...] = ("session_search", "memstrata_session_search")


def tool_call_pattern(name: str) -> str:
    """The text stored ``tool_calls`` JSON holds when it calls ``name`` (searched as a
    plain substring: a LIKE pattern would read the ``_`` of a tool name as a wildcard)."""
    return f'"{name}"'


@dataclass(frozen=True)
class Filters:
    """Row filters shared by every candidate query; values are always bound parameters."""

    roles: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    exclude_sources: tuple[str, ...] = ()
    exclude_session_ids: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    include_inactive: bool = False

    # Tools whose traffic (the call of a content-less assistant message, and the result)
    # is left out: a session_search result quotes what it found, so indexing it would
    # rank the search above the conversation it found.
    hidden_tools: tuple[str, ...] = HIDDEN_TOOLS

    # Sessions whose live rows are left out (the current conversation's context, which
    # recall must not return); their archived rows and ancestors stay findable.
    hide_live: tuple[str, ...] = ()

    @property
    def needs_sessions(self) -> bool:
        """True when a filter reads the session's row (its source)."""
        return bool(self.sources or self.exclude_sources)


def _as_tuple(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Accept a list or a comma-separated string (as tool calls send it)."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))


def make_filters(
    *,
    role_filter: str | Iterable[str] | None = None,
    source_filter: str | Iterable[str] | None = None,
    exclude_sources: str | Iterable[str] | None = None,
    exclude_session_ids: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    include_inactive: bool = False,
    include_tool_traffic: bool = False,
) -> Filters:
    """Normalise the keyword filters of the search functions into :class:`Filters`."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and not isinstance(value, int | float):
            raise SessionStoreError(
                f"{name} must be a Unix timestamp in seconds (int or float), got {value!r}."
            )
    return Filters(
        roles=_as_tuple(role_filter),
        sources=_as_tuple(source_filter),
        exclude_sources=_as_tuple(exclude_sources),
        exclude_session_ids=_as_tuple(exclude_session_ids),
        since=None if since is None else float(since),
        until=None if until is None else float(until),
        include_inactive=include_inactive,
        hidden_tools=() if include_tool_traffic else HIDDEN_TOOLS,
    )
