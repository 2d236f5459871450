"""Session lineage: why a child session exists, compression tips, lineage-aware listing.

A child records why it exists in ``sessions.lineage_kind`` when it is created:

* ``compression`` — the parent was compressed and this session continues it;
* ``branch`` — a fork the user asked for; listed as a conversation of its own;
* ``delegate`` — a sub-agent's session; hidden from listings, deleted with its parent;
* ``reset`` — a fresh start (``/new``) that remembers where it came from; listed.

Rows without the record (imported from Hermes, whose rule raced, see the reference's
lineage notes) fall back to markers in ``model_config`` and then to the timestamp rule:
a child that started at or after a compression-ended parent ended is a continuation, a
child that started while its parent ran is a delegate, anything else is a branch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memstrata.store.codec import content_text

# Kinds that belong to their parent's conversation instead of being listed on their own.
HIDDEN_KINDS = ("compression", "delegate")
MAX_HOPS = 100
_PREVIEW_CHARS = 60

# The kind of child ``s`` of parent ``p`` (NULL for a root or an orphan), one SQL
# expression so that every query classifies a row the same way.
KIND_SQL = """(CASE
    WHEN s.parent_session_id IS NULL OR p.id IS NULL THEN NULL
    WHEN s.lineage_kind IS NOT NULL THEN s.lineage_kind
    WHEN json_valid(s.model_config)
         AND json_type(s.model_config, '$._delegate_from') IS NOT NULL THEN 'delegate'
    WHEN json_valid(s.model_config)
         AND json_type(s.model_config, '$._branched_from') IS NOT NULL THEN 'branch'
    WHEN s.source = 'subagent' THEN 'delegate'
    WHEN p.ended_at IS NOT NULL AND s.started_at >= p.ended_at
         AND p.end_reason = 'compression' THEN 'compression'
    WHEN p.ended_at IS NULL OR s.started_at < p.ended_at THEN 'delegate'
    ELSE 'branch'
END)"""
_FROM = "FROM sessions s LEFT JOIN sessions p ON p.id = s.parent_session_id"
_EDGE_COLUMNS = (
    "s.id, s.parent_session_id, s.end_reason, s.ended_at, s.started_at, s.last_active, "
    "s.message_count"
)


def _tip_rank(row: sqlite3.Row) -> tuple[bool, bool, float, float, str]:
    # Among several continuations (a race in older data), prefer one that was itself
    # compressed (the chain goes on there), then a live one, then the most active.
    return (
        row["end_reason"] == "compression",
        row["ended_at"] is None,
        float(row["last_active"] or row["started_at"] or 0.0),
        float(row["started_at"] or 0.0),
        str(row["id"]),
    )


def _pick(children: Sequence[sqlite3.Row]) -> sqlite3.Row | None:
    return max(children, key=_tip_rank) if children else None


def child_kind(conn: sqlite3.Connection, session_id: str) -> tuple[str | None, str | None]:
    """Return ``(parent_session_id, kind)`` of a session; ``(None, None)`` for a root."""
    row = conn.execute(
        f"SELECT s.parent_session_id AS parent, {KIND_SQL} AS kind {_FROM} WHERE s.id = ?",
        (session_id,),
    ).fetchone()
    if row is None or row["kind"] is None:
        return None, None
    return row["parent"], row["kind"]


def _continuations(conn: sqlite3.Connection, session_id: str) -> list[sqlite3.Row]:
    return conn.execute(
        f"SELECT {_EDGE_COLUMNS} {_FROM} WHERE s.parent_session_id = ? "
        f"AND {KIND_SQL} = 'compression'",
        (session_id,),
    ).fetchall()


def compression_chain(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """``session_id`` followed by its compression continuations up to the tip.

    At most :data:`MAX_HOPS` hops; a cycle (only possible in damaged or hand-edited
    data) ends the walk at the last session not seen before.
    """
    chain = [session_id]
    seen = {session_id}
    for _ in range(MAX_HOPS):
        nxt = _pick(_continuations(conn, chain[-1]))
        if nxt is None or nxt["id"] in seen:
            break
        chain.append(nxt["id"])
        seen.add(nxt["id"])
    return chain


def lineage_root(conn: sqlite3.Connection, session_id: str) -> str:
    """The session whose listing entry stands for ``session_id``.

    Walks up through compression continuations and delegate links (at most
    :data:`MAX_HOPS`, cycle-guarded); stops at a root, a branch or a reset.
    """
    current = session_id
    seen = {current}
    for _ in range(MAX_HOPS):
        parent, kind = child_kind(conn, current)
        if parent is None or kind not in HIDDEN_KINDS or parent in seen:
            break
        current = parent
        seen.add(current)
    return current


def compression_ancestors(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Sessions that ``session_id`` continues through compression, nearest first."""
    out: list[str] = []
    current = session_id
    seen = {current}
    for _ in range(MAX_HOPS):
        parent, kind = child_kind(conn, current)
        if parent is None or kind != "compression" or parent in seen:
            break
        out.append(parent)
        seen.add(parent)
        current = parent
    return out


