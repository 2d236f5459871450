"""``session_search``: recall of past conversations from the L2 session store.

One entry point, four shapes inferred from the arguments:

* **recent** (no query): the latest conversations, titles and previews; no model call.
* **discover** (a query): full-text search ranked per conversation lineage; the top
  conversations are loaded, cut around the matches and summarised by the summary model
  with the query as focus (concurrent, bounded, cached); verbatim excerpts stand in for
  any summary that is not available.
* **read** (``session_id``): one session's messages, bounded (first 20 + last 10).
* **scroll** (``session_id`` + ``around_message_id``): a window of messages around one.

The current conversation's *live* context is excluded from every shape: the model has it
already. What compression removed from it stays findable: the messages of compression
ancestors and the archived (compacted) rows of the current session are searched like any
other past conversation, so nothing said earlier falls into a "memory black hole".

Every answer carries a ``note``: finding nothing is not proof that something was never
discussed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memstrata.config import Config
from memstrata.errors import ConfigError, LLMNotConfiguredError, MemstrataError, SessionStoreError
from memstrata.llm.types import LLMClient
from memstrata.query.compile import compile_query
from memstrata.query.filters import Filters, make_filters
from memstrata.query.spelling import searched_as
from memstrata.search.read import read_session, scroll_session, when
from memstrata.search.summarize import (
    MAX_CONCURRENCY,
    MAX_SUMMARY_INPUT_CHARS,
    SummaryJob,
    SummaryOutcome,
    cache_get,
    summarize_all,
)
from memstrata.search.truncate import (
    Needles,
    format_transcript,
    needles_for,
    truncate_around_matches,
)
from memstrata.store.vectors import warn_degraded

if TYPE_CHECKING:
    from memstrata.search.embedders import Embedder
    from memstrata.store.contract import SessionStoreContract

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 3
MAX_LIMIT = 5
# Verbatim text returned to the model per conversation when there is no summary: enough
# for the exchange around the match, small enough that five results stay readable.
VERBATIM_CHARS = 4_000
# Sources whose sessions are machinery, not conversations with the user; searched only
# when asked for by name.
HIDDEN_SOURCES = ("subagent", "tool")
NOTE = (
    "No match here is not proof of absence: the search matches words, not meaning, and "
    "older sessions may have been pruned. Try other words (synonyms, names, file paths), "
    "or check the original source before concluding something was never discussed."
)
DRILL_HINT = (
    "To see the original messages, call session_search with session_id (read a session) "
    "or with session_id and around_message_id (a window of up to 20 messages each side)."
)


def _clamp_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise SessionStoreError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}.")
    return max(1, min(MAX_LIMIT, limit))


def session_search(
    store: SessionStoreContract,
    query: str | None = "",
    *,
    current_session_id: str | None = None,
    limit: int | None = None,
    role_filter: str | Iterable[str] | None = None,
    source: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    session_id: str | None = None,
    around_message_id: int | None = None,
    window: int | None = None,
    summarize: bool | None = None,
    llm: LLMClient | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Recall past conversations; return the model-facing result as a dict.

    ``query`` empty lists recent conversations; otherwise the best ``limit``
    conversations (default 3, at most 5) are returned, each with a query-focused
    ``summary`` or, when no summary can be made, a verbatim ``excerpt``. ``session_id``
    alone reads a session; with ``around_message_id`` it scrolls around a message
    (``window`` 1-20, default 5). ``role_filter`` and ``source`` take a list or a
    comma-separated string; ``since``/``until`` are Unix timestamps (inclusive).

    ``current_session_id`` names the session the caller is in: its live messages (and
    those of its delegates and continuations) are left out. ``summarize=False`` skips
    the model; ``None`` summarises when a summary model is configured. ``llm`` overrides
    the client (``client_for("summary", config)`` otherwise); ``config`` supplies
    ``search.max_concurrency`` and ``search.summary_timeout``.

    Raises :class:`~memstrata.errors.SessionStoreError` subclasses for bad arguments or
    unknown sessions; model failures never raise (they fall back to verbatim text).
    """
    if query is not None and not isinstance(query, str):
        raise SessionStoreError(f"query must be text, got {type(query).__name__}.")
    if since is not None and until is not None and since > until:
        raise SessionStoreError(
            f"since ({when(since)}) is after until ({when(until)}): swap them or drop one."
        )
    if session_id:
        if around_message_id is not None:
            return scroll_session(
                store,
                session_id,
                around_message_id,
                window=window,
                current_session_id=current_session_id,
                note=NOTE,
            )
        return read_session(store, session_id, current_session_id=current_session_id, note=NOTE)
    if around_message_id is not None:
        raise SessionStoreError(
            "around_message_id needs session_id too: pass the session_id of the result "
            "the message id came from."
        )
    count = _clamp_limit(limit)
    if not (query or "").strip():
        # The listing needs list_sessions_rich only, which both stores provide.
        return recent_sessions(
            store,
            limit=count,
            source=source,
            since=since,
            until=until,
            current_session_id=current_session_id,
        )
    return discover(
        store,
        query or "",
        limit=count,
        current_session_id=current_session_id,
        role_filter=role_filter,
        source=source,
        since=since,
        until=until,
        summarize=summarize,
        llm=llm,
        config=config,
    )


