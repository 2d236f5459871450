"""The steps of ``session_search`` on a :class:`~memstrata.store.postgres.PostgresSessionStore`.

:func:`memstrata.search.recall.session_search` checks the arguments and routes a PostgreSQL
store here for discover, read and scroll (the recent listing is shared); the answers
are the SQLite ones, built on the store's public methods: ``search_messages`` finds
the candidate messages, ``get_lineage_root`` groups them per conversation (ranked by
:func:`memstrata.store.sqlite.fulltext.aggregate_sessions`, the SQLite ranking), the
compression chain and the live context come from ``get_compression_tip``, ``get_lineage_ids`` and
``get_session``, and transcripts from ``get_messages``. Cutting and summarising reuse
:mod:`memstrata.search.truncate` and :mod:`memstrata.search.summarize`; the summary cache
lives in the store's ``summary_cache`` table, scoped to its namespace (``connection()``).

Live rows of the current conversation are hidden, its compacted (archived) rows and its
compression ancestors stay findable, rewound rows never show: the SQLite rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memstrata.config import Config
from memstrata.errors import SessionNotFoundError, SessionStoreError, StorageError
from memstrata.llm.types import LLMClient
from memstrata.query.compile import compile_query
from memstrata.search import recall as search
from memstrata.search.read import (
    MAX_WINDOW,
    READ_HEAD,
    READ_TAIL,
    clamp_window,
    message_view,
    when,
)
from memstrata.search.summarize import (
    MAX_CONCURRENCY,
    MAX_SUMMARY_INPUT_CHARS,
    SummaryJob,
    SummaryOutcome,
    normalize_query,
    summarize_all,
)
from memstrata.search.truncate import (
    Needles,
    format_transcript,
    needles_for,
    truncate_around_matches,
)
from memstrata.store.codec import encode_content
from memstrata.store.sqlite.fulltext import Candidate, aggregate_sessions

if TYPE_CHECKING:
    from memstrata.store.postgres.store import PostgresSessionStore

__all__ = ["discover", "read_session", "scroll_session"]

# Messages fetched from the index before grouping per conversation: as wide as SQLite's
# candidate pool, so that hiding the current conversation's live rows afterwards still
# leaves enough conversations to rank.
CANDIDATES = 300
# Cap of compression hops walked, as memstrata.store.sqlite.lineage.MAX_HOPS.
MAX_HOPS = 100


# ---------------------------------------------------------------------------- lineage


def compression_chain_of(store: PostgresSessionStore, session_id: str) -> list[str]:
    """The whole compression chain holding ``session_id``, oldest first, tip last.

    Walks up from the tip: a parent belongs to the chain when its own tip is the same
    session (it was compressed into the child), which is how the store defines it.
    """
    tip = store.get_compression_tip(session_id)
    chain = [tip]
    seen = {tip}
    for _ in range(MAX_HOPS):
        row = store.get_session(chain[-1])
        parent = row.get("parent_session_id") if row else None
        if not parent or parent in seen or store.get_session(parent) is None:
            break
        if store.get_compression_tip(parent) != tip:
            break
        chain.append(parent)
        seen.add(parent)
    return chain[::-1]


def live_session_ids(store: PostgresSessionStore, current_session_id: str | None) -> list[str]:
    """The current session and its descendants through compression and delegate links.

    Their live rows are the model's present context; ancestors are not included, as
    what compression removed lives there.
    """
    if not current_session_id:
        return []
    try:
        family = store.get_lineage_ids(current_session_id)
    except SessionNotFoundError:
        return [current_session_id]
    parents: dict[str, str | None] = {}
    for sid in family:
        row = store.get_session(sid)
        parents[sid] = row.get("parent_session_id") if row else None
    out = [current_session_id]
    for sid in family:
        node: str | None = sid
        for _ in range(MAX_HOPS):
            node = parents.get(node) if node is not None else None
            if node is None:
                break
            if node == current_session_id:
                out.append(sid)
                break
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------- rows


def _stored(message: dict[str, Any]) -> dict[str, Any]:
    # get_messages decodes structured content; the renderers of search_read and truncate
    # take content as stored (text, or sentinel JSON), so encode it back.
    row = dict(message)
    row["content"] = encode_content(message.get("content"))
    return row


def visible_rows(
    store: PostgresSessionStore, session_ids: Sequence[str], live: Sequence[str]
) -> list[dict[str, Any]]:
    """Rows recall may show from ``session_ids``, by id: live or compacted, and not a
    live row of the current conversation."""
    hidden = set(live)
    rows: list[dict[str, Any]] = []
    for sid in session_ids:
        for message in store.get_messages(sid, include_inactive=True):
            active = bool(message.get("active", 1))
            if not active and not message.get("compacted"):
                continue  # rewound (undone on purpose)
            if active and sid in hidden:
                continue  # already in the model's context
            rows.append(_stored(message))
    rows.sort(key=lambda r: int(r["id"]))
    return rows


def _in_context_error(session_id: str) -> SessionStoreError:
    return SessionStoreError(
        f"Session {session_id} is the current conversation and its messages are already "
        "in your context; search with a query to find what compression removed from it."
    )


def _session_meta(store: PostgresSessionStore, session_id: str) -> dict[str, Any]:
    row = store.get_session(session_id)
    if row is None:
        raise SessionNotFoundError(
            f"session_id {session_id!r} was not found: use an id from a session_search result."
        )
    meta = {
        "title": row.get("title"),
        "source": row.get("source"),
        "model": row.get("model"),
        "started": when(row.get("started_at")),
    }
    if row.get("end_reason"):
        meta["end_reason"] = row["end_reason"]
    if row.get("parent_session_id"):
        meta["parent_session_id"] = row["parent_session_id"]
    return meta


# ------------------------------------------------------------------------ read, scroll


def read_session(
    store: PostgresSessionStore,
    session_id: str,
    *,
    current_session_id: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One session's visible messages; a long one gives its first 20 and last 10."""
    resolved = store.resolve_session_id(session_id)
    meta = _session_meta(store, resolved)
    live = live_session_ids(store, current_session_id)
    rows = visible_rows(store, [resolved], live)
    total = len(rows)
    if total == 0 and resolved in live:
        raise _in_context_error(resolved)
    truncated = total > READ_HEAD + READ_TAIL
    head = rows[:READ_HEAD] if truncated else rows
    tail = rows[-READ_TAIL:] if truncated else []
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
        result["omitted_messages"] = total - len(head) - len(tail)
        result["hint"] = (
            f"Messages between id {int(head[-1]['id'])} and id {int(tail[0]['id'])} were left "
            f"out. Scroll with session_id={resolved!r}, around_message_id=<an id in that "
            f"range>, window up to {MAX_WINDOW}."
        )
    if note:
        result["note"] = note
    return result


