"""Forget: remove sessions or messages everywhere they are kept, and say what went.

A conversation lives in more places than its ``messages`` rows: three full-text indexes
(word, trigram, CJK bigram), embedding rows when semantic search is set up, and the
cache of query-focused summaries that quote it. :func:`forget` removes the selected
content from all of them, then merges the full-text indexes (a deleted row's terms stay
in the old index segments until a merge) with SQLite's ``secure_delete`` on, and
truncates the WAL, so the bytes leave ``state.db`` too.

Selection is planned first (:func:`plan_forget`), so a caller can show what would go and
ask before anything is deleted:

    with SessionStore() as store:
        plan = plan_forget(store, query='"my old address"')
        print(plan.describe())
        report = forget(store, plan)
        print(report.removed)

Only public store methods are used, so the same code runs on any store that has them
(the SQLite store also has ``secure_deletes``, ``optimize`` and ``index_counts``; a
store without them is still cleaned, with fewer figures in the report).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memstrata.errors import SessionStoreError
from memstrata.memory.history import ChangeLog
from memstrata.store.listing import preview_text

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

__all__ = ["ForgetPlan", "ForgetReport", "forget", "plan_forget", "resolve_session"]

# Hits fetched per search page while collecting a query's messages.
_PAGE = 500
# Report keys of the full-text indexes (table names are an implementation detail).
INDEX_NAMES = {
    "messages_fts": "word_index",
    "messages_fts_trigram": "trigram_index",
    "messages_fts_cjk": "cjk_index",
    "message_vectors": "vectors",
    "summary_cache": "summaries",
}


@dataclass(frozen=True)
class ForgetPlan:
    """What :func:`forget` would remove.

    ``session_ids``: whole sessions (with their sub-agent sessions); ``message_ids``:
    single messages outside those sessions; ``messages``: one preview row per message
    that would go (``id, session_id, role, timestamp, preview``), for display;
    ``conversation_ids``: every session whose conversation held forgotten content (their
    cached summaries are dropped).
    """

    session_ids: list[str] = field(default_factory=list)
    message_ids: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    conversation_ids: list[str] = field(default_factory=list)
    memory_changes: list[int] = field(default_factory=list)
    """Ids of curated-memory history changes holding the query's text (their undos go
    with them)."""

    @property
    def is_empty(self) -> bool:
        """True when nothing was selected."""
        return not self.session_ids and not self.message_ids and not self.memory_changes

    def describe(self) -> str:
        """One line: how many sessions, messages and memory history changes would go."""
        text = (
            f"{len(self.session_ids)} session(s) (with any sub-agent sessions of theirs) "
            f"and {len(self.messages)} message(s), {len(self.message_ids)} of them on "
            "their own"
        )
        if self.memory_changes:
            text += f", and {len(self.memory_changes)} memory history change(s)"
        return text

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "session_ids": self.session_ids,
            "message_ids": self.message_ids,
            "messages": self.messages,
            "conversation_ids": self.conversation_ids,
            "memory_changes": self.memory_changes,
        }


@dataclass(frozen=True)
class ForgetReport:
    """What :func:`forget` removed.

    ``sessions``: ids of the sessions deleted (sub-agent sessions included);
    ``messages``: message rows deleted; ``removed``: counts per kind (``sessions``,
    ``messages``, ``word_index``, ``trigram_index``, ``cjk_index``, ``vectors``,
    ``summaries``, and ``query_expansions`` when any were cached); index and vector
    counts are measured on the store and missing when the store cannot count them.
    ``scrubbed`` is True when the file was also cleaned of the deleted bytes (secure
    delete, index merge, WAL truncated).
    """

    sessions: list[str]
    messages: int
    removed: dict[str, int]
    scrubbed: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "sessions": self.sessions,
            "messages": self.messages,
            "removed": self.removed,
            "scrubbed": self.scrubbed,
        }


def resolve_session(store: SessionStoreContract, ref: str) -> str:
    """An exact id, a unique id prefix, or a title (its newest ``"#N"`` continuation).

    Kept for callers of 0.1; it is :meth:`SessionStoreContract.resolve_session`."""
    return store.resolve_session(ref)


def _query_hits(
    store: SessionStoreContract,
    query: str,
    since: float | None,
    until: float | None,
    max_messages: int | None,
) -> list[int]:
    ids: list[int] = []
    offset = 0
    while True:
        hits = store.search_messages(
            query,
            since=since,
            until=until,
            sort="oldest",  # a stable order, so pages neither skip nor repeat hits
            limit=_PAGE,
            offset=offset,
            include_inactive=True,  # rewound rows are still stored and indexed
            # A session_search result quotes what it found: it must go with the rest.
            include_tool_traffic=True,
        )
        ids += [int(h["id"]) for h in hits]
        if max_messages is not None and len(set(ids)) > max_messages:
            raise SessionStoreError(
                f"More than {max_messages} messages match {query!r}: nothing was deleted. "
                'Narrow the query (a "quoted phrase", AND between words, --since/--until) '
                "or raise the limit (--max)."
            )
        if len(hits) < _PAGE:
            return sorted(set(ids))
        offset += _PAGE


def _preview(message: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": message["id"],
        "session_id": message["session_id"],
        "role": message["role"],
        "timestamp": message["timestamp"],
        "preview": preview_text(message["content"]) or (message.get("tool_name") or ""),
    }


def plan_forget(
    store: SessionStoreContract,
    *,
    sessions: Iterable[str] = (),
    whole_conversations: bool = True,
    message_ids: Iterable[int] = (),
    query: str | None = None,
    since: float | None = None,
    until: float | None = None,
    max_messages: int | None = 1000,
    memory_history: ChangeLog | None = None,
) -> ForgetPlan:
    """Work out what to forget; nothing is deleted.

    ``sessions``: ids, id prefixes or titles. With ``whole_conversations`` (the
    default) each one brings its whole conversation: the compressed sessions before and
    after it and their sub-agent sessions, i.e. everything ``memstrata sessions show``
    displays for it; otherwise only that session and its sub-agent sessions.
    ``message_ids``: single messages. ``query``: the messages ``search_messages``
    finds for it (archived ones included), within ``since``/``until`` when given;
    more than ``max_messages`` hits raise :class:`~memstrata.errors.SessionStoreError`
    (None: no limit). ``since``/``until`` without a query: every message timestamped in
    that range. The selectors add up.

    With ``memory_history`` (``memory.history``), a ``query`` also selects every change
    of curated memory whose bytes before or after hold all of its terms (a quoted
    phrase is one term; case is ignored): a secret removed from ``MEMORY.md`` with
    ``memory remove`` still sits in those rows until they are forgotten too.
    """
    if query is not None and not query.strip():
        raise SessionStoreError("The query is blank: give the words to forget.")
    if since is not None and until is not None and since > until:
        raise SessionStoreError("since is after until: swap them.")
    session_ids: list[str] = []
    for ref in sessions:
        sid = store.resolve_session(ref)
        members = store.get_lineage_ids(sid) if whole_conversations else [sid]
        session_ids += [m for m in members if m not in session_ids]
    chosen: set[int] = set()
    for mid in message_ids:
        if isinstance(mid, bool) or not isinstance(mid, int):
            raise SessionStoreError(f"Message ids are integers, got {mid!r}.")
        chosen.add(mid)
    if query is not None:
        chosen.update(_query_hits(store, query, since, until, max_messages))
    elif since is not None or until is not None:
        chosen.update(store.list_message_ids(since=since, until=until))

    messages: list[dict[str, Any]] = []
    for sid in session_ids:
        messages += [_preview(m) for m in store.get_messages(sid, include_inactive=True)]
    whole = {m["id"] for m in messages}
    singles: list[int] = []
    touched: list[str] = list(session_ids)
    for mid in sorted(chosen - whole):
        try:
            around = store.get_messages_around(mid, 0)
        except SessionStoreError:
            continue  # an id that does not exist (or went meanwhile): nothing to forget
        singles.append(mid)
        messages.append(_preview({**around["anchor"], "session_id": around["session_id"]}))
        if around["session_id"] not in touched:
            touched.append(around["session_id"])
    conversations: list[str] = []
    for sid in touched:
        for member in store.get_lineage_ids(sid):
            if member not in conversations:
                conversations.append(member)
    changes = (
        history_changes(memory_history, query)
        if memory_history is not None and query is not None
        else []
    )
    return ForgetPlan(
        session_ids=session_ids,
        message_ids=singles,
        messages=messages,
        conversation_ids=conversations,
        memory_changes=changes,
    )


def history_terms(query: str) -> list[str]:
    """The terms a memory history change must all hold: quoted phrases, then words."""
    terms = [p.casefold() for p in re.findall(r'"([^"]+)"', query) if p.strip()]
    rest = re.sub(r'"[^"]*"', " ", query)
    terms += [w.casefold() for w in rest.split() if w.upper() not in ("AND", "OR", "NOT")]
    return terms


def history_changes(history: ChangeLog, query: str) -> list[int]:
    """Ids of the changes in ``history`` whose bytes before or after hold every term of
    ``query`` (case-insensitive)."""
    terms = history_terms(query)
    if not terms:
        return []
    found: list[int] = []
    for change in history.list(limit=2**31 - 1):
        text = b"\n".join(b for b in (change.before, change.after) if b is not None)
        folded = text.decode("utf-8", "replace").casefold()
        if all(term in folded for term in terms):
            found.append(change.id)
    return sorted(found)


def _counts(store: SessionStoreContract) -> dict[str, int]:
    return dict(store.index_counts())


def forget(
    store: SessionStoreContract,
    plan: ForgetPlan,
    *,
    scrub: bool = True,
    memory_history: ChangeLog | None = None,
) -> ForgetReport:
    """Remove what ``plan`` selected from the store, its indexes, vectors and summaries.

    With ``scrub`` (the default) deleted content is overwritten in the file and the
    full-text indexes are merged so no old segment keeps a forgotten term: the cost is
    one rewrite of the indexes, seconds on a large store. Sessions or messages that
    went meanwhile are skipped. ``plan.memory_changes`` are deleted from
    ``memory_history`` (with the undos of them), reported as ``memory_history``.
    """
    purged = (
        memory_history.purge(plan.memory_changes)
        if (memory_history is not None and plan.memory_changes)
        else []
    )
    if not plan.session_ids and not plan.message_ids:
        removed_only = {"sessions": 0, "messages": 0}
        if memory_history is not None and plan.memory_changes:
            removed_only["memory_history"] = len(purged)
        return ForgetReport(sessions=[], messages=0, removed=removed_only, scrubbed=False)
    before = _counts(store)
    guard = store.secure_deletes() if scrub else contextlib.nullcontext()
    deleted_sessions: list[str] = []
    message_rows = 0
    with guard:
        for sid in plan.session_ids:
            if sid in deleted_sessions or store.get_session(sid) is None:
                continue
            # delete_session also takes the session's sub-agent sessions, which are
            # all in its lineage: count every member's rows before they go.
            rows = {
                member: len(store.get_messages(member, include_inactive=True))
                for member in store.get_lineage_ids(sid)
            }
            gone = store.delete_session(sid)
            message_rows += sum(rows.get(g, 0) for g in gone)
            deleted_sessions += gone
        message_rows += store.delete_messages(plan.message_ids)
        remaining = [s for s in plan.conversation_ids if s not in deleted_sessions]
        cleared = store.clear_summary_cache(remaining) if remaining else 0
        # Past questions may quote what is being forgotten: drop the expansion cache.
        expansions = store.clear_query_expansions()
        if scrub:
            store.optimize()
    removed: dict[str, int] = {"sessions": len(deleted_sessions), "messages": message_rows}
    if memory_history is not None and plan.memory_changes:
        removed["memory_history"] = len(purged)
    if expansions:
        removed["query_expansions"] = expansions
    after = _counts(store)
    for table, name in INDEX_NAMES.items():
        if table in before:
            removed[name] = before[table] - after.get(table, 0)
    removed.setdefault("summaries", cleared)
    return ForgetReport(
        sessions=deleted_sessions,
        messages=message_rows,
        removed=removed,
        scrubbed=scrub,
    )