# ----------------------------------------------------------------------------- recent


def _sources(source: str | Iterable[str] | None) -> tuple[str, ...]:
    if source is None:
        return ()
    items = source.split(",") if isinstance(source, str) else list(source)
    return tuple(dict.fromkeys(str(s).strip() for s in items if str(s).strip()))


def recent_sessions(
    store: SessionStoreContract,
    *,
    limit: int = DEFAULT_LIMIT,
    source: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    current_session_id: str | None = None,
) -> dict[str, Any]:
    """The most recently active conversations (not the current one), without any model."""
    sources = _sources(source)
    # Filters other than one source are applied to the listing, so fetch a wider page.
    wide = since is not None or until is not None or len(sources) > 1
    entries = store.list_sessions_rich(
        source=sources[0] if len(sources) == 1 else None,
        exclude_sources=None if sources else HIDDEN_SOURCES,
        limit=500 if wide else limit + 5,
    )
    results: list[dict[str, Any]] = []
    for entry in entries:
        if current_session_id is not None and current_session_id in entry["session_ids"]:
            continue
        if sources and entry["source"] not in sources:
            continue
        active = entry["last_active"] or entry["started_at"]
        if since is not None and active < since:
            continue
        if until is not None and entry["started_at"] > until:
            continue
        results.append(
            {
                "session_id": entry["id"],
                "conversation_root": entry["root_id"],
                "title": entry["title"],
                "source": entry["source"],
                "started": when(entry["started_at"]),
                "last_active": when(entry["last_active"]),
                "message_count": entry["message_count"],
                "preview": entry["preview"],
            }
        )
        if len(results) >= limit:
            break
    return {
        "success": True,
        "mode": "recent",
        "results": results,
        "count": len(results),
        "message": (
            f"Showing the {len(results)} most recent conversations. Pass a query to search "
            "them all."
            if results
            else "No past conversations are stored yet."
        ),
        "note": NOTE,
        "hint": DRILL_HINT,
    }


# --------------------------------------------------------------------------- discover


@dataclass
class _Conversation:
    """One result conversation: its best hit, compression chain and size.

    Its messages are loaded only when needed: a window around the best hit for a
    verbatim excerpt, the whole conversation for a summary that is not cached.
    """

    root: str
    best: dict[str, Any]
    message_ids: list[int]
    chain: list[str]
    meta: dict[str, Any]
    live: tuple[str, ...]
    message_count: int
    last_message_id: int
    chars: int

    @property
    def current(self) -> bool:
        """True when this is the current conversation (its compressed-away part)."""
        return bool(set(self.chain) & set(self.live))


def _all_rows(store: SessionStoreContract, conv: _Conversation) -> list[dict[str, Any]]:
    return store.visible_messages(conv.chain, hide_live=conv.live)


def _rows_near(
    store: SessionStoreContract, conv: _Conversation, before: int = 12, after: int = 30
) -> list[dict[str, Any]]:
    # Enough messages around the best hit for a verbatim excerpt; more after it than
    # before, as in the truncation window (what followed a match is the answer).
    anchor = int(conv.best["id"])
    head = store.visible_messages(
        conv.chain, hide_live=conv.live, below=anchor + 1, newest_first=True, limit=before + 1
    )
    tail = store.visible_messages(conv.chain, hide_live=conv.live, above=anchor, limit=after)
    return [*reversed(head), *tail]


@dataclass(frozen=True)
class _Evidence:
    """The recall options of ``search.*`` for one search (see docs/recall.md)."""

    dates: bool = True
    embedder: Embedder | None = None
    subqueries: tuple[str, ...] = ()