def lineage_ids(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """Every session of the conversation ``session_id`` belongs to, root first.

    The root (see :func:`lineage_root`) and everything reachable from it through
    compression continuations and delegates; search uses it to exclude the live
    conversation from its own results.
    """
    root = lineage_root(conn, session_id)
    # The bound counts the root, as the conversation's size limit does.
    return [root, *_descendants(conn, [root], HIDDEN_KINDS, bound=MAX_HOPS * 10 - 1)]


def delegate_descendants(conn: sqlite3.Connection, session_ids: Iterable[str]) -> list[str]:
    """Sessions reachable from ``session_ids`` through delegate links (not the seeds)."""
    return _descendants(conn, list(set(session_ids)), ("delegate",))


def _descendants(
    conn: sqlite3.Connection,
    seeds: Sequence[str],
    kinds: Sequence[str],
    *,
    bound: int | None = None,
) -> list[str]:
    """Sessions reachable from ``seeds`` through children of the given ``kinds``.

    Breadth first, each level oldest first; the seeds are not included. The walk stops
    once ``bound`` sessions are found (it may end a level past it), which keeps a
    corrupted parent loop from running away.
    """
    # The kinds are constants of this module, never user input, so they are inlined.
    kind_list = ", ".join(f"'{kind}'" for kind in kinds)
    seen = set(seeds)
    frontier = list(seeds)
    out: list[str] = []
    while frontier and (bound is None or len(out) < bound):
        rows = conn.execute(
            f"SELECT s.id FROM sessions s JOIN sessions p ON p.id = s.parent_session_id "
            f"WHERE s.parent_session_id IN ({','.join('?' * len(frontier))}) "
            f"AND {KIND_SQL} IN ({kind_list}) ORDER BY s.started_at, s.id",
            frontier,
        ).fetchall()
        frontier = [r["id"] for r in rows if r["id"] not in seen]
        seen.update(frontier)
        out.extend(frontier)
    return out


def preview_text(content: Any) -> str:
    """First user text collapsed to one line, cut at 60 characters plus ``...``."""
    text = " ".join(content_text(content).split())
    return text[:_PREVIEW_CHARS] + "..." if len(text) > _PREVIEW_CHARS else text


# A session's activity as the listing orders by it (a zero last_active counts as unset).
_ACTIVITY_SQL = "COALESCE(NULLIF(s.last_active, 0), s.started_at)"


def _listed_filter(
    source: str | None, exclude_sources: Sequence[str] | None, include_archived: bool
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if not include_archived:
        where.append("s.archived = 0")
    if source is not None:
        where.append("s.source = ?")
        params.append(source)
    if exclude_sources:
        where.append(f"s.source NOT IN ({','.join('?' * len(exclude_sources))})")
        params.extend(exclude_sources)
    return where, params


def list_sessions_rich(
    conn: sqlite3.Connection,
    *,
    source: str | None = None,
    exclude_sources: Sequence[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    include_archived: bool = False,
    order_by_last_active: bool = True,
) -> list[dict[str, Any]]:
    """One row per logical conversation, each compression chain projected onto its tip.

    Ordered by start, the page is one indexed query. Ordered by activity (a
    conversation is as recent as the newest session of its chain), SQLite sorts the
    sessions by activity and the walk reads them newest first, stopping as soon as the
    page is full: a conversation takes its place at the first of its chain's sessions
    met. Only the page's conversations are walked (compression chains, previews), so the
    cost no longer grows with a full read of every session in Python.
    """
    want = max(0, offset) + max(0, limit)
    if want == 0:
        return []
    filters, params = _listed_filter(source, exclude_sources, include_archived)
    listed = f"COALESCE({KIND_SQL}, 'root') NOT IN ('compression', 'delegate')"
    if not order_by_last_active:
        rows = conn.execute(
            f"SELECT s.id {_FROM} WHERE {' AND '.join([listed, *filters])} "
            "ORDER BY s.started_at DESC, s.id DESC LIMIT ? OFFSET ?",
            [*params, max(0, limit), max(0, offset)],
        ).fetchall()
        return [session_entry(conn, compression_chain(conn, r["id"])) for r in rows]
    # Continuations pass unfiltered: the filters apply to the conversation's first session.
    passes = " AND ".join([listed, *filters])
    # Sessions without a parent (most of them) are roots: no join, no kind to work out.
    roots = " AND ".join(["s.parent_session_id IS NULL", *filters])
    cursor = conn.execute(
        f"SELECT s.id, NULL AS kind, {_ACTIVITY_SQL} AS activity FROM sessions s "
        f"WHERE {roots} UNION ALL "
        f"SELECT s.id, {KIND_SQL} AS kind, {_ACTIVITY_SQL} AS activity {_FROM} "
        f"WHERE s.parent_session_id IS NOT NULL AND ({KIND_SQL} = 'compression' OR ({passes})) "
        "ORDER BY activity DESC",
        [*params, *params],
    )
    walker = _ChainWalker(conn)
    ordered: list[str] = []
    placed: set[str] = set()
    verdicts: dict[str, bool] = {}  # conversation head -> listed under the filters?
    tied: list[str] = []  # conversations whose activity equals the current row's
    current: float | None = None
    for scanned, row in enumerate(cursor):
        if row["activity"] != current:
            # Conversations of equal activity are ordered by their first session's id.
            ordered += sorted(tied, reverse=True)
            tied, current = [], row["activity"]
            if len(ordered) >= want:
                break
        if scanned == _PRELOAD_AFTER:
            walker.preload()  # a deep page: one read of every continuation is cheaper
        if row["kind"] == "compression":
            head = walker.head(row["id"])
            if head not in verdicts:
                verdicts[head] = _is_listed(conn, head, passes, params)
        else:
            head = row["id"]
            verdicts[head] = True
        if not verdicts[head] or head in placed:
            continue
        # A continuation the chain does not go through (a race in older data) is not
        # part of any listed conversation.
        if row["kind"] == "compression" and row["id"] not in walker.chain(head):
            continue
        placed.add(head)
        tied.append(head)
    else:
        ordered += sorted(tied, reverse=True)
    cursor.close()
    return [session_entry(conn, walker.chain(head)) for head in ordered[max(0, offset) : want]]


# Rows scanned one query at a time before the walker reads every continuation at once.
_PRELOAD_AFTER = 400


class _ChainWalker:
    """Compression heads and chains, by one query per hop or, once preloaded, from memory.

    Both ways give what :func:`compression_ancestors` and :func:`compression_chain` give.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._chains: dict[str, list[str]] = {}
        self._parent: dict[str, str] | None = None
        self._children: dict[str, list[sqlite3.Row]] = {}

    def preload(self) -> None:
        self._parent = {}
        for row in self._conn.execute(
            f"SELECT {_EDGE_COLUMNS} {_FROM} WHERE {KIND_SQL} = 'compression'"
        ):
            self._parent[row["id"]] = row["parent_session_id"]
            self._children.setdefault(row["parent_session_id"], []).append(row)

    def head(self, session_id: str) -> str:
        if self._parent is None:
            ancestors = compression_ancestors(self._conn, session_id)
            return ancestors[-1] if ancestors else session_id
        current, seen = session_id, {session_id}
        for _ in range(MAX_HOPS):
            parent = self._parent.get(current)
            if parent is None or parent in seen:
                break
            current = parent
            seen.add(current)
        return current

    def chain(self, head: str) -> list[str]:
        if head in self._chains:
            return self._chains[head]
        if self._parent is None:
            chain = compression_chain(self._conn, head)
        else:
            chain, seen = [head], {head}
            for _ in range(MAX_HOPS):
                nxt = _pick(self._children.get(chain[-1], []))
                if nxt is None or nxt["id"] in seen:
                    break
                chain.append(nxt["id"])
                seen.add(nxt["id"])
        self._chains[head] = chain
        return chain


def _is_listed(conn: sqlite3.Connection, session_id: str, passes: str, params: list[Any]) -> bool:
    row = conn.execute(f"SELECT 1 {_FROM} WHERE s.id = ? AND {passes}", [session_id, *params])
    return row.fetchone() is not None


def session_entry(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Any]:
    """The listing row of the conversation whose compression chain is ``ids`` (root first)."""
    rows = {
        r["id"]: r
        for r in conn.execute(
            f"SELECT * FROM sessions WHERE id IN ({','.join('?' * len(ids))})", list(ids)
        ).fetchall()
    }
    preview = ""
    for sid in ids:
        hit = conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'user' "
            "ORDER BY id LIMIT 1",
            (sid,),
        ).fetchone()
        if hit is not None:
            preview = preview_text(hit["content"])
            break
    return chain_entry(rows, ids, preview)


def chain_entry(
    rows: Mapping[str, Mapping[str, Any]], ids: Sequence[str], preview: str
) -> dict[str, Any]:
    """The listing row of a compression chain (``ids`` root first, ``rows`` their session
    rows by id): projected onto the tip, titled by the newest title, counted over all.
    The PostgreSQL store builds its rows with it too."""
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
