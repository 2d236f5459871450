"""Lineage-aware listing: one row per conversation, each compression chain shown as its tip.

Ordered by start, the page is one indexed query. Ordered by activity (a conversation is
as recent as the newest session of its chain), the backend sorts the sessions by activity
and the walk reads them newest first, stopping as soon as the page is full: a
conversation takes its place at the first of its chain's sessions met. Only the page's
conversations are walked (compression chains, previews), so the cost does not grow
with the number of sessions stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memstrata.store.backend import ListingFilter, Transaction
from memstrata.store.codec import content_text
from memstrata.store.lineage import ChainWalker, compression_chain

_PREVIEW_CHARS = 60
# Rows scanned one query at a time before the walker reads every continuation at once.
PRELOAD_AFTER = 400


def list_conversations(
    tx: Transaction,
    where: ListingFilter,
    *,
    limit: int,
    offset: int,
    by_activity: bool,
    since: float | None = None,
    until: float | None = None,
) -> list[dict[str, Any]]:
    """The page of conversations ``offset`` to ``offset + limit``, newest first.

    ``since``/``until`` (by activity only) keep the conversations last active in that
    span, inclusive. The scan starts at the newest row and stops at the first row older
    than ``since``, so a span costs what its own rows cost.
    """
    want = max(0, offset) + max(0, limit)
    if want == 0:
        return []
    if not by_activity:
        ids = tx.listed_by_start(where, max(0, limit), max(0, offset))
        return [conversation_entry(tx, compression_chain(tx, sid)) for sid in ids]
    walker = ChainWalker(tx)
    ordered: list[str] = []
    placed: set[str] = set()
    verdicts: dict[str, bool] = {}  # conversation head -> listed under the filter?
    tied: list[str] = []  # conversations whose activity equals the current row's
    current: float | None = None
    rows = tx.listed_by_activity(where)
    try:
        for scanned, (sid, kind, activity) in enumerate(rows):
            if activity != current:
                # Conversations of equal activity are ordered by their first session's id.
                ordered += sorted(tied, reverse=True)
                tied, current = [], activity
                if len(ordered) >= want:
                    break
                if since is not None and activity < since:
                    break  # every later row is older still
            if scanned == PRELOAD_AFTER:
                walker.preload()  # a deep page: one read of every continuation is cheaper
            if kind == "compression":
                # Continuations pass unfiltered: the filter applies to the first session.
                head = walker.head(sid)
                if head not in verdicts:
                    verdicts[head] = tx.is_listed(head, where)
            else:
                head = sid
                verdicts[head] = True
            if not verdicts[head] or head in placed:
                continue
            if until is not None and activity > until:
                # The first row met of a conversation carries its newest activity.
                placed.add(head)
                continue
            # A continuation the chain does not go through (a race in older data) is not
            # part of any listed conversation.
            if kind == "compression" and sid not in walker.chain(head):
                continue
            placed.add(head)
            tied.append(head)
        else:
            ordered += sorted(tied, reverse=True)
    finally:
        rows.close()  # a server-side cursor ends with the scan
    return [conversation_entry(tx, walker.chain(head)) for head in ordered[max(0, offset) : want]]


def preview_text(content: Any) -> str:
    """First user text collapsed to one line, cut at 60 characters plus ``...``."""
    text = " ".join(content_text(content).split())
    return text[:_PREVIEW_CHARS] + "..." if len(text) > _PREVIEW_CHARS else text


def conversation_entry(tx: Transaction, ids: Sequence[str]) -> dict[str, Any]:
    """The listing row of the conversation whose compression chain is ``ids`` (root first)."""
    rows = tx.session_rows(ids)
    preview = ""
    for sid in ids:
        content = tx.first_user_content(sid)
        if content is not None:
            preview = preview_text(content)
            break
    return chain_entry(rows, ids, preview)


def chain_entry(
    rows: Mapping[str, Mapping[str, Any]], ids: Sequence[str], preview: str
) -> dict[str, Any]:
    """The listing row of a compression chain (``ids`` root first, ``rows`` their session
    rows by id): projected onto the tip, titled by the newest title, counted over all."""
    root, tip = rows[ids[0]], rows[ids[-1]]
    title = next((rows[i]["title"] for i in reversed(ids) if rows[i]["title"]), None)
    actives = [rows[i]["last_active"] for i in ids if rows[i]["last_active"] is not None]
    return {
        "id": tip["id"],
        "root_id": root["id"],
        "title": title,
        "source": root["source"],
        "model": tip["model"] or root["model"],
        "started_at": root["started_at"],
        "last_active": max(actives) if actives else None,
        "message_count": sum(int(rows[i]["message_count"]) for i in ids),
        "preview": preview,
        "ended_at": tip["ended_at"],
        "end_reason": tip["end_reason"],
        "session_ids": list(ids),
    }
