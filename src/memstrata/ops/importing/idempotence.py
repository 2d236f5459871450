"""Write session records through the store's public API so that importing twice adds nothing.

Session ids are derived from the source's own ids, so a record of an earlier import
finds its session again: when the session holds every message of the record it is
skipped; when it holds fewer (the source conversation went on since), the missing tail
is appended ("topped up"). Only public ``SessionStore`` methods are used, so the same
code imports into the PostgreSQL store.

A record whose parent session is not in the store yet is held back until the parent has
been written (sources do not always list parents first); a parent that never comes is
reported and the child imported as a root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from memstrata.errors import MemstrataError, TitleConflictError
from memstrata.ops.importing.records import BadRecord, SessionRecord
from memstrata.ops.importing.report import ImportReport

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

Progress = Callable[[int, int], None]
_COUNTER_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def write_records(
    store: SessionStoreContract,
    records: Iterable[SessionRecord | BadRecord],
    report: ImportReport,
    *,
    total: int = 0,
    progress: Progress | None = None,
) -> None:
    """Write every record (bad ones are only reported), calling ``progress(done, total)``."""
    waiting: dict[str, list[SessionRecord]] = {}
    for done, item in enumerate(records, 1):
        if isinstance(item, BadRecord):
            report.bad.append(item)
        elif item.parent_id is not None and store.get_session(item.parent_id) is None:
            waiting.setdefault(item.parent_id, []).append(item)
        else:
            _write_with_children(store, item, waiting, report)
        if progress is not None:
            progress(done, max(total, done))
    _write_orphans(store, waiting, report)


def _write_orphans(
    store: SessionStoreContract, waiting: dict[str, list[SessionRecord]], report: ImportReport
) -> None:
    """Write the records whose parent never came, as roots, and say so.

    Only records whose parent is not itself waiting are cut loose; their waiting
    descendants then follow them with their links intact. What remains after that is a
    parent loop, broken at its first record.
    """
    while waiting:
        held = {record.id for records in waiting.values() for record in records}
        missing = [p for p in waiting if p not in held] or [next(iter(waiting))]
        for parent_id in missing:
            for record in waiting.pop(parent_id, []):
                report.notes.append(
                    f"{record.location}: parent session {parent_id!r} is not in the source "
                    "or the store; imported as a conversation of its own."
                )
                record.parent_id = None
                record.lineage_kind = None
                _write_with_children(store, record, waiting, report)


def _write_with_children(
    store: SessionStoreContract,
    record: SessionRecord,
    waiting: dict[str, list[SessionRecord]],
    report: ImportReport,
) -> None:
    # A loop, not recursion: a deep chain of continuations must not exhaust the stack.
    pending = [record]
    while pending:
        current = pending.pop()
        if write_session(store, current, report):
            pending.extend(reversed(waiting.pop(current.id, [])))


def write_session(store: SessionStoreContract, record: SessionRecord, report: ImportReport) -> bool:
    """Import one session (create, top up or skip); False when the store refused it."""
    report.bad.extend(record.problems)
    report.bad_messages += len(record.problems)
    try:
        existing = store.get_session(record.id)
        if existing is None:
            _create(store, record, report)
        else:
            _top_up(store, record, existing.get("title"), report)
    except MemstrataError as exc:
        report.bad.append(BadRecord(record.location, f"refused by the store: {exc}"))
        return False
    return True


def _create(store: SessionStoreContract, record: SessionRecord, report: ImportReport) -> None:
    store.create_session(
        record.id,
        source=record.source,
        user_id=record.user_id,
        model=record.model,
        model_config=record.model_config,
        system_prompt=record.system_prompt,
        parent_session_id=record.parent_id,
        lineage_kind=record.lineage_kind,
        started_at=record.started_at,
    )
    _append(store, record, 0, report)
    _set_title(store, record, report)
    counters = {k: record.counters.get(k, 0) for k in _COUNTER_KEYS}
    api_calls = record.counters.get("api_call_count", 0)
    if any(counters.values()) or api_calls or record.estimated_cost_usd is not None:
        store.update_token_counts(
            record.id,
            **counters,
            estimated_cost_usd=record.estimated_cost_usd,
            api_calls=api_calls,
        )
    if record.ended_at is not None or record.end_reason is not None:
        store.end_session(record.id, record.end_reason or "imported", ended_at=record.ended_at)
    if record.archived:
        store.set_session_archived(record.id, True)
    report.sessions_added += 1


def _top_up(
    store: SessionStoreContract, record: SessionRecord, title: str | None, report: ImportReport
) -> None:
    have = len(store.get_messages(record.id, include_inactive=True))
    added = _append(store, record, have, report)
    report.messages_skipped += min(have, len(record.messages))
    if title is None and record.title:
        _set_title(store, record, report)
    if added:
        report.sessions_topped_up += 1
        if record.ended_at is not None:
            store.end_session(record.id, record.end_reason or "imported", ended_at=record.ended_at)
    else:
        report.sessions_skipped += 1


def _append(
    store: SessionStoreContract, record: SessionRecord, start: int, report: ImportReport
) -> int:
    """Append ``record.messages[start:]`` in one transaction and restore archived flags."""
    tail = record.messages[start:]
    if not tail:
        return 0
    ids = store.append_messages(record.id, tail)
    for compacted in (True, False):
        chosen = [
            ids[i - start]
            for i, flag in record.inactive.items()
            if flag is compacted and i >= start
        ]
        if chosen:
            store.archive_messages(record.id, chosen, compacted=compacted)
    report.messages_added += len(ids)
    return len(ids)


def _set_title(store: SessionStoreContract, record: SessionRecord, report: ImportReport) -> None:
    if not record.title:
        return
    try:
        store.set_session_title(record.id, record.title)
    except TitleConflictError:
        # Titles are unique; another session holds this one, so number it as the
        # titles module numbers continuations ("X" -> "X #2").
        numbered = store.get_next_title_in_lineage(record.title)
        store.set_session_title(record.id, numbered)
        report.notes.append(
            f"{record.location}: title {record.title!r} is taken; imported as {numbered!r}."
        )