def _evidence(
    store: SessionStoreContract, query: str, config: Config | None, llm: LLMClient | None
) -> _Evidence:
    cfg = config if config is not None else Config.load()
    from memstrata.search.embedders import embedder_from_config

    subqueries: list[str] = []
    if cfg.get("search.expansion"):
        from memstrata.search.expansion import expand_query

        try:
            client = llm
            if client is None:
                from memstrata.llm.settings import client_for

                client = client_for("summary", cfg)
            subqueries = expand_query(store, client, query)
        except MemstrataError as exc:
            # Expansion only ever adds to a search; without a model the question alone runs.
            log.warning("query expansion skipped: %s", exc)
    try:
        embedder = embedder_from_config(cfg)
    except ConfigError as exc:
        # An embedder that cannot load (numpy or its model not installed) costs the
        # vectors, never the search.
        warn_degraded(
            f"Hybrid recall with search.embedder={cfg.get('search.embedder')!r}", str(exc)
        )
        embedder = None
    return _Evidence(
        dates=bool(cfg.get("search.dates")),
        embedder=embedder,
        subqueries=tuple(subqueries),
    )


def _find(
    store: SessionStoreContract,
    query: str,
    filters: Filters,
    limit: int,
    current_session_id: str | None,
    evidence: _Evidence,
) -> tuple[list[_Conversation], int]:
    found, searched = store.find_conversations(
        query,
        filters,
        limit=limit,
        current_session_id=current_session_id,
        dates=evidence.dates,
        embedder=evidence.embedder,
        subqueries=evidence.subqueries,
        # discover corrected the query's typos already (store.respell)
        typos=False,
    )
    return [_Conversation(**conv) for conv in found], searched


@dataclass
class _Summarizer:
    """The summary model for one search: resolved cheaply, connected only if needed."""

    llm: LLMClient | None
    config: Config | None
    unavailable: str | None = None

    def __post_init__(self) -> None:
        if self.llm is not None:
            return
        from memstrata.llm.settings import resolve_settings

        try:
            self._settings = resolve_settings("summary", self.config)
        except LLMNotConfiguredError:
            self.unavailable = "no summary model is configured (llm.summary_model or llm.model)"
        except MemstrataError as exc:
            self.unavailable = f"the summary model cannot be used: {exc}"

    def client(self) -> tuple[LLMClient, bool]:
        """The client, and whether the caller must close it."""
        if self.llm is not None:
            return self.llm, False
        from memstrata.llm.settings import client_from_settings

        return client_from_settings(self._settings), True