def scroll_session(
    store: PostgresSessionStore,
    session_id: str,
    around_message_id: int,
    *,
    window: int | None = None,
    current_session_id: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """Up to ``window`` visible messages on each side of ``around_message_id``."""
    if isinstance(around_message_id, bool) or not isinstance(around_message_id, int):
        raise SessionStoreError(
            f"around_message_id must be an integer message id, got {around_message_id!r}."
        )
    size = clamp_window(window)
    resolved = store.resolve_session_id(session_id)
    try:
        anchor = store.get_messages_around(around_message_id, window=0)["anchor"]
    except SessionStoreError:
        raise SessionStoreError(
            f"around_message_id {around_message_id} does not exist: use an id from a "
            "session_search result."
        ) from None
    owner = str(anchor["session_id"])
    warning = None
    if owner != resolved:
        if owner not in compression_chain_of(store, resolved):
            raise SessionStoreError(
                f"around_message_id {around_message_id} is not in session {resolved}; "
                "pass the session_id of the result the id came from."
            )
        warning = (
            f"Message {around_message_id} belongs to session {owner} of the same "
            "conversation; showing it there."
        )
        resolved = owner
    live = live_session_ids(store, current_session_id)
    if anchor.get("active") and owner in live:
        raise _in_context_error(owner)
    if not anchor.get("active") and not anchor.get("compacted"):
        raise SessionStoreError(
            f"Message {around_message_id} was rewound (undone) and is not shown; "
            "scroll around another id."
        )
    meta = _session_meta(store, resolved)
    rows = visible_rows(store, [resolved], live)
    earlier = [r for r in rows if int(r["id"]) < around_message_id]
    later = [r for r in rows if int(r["id"]) > around_message_id]
    before, after = earlier[-size:] if size else [], later[:size]
    messages = [message_view(r) for r in before]
    messages.append(message_view(_stored(anchor), anchor=True))
    messages += [message_view(r) for r in after]
    result: dict[str, Any] = {
        "success": True,
        "mode": "scroll",
        "session_id": resolved,
        "around_message_id": around_message_id,
        "session_meta": meta,
        "window": size,
        "messages": messages,
        "messages_before": len(earlier) - len(before),
        "messages_after": len(later) - len(after),
    }
    if warning:
        result["warning"] = warning
    if note:
        result["note"] = note
    return result


# --------------------------------------------------------------------------- discover


def _chain_meta(store: PostgresSessionStore, chain: Sequence[str]) -> dict[str, Any]:
    known = [row for row in (store.get_session(s) for s in chain) if row is not None]
    title = next((r["title"] for r in reversed(known) if r.get("title")), None)
    actives = [r["last_active"] for r in known if r.get("last_active") is not None]
    return {
        "title": title,
        "source": known[0]["source"] if known else None,
        "started_at": known[0]["started_at"] if known else None,
        "last_active": max(actives) if actives else None,
    }


def _chars(rows: Sequence[dict[str, Any]]) -> int:
    # The conversation's size as SQLite reports it: stored content plus tool-call JSON.
    total = 0
    for row in rows:
        total += len(row.get("content") or "")
        calls = row.get("tool_calls")
        if calls:
            total += len(calls if isinstance(calls, str) else json.dumps(calls))
    return total


def _find(
    store: PostgresSessionStore,
    query: str,
    *,
    limit: int,
    live: Sequence[str],
    role_filter: str | Iterable[str] | None,
    sources: tuple[str, ...],
    since: float | None,
    until: float | None,
) -> tuple[list[tuple[search._Conversation, list[dict[str, Any]]]], int]:
    hits = store.search_messages(
        query,
        role_filter=role_filter if isinstance(role_filter, str | None) else list(role_filter),
        source_filter=list(sources) or None,
        exclude_sources=None if sources else list(search.HIDDEN_SOURCES),
        since=since,
        until=until,
        limit=CANDIDATES,
    )
    # Live rows of the current conversation are in the model's context already; the
    # index cannot tell them from its archived rows, so they are dropped here.
    in_context = {
        int(m["id"]) for sid in live for m in store.get_messages(sid, include_inactive=False)
    }
    hits = [h for h in hits if int(h["id"]) not in in_context]
    by_id = {int(h["id"]): h for h in hits}
    cands = [
        Candidate(int(h["id"]), str(h["session_id"]), float(h.get("timestamp") or 0.0), {})
        for h in hits
    ]
    for cand, hit in zip(cands, hits, strict=True):
        cand.score = float(hit.get("score") or 0.0)
    roots = {sid: store.get_lineage_root(sid) for sid in {c.session_id for c in cands}}
    ranked = aggregate_sessions(cands, roots)[:limit]
    out: list[tuple[search._Conversation, list[dict[str, Any]]]] = []
    for root, group in ranked:
        best = by_id[group[0].id]
        chain = compression_chain_of(store, str(best["session_id"]))
        rows = visible_rows(store, chain, live)
        conv = search._Conversation(
            root=root,
            best=best,
            message_ids=[c.id for c in group[:5]],
            chain=chain,
            meta=_chain_meta(store, chain),
            live=tuple(live),
            message_count=len(rows),
            last_message_id=int(rows[-1]["id"]) if rows else 0,
            chars=_chars(rows),
        )
        out.append((conv, rows))
    searched = len({roots.get(c.session_id, c.session_id) for c in cands})
    return out, searched


def discover(
    store: PostgresSessionStore,
    query: str,
    *,
    limit: int = search.DEFAULT_LIMIT,
    current_session_id: str | None = None,
    role_filter: str | Iterable[str] | None = None,
    source: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    summarize: bool | None = None,
    llm: LLMClient | None = None,
    config: Config | None = None,
) -> dict[str, Any]:
    """Search, group by lineage, cut around matches, summarise (SQLite's discover)."""
    compiled = compile_query(query)
    envelope: dict[str, Any] = {"success": True, "mode": "discover", "query": query}
    if compiled.is_empty:
        return {
            **envelope,
            "results": [],
            "count": 0,
            "message": "The query has nothing searchable in it: give words, names or paths.",
            "note": search.NOTE,
        }
    live = live_session_ids(store, current_session_id)
    found, searched = _find(
        store,
        query,
        limit=limit,
        live=live,
        role_filter=role_filter,
        sources=search._sources(source),
        since=since,
        until=until,
    )
    needles = needles_for(compiled)
    results = [search._result(conv) for conv, _ in found]
    outcomes, status = _summaries(store, found, query, needles, summarize, llm, config)
    for (conv, rows), result, outcome in zip(found, results, outcomes, strict=True):
        _attach(conv, rows, result, outcome, needles, status)
    message = (
        f"Found {len(results)} matching conversation(s) among {searched} with hits."
        if results
        else "No matching conversations found."
    )
    return {
        **envelope,
        "results": results,
        "count": len(results),
        "sessions_searched": searched,
        "summaries": status,
        "message": message,
        "note": search.NOTE,
        "hint": search.DRILL_HINT,
    }


def _attach(
    conv: search._Conversation,
    rows: list[dict[str, Any]],
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
        # The same window as SQLite: 12 messages before the best hit, 30 after it.
        anchor = int(conv.best["id"])
        at = next((i for i, r in enumerate(rows) if int(r["id"]) >= anchor), len(rows))
        near = rows[max(0, at - 12) : at + 31]
        transcript = format_transcript(near, needles)
        window = truncate_around_matches(transcript.text, needles, search.VERBATIM_CHARS)
        result["excerpt"] = window.text
        result["excerpt_strategy"] = window.strategy
        covered = transcript.message_ids_between(window.start, window.end)
        if covered:
            result["excerpt_message_ids"] = [covered[0], covered[-1]]
        returned = len(window.text)
    result["chars"] = {"conversation": conv.chars, "returned": returned}


# -------------------------------------------------------------------------- summaries


def cache_get(store: PostgresSessionStore, job: SummaryJob) -> str | None:
    """The cached summary for ``job`` in the store's namespace, or None."""
    with store.connection() as conn:
        row = conn.execute(
            "SELECT summary FROM summary_cache WHERE namespace = %s AND tip_session_id = %s "
            "AND message_count = %s AND last_message_id = %s AND query = %s",
            (
                store.namespace,
                job.tip_session_id,
                job.message_count,
                job.last_message_id,
                normalize_query(job.query),
            ),
        ).fetchone()
    if row is None:
        return None
    return str(row["summary"] if isinstance(row, dict) else row[0])


def cache_put(store: PostgresSessionStore, job: SummaryJob, summary: str, model: str) -> None:
    """Store a summary; older entries of the same conversation and query are dropped."""
    query = normalize_query(job.query)
    with store.connection() as conn:
        conn.execute(
            "DELETE FROM summary_cache WHERE namespace = %s AND tip_session_id = %s AND query = %s",
            (store.namespace, job.tip_session_id, query),
        )
        conn.execute(
            "INSERT INTO summary_cache (namespace, tip_session_id, root_session_id, "
            "message_count, last_message_id, query, model, summary, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (namespace, tip_session_id, message_count, last_message_id, query) "
            "DO UPDATE SET summary = excluded.summary, model = excluded.model, "
            "created_at = excluded.created_at",
            (
                store.namespace,
                job.tip_session_id,
                job.root_session_id,
                job.message_count,
                job.last_message_id,
                query,
                model,
                summary,
                time.time(),
            ),
        )


@dataclass(frozen=True)
class PostgresSummaryCache:
    """The ``summary_cache`` rows of a PostgreSQL store's namespace, for
    :func:`memstrata.search.summarize.summarize_all`."""

    store: PostgresSessionStore

    def get(self, job: SummaryJob) -> str | None:
        """The cached summary for ``job``, or None."""
        return cache_get(self.store, job)

    def put(self, job: SummaryJob, summary: str, model: str) -> bool:
        """Keep a summary; False when the database refused the write.

        Best effort, as for SQLite: the summary was made and is returned either way.
        """
        try:
            cache_put(self.store, job, summary, model)
        except StorageError:
            return False
        return True


def _summaries(
    store: PostgresSessionStore,
    found: list[tuple[search._Conversation, list[dict[str, Any]]]],
    query: str,
    needles: Needles,
    summarize: bool | None,
    llm: LLMClient | None,
    config: Config | None,
) -> tuple[list[SummaryOutcome | None], dict[str, Any]]:
    """Summaries for ``found`` (PostgreSQL cache first; the model for the rest)."""
    outcomes: list[SummaryOutcome | None] = [None] * len(found)
    status: dict[str, Any] = {"requested": 0, "made": 0, "cached": 0, "failed": 0}
    if not found or summarize is False:
        return outcomes, status
    summarizer = search._Summarizer(llm, config)
    if summarizer.unavailable is not None:
        status["unavailable"] = summarizer.unavailable
        return outcomes, status
    status["requested"] = len(found)
    misses: list[int] = []
    for i, (conv, _) in enumerate(found):
        cached = cache_get(store, search._job(conv, query, ""))
        if cached is not None:
            outcomes[i] = SummaryOutcome(cached, "cache")
        else:
            misses.append(i)
    if not misses:
        return outcomes, status
    jobs = []
    for i in misses:
        conv, rows = found[i]
        text = format_transcript(rows, needles).text
        window = truncate_around_matches(text, needles, MAX_SUMMARY_INPUT_CHARS)
        jobs.append(search._job(conv, query, window.text))
    cfg = config if config is not None else Config.load()
    client, owned = summarizer.client()
    made = summarize_all(
        None,
        client,
        jobs,
        max_concurrency=min(MAX_CONCURRENCY, int(cfg.get("search.max_concurrency"))),
        timeout=float(cfg.get("search.summary_timeout")),
        close_client=owned,
        cache=PostgresSummaryCache(store),
    )
    for i, outcome in zip(misses, made, strict=True):
        outcomes[i] = outcome
    return outcomes, status