def discover(
    store: SessionStoreContract,
    query: str,
    *,
    limit: int = DEFAULT_LIMIT,
    current_session_id: str | None = None,
    role_filter: str | Iterable[str] | None = None,
    source: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    summarize: bool | None = None,
    llm: LLMClient | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Search, group by lineage, cut around matches, summarise (see :func:`session_search`)."""
    sources = _sources(source)
    base = make_filters(
        role_filter=role_filter,
        source_filter=sources or None,
        exclude_sources=None if sources else HIDDEN_SOURCES,
        since=since,
        until=until,
    )
    filters = base
    envelope: dict[str, Any] = {"success": True, "mode": "discover", "query": query}
    # Typos searched as the store's words (query.spelling): the excerpts are cut and the
    # summaries focused around what the search found, not around the misspelt word.
    fixed, corrected = store.respell(query)
    query = fixed or query
    if corrected:
        envelope["corrected"] = corrected
    compiled = compile_query(query)
    if compiled.is_empty:
        return {
            **envelope,
            "results": [],
            "count": 0,
            "message": "The query has nothing searchable in it: give words, names or paths.",
            "note": NOTE,
        }
    evidence = _evidence(store, query, config, llm)
    found, searched = _find(store, query, filters, limit, current_session_id, evidence)
    needles = needles_for(compiled)
    results = [_result(conv) for conv in found]
    outcomes, status = _summaries(store, found, query, needles, summarize, llm, config)
    for conv, result, outcome in zip(found, results, outcomes, strict=True):
        _attach(store, conv, result, outcome, needles, status)
    message = (
        f"Found {len(results)} matching conversation(s) among {searched} with hits."
        if results
        else "No matching conversations found."
    )
    if corrected:
        message += " " + searched_as(corrected)
    return {
        **envelope,
        "results": results,
        "count": len(results),
        "sessions_searched": searched,
        "summaries": status,
        "message": message,
        "note": NOTE,
        "hint": DRILL_HINT,
    }


def _result(conv: _Conversation) -> dict[str, Any]:
    hit = conv.best
    result: dict[str, Any] = {
        "session_id": hit["session_id"],
        "conversation_root": conv.root,
        "tip_session_id": conv.chain[-1],
        "title": conv.meta["title"],
        "source": conv.meta["source"],
        "started": when(conv.meta["started_at"]),
        "last_active": when(conv.meta["last_active"]),
        "matched_role": hit["role"],
        "match_message_id": hit["id"],
        "match_message_ids": conv.message_ids,
        "snippet": hit["snippet"],
        "message_count": conv.message_count,
    }
    if conv.current:
        result["current_conversation"] = True
        result["current_conversation_note"] = (
            "Earlier part of the current conversation, removed from your context by compression."
        )
    return result


def _job(conv: _Conversation, query: str, transcript: str) -> SummaryJob:
    return SummaryJob(
        tip_session_id=conv.chain[-1],
        root_session_id=conv.chain[0],
        message_count=conv.message_count,
        last_message_id=conv.last_message_id,
        query=query,
        transcript=transcript,
        source=str(conv.meta["source"]),
        when=when(conv.meta["started_at"]),
    )


def _summaries(
    store: SessionStoreContract,
    found: list[_Conversation],
    query: str,
    needles: Needles,
    summarize: bool | None,
    llm: LLMClient | None,
    config: Config | None,
) -> tuple[list[SummaryOutcome | None], dict[str, Any]]:
    """Summaries for ``found`` (cache first; the model for the rest) and the status."""
    outcomes: list[SummaryOutcome | None] = [None] * len(found)
    status: dict[str, Any] = {"requested": 0, "made": 0, "cached": 0, "failed": 0}
    if not found or summarize is False:
        return outcomes, status
    summarizer = _Summarizer(llm, config)
    if summarizer.unavailable is not None:
        status["unavailable"] = summarizer.unavailable
        return outcomes, status
    status["requested"] = len(found)
    misses: list[int] = []
    for i, conv in enumerate(found):
        cached = cache_get(store, _job(conv, query, ""))
        if cached is not None:
            outcomes[i] = SummaryOutcome(cached, "cache")
        else:
            misses.append(i)
    if not misses:
        return outcomes, status  # a repeated recall: no transcript loaded, no connection
    jobs = []
    for i in misses:
        text = format_transcript(_all_rows(store, found[i]), needles).text
        window = truncate_around_matches(text, needles, MAX_SUMMARY_INPUT_CHARS)
        jobs.append(_job(found[i], query, window.text))
    cfg = config if config is not None else Config.load()
    client, owned = summarizer.client()
    made = summarize_all(
        store,
        client,
        jobs,
        max_concurrency=min(MAX_CONCURRENCY, int(cfg.get("search.max_concurrency"))),
        timeout=float(cfg.get("search.summary_timeout")),
        close_client=owned,
    )
    for i, outcome in zip(misses, made, strict=True):
        outcomes[i] = outcome
    return outcomes, status


def _attach(
    store: SessionStoreContract,
    conv: _Conversation,
    result: dict[str, Any],
    outcome: SummaryOutcome | None,
    needles: Needles,
    status: dict[str, Any],
) -> None:
    """Put the summary, or a verbatim excerpt around the best hit, on ``result``."""
    if outcome is not None and outcome.summary is not None:
        result["summary"] = outcome.summary
        result["summary_origin"] = outcome.origin
        status["made" if outcome.origin == "model" else "cached"] += 1
        returned = len(outcome.summary)
    else:
        if outcome is not None:
            status["failed"] += 1
            result["summary_error"] = f"{outcome.error}; showing the original text instead."
        transcript = format_transcript(_rows_near(store, conv), needles)
        window = truncate_around_matches(transcript.text, needles, VERBATIM_CHARS)
        result["excerpt"] = window.text
        result["excerpt_strategy"] = window.strategy
        covered = transcript.message_ids_between(window.start, window.end)
        if covered:
            result["excerpt_message_ids"] = [covered[0], covered[-1]]
        returned = len(window.text)
    result["chars"] = {"conversation": conv.chars, "returned": returned}
