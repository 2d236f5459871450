"""Session lineage on PostgreSQL: the rules of :mod:`memstrata.store.sqlite.lineage`, per tenant.

The classification of a child (compression continuation, branch, delegate, reset) is the
same SQL expression as on SQLite, with ``memstrata_json_has_key`` standing in for
SQLite's ``json_valid``/``json_type``; every query is scoped to one namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from memstrata.store.postgres.codec import sqlite_form
from memstrata.store.sqlite.lineage import HIDDEN_KINDS, MAX_HOPS, chain_entry, preview_text

Conn = psycopg.Connection[Any]
Row = dict[str, Any]

KIND_SQL = """(CASE
    WHEN s.parent_session_id IS NULL OR p.id IS NULL THEN NULL
    WHEN s.lineage_kind IS NOT NULL THEN s.lineage_kind
    WHEN memstrata_json_has_key(s.model_config, '_delegate_from') THEN 'delegate'
    WHEN memstrata_json_has_key(s.model_config, '_branched_from') THEN 'branch'
    WHEN s.source = 'subagent' THEN 'delegate'
    WHEN p.ended_at IS NOT NULL AND s.started_at >= p.ended_at
         AND p.end_reason = 'compression' THEN 'compression'
    WHEN p.ended_at IS NULL OR s.started_at < p.ended_at THEN 'delegate'
    ELSE 'branch'
END)"""
_FROM = (
    "FROM sessions s LEFT JOIN sessions p "
    "ON p.namespace = s.namespace AND p.id = s.parent_session_id"
)
_EDGE_COLUMNS = (
    "s.id, s.parent_session_id, s.end_reason, s.ended_at, s.started_at, s.last_active, "
    "s.message_count"
)


def _tip_rank(row: Row) -> tuple[bool, bool, float, float, str]:
    # As on SQLite: prefer a continuation that was itself compressed, then a live one,
    # then the most active.
    return (
        row["end_reason"] == "compression",
        row["ended_at"] is None,
        float(row["last_active"] or row["started_at"] or 0.0),
        float(row["started_at"] or 0.0),
        str(row["id"]),
    )


def _pick(children: Sequence[Row]) -> Row | None:
    return max(children, key=_tip_rank) if children else None


def child_kind(conn: Conn, ns: str, session_id: str) -> tuple[str | None, str | None]:
    """Return ``(parent_session_id, kind)`` of a session; ``(None, None)`` for a root."""
    row = conn.execute(
        f"SELECT s.parent_session_id AS parent, {KIND_SQL} AS kind {_FROM} "
        "WHERE s.namespace = %s AND s.id = %s",
        (ns, session_id),
    ).fetchone()
    if row is None or row["kind"] is None:
        return None, None
    return row["parent"], row["kind"]


def compression_chain(conn: Conn, ns: str, session_id: str) -> list[str]:
    """``session_id`` followed by its compression continuations up to the tip."""
    chain = [session_id]
    seen = {session_id}
    for _ in range(MAX_HOPS):
        children = conn.execute(
            f"SELECT {_EDGE_COLUMNS} {_FROM} WHERE s.namespace = %s "
            f"AND s.parent_session_id = %s AND {KIND_SQL} = 'compression'",
            (ns, chain[-1]),
        ).fetchall()
        nxt = _pick(children)
        if nxt is None or nxt["id"] in seen:
            break
        chain.append(nxt["id"])
        seen.add(nxt["id"])
    return chain


def _walk_up(conn: Conn, ns: str, session_id: str, kinds: Sequence[str]) -> list[str]:
    out = [session_id]
    seen = {session_id}
    for _ in range(MAX_HOPS):
        parent, kind = child_kind(conn, ns, out[-1])
        if parent is None or kind not in kinds or parent in seen:
            break
        out.append(parent)
        seen.add(parent)
    return out


def lineage_root(conn: Conn, ns: str, session_id: str) -> str:
    """The session whose listing entry stands for ``session_id``."""
    return _walk_up(conn, ns, session_id, HIDDEN_KINDS)[-1]


def lineage_roots(conn: Conn, ns: str, session_ids: Iterable[str]) -> dict[str, str]:
    """:func:`lineage_root` of each session. Most sessions have no parent: one query
    settles them, and only the children walk up (a search hands in up to 300)."""
    ids = list(dict.fromkeys(session_ids))
    roots = {sid: sid for sid in ids}
    if ids:
        for row in conn.execute(
            "SELECT id FROM sessions WHERE namespace = %s AND id = ANY(%s) "
            "AND parent_session_id IS NOT NULL",
            (ns, ids),
        ).fetchall():
            child = str(row["id"])
            roots[child] = lineage_root(conn, ns, child)
    return roots


def compression_ancestors(conn: Conn, ns: str, session_id: str) -> list[str]:
    """Sessions that ``session_id`` continues through compression, nearest first."""
    return _walk_up(conn, ns, session_id, ("compression",))[1:]


def lineage_ids(conn: Conn, ns: str, session_id: str) -> list[str]:
    """Every session of the conversation ``session_id`` belongs to, root first."""
    root = lineage_root(conn, ns, session_id)
    return [root, *_descendants(conn, ns, [root], HIDDEN_KINDS, bound=MAX_HOPS * 10 - 1)]


def delegate_descendants(conn: Conn, ns: str, session_ids: Iterable[str]) -> list[str]:
    """Sessions reachable from ``session_ids`` through delegate links (not the seeds)."""
    return _descendants(conn, ns, list(set(session_ids)), ("delegate",))


def _descendants(
    conn: Conn, ns: str, seeds: Sequence[str], kinds: Sequence[str], *, bound: int | None = None
) -> list[str]:
    seen = set(seeds)
    frontier = list(seeds)
    out: list[str] = []
    while frontier and (bound is None or len(out) < bound):
        rows = conn.execute(
            f"SELECT s.id {_FROM} WHERE s.namespace = %s AND p.id IS NOT NULL "
            f"AND s.parent_session_id = ANY(%s) AND {KIND_SQL} = ANY(%s) "
            "ORDER BY s.started_at, s.id",
            (ns, frontier, list(kinds)),
        ).fetchall()
        frontier = [r["id"] for r in rows if r["id"] not in seen]
        seen.update(frontier)
        out.extend(frontier)
    return out


# A session's activity as the listing orders by it (a zero last_active counts as unset).
_ACTIVITY_SQL = "COALESCE(NULLIF(s.last_active, 0), s.started_at)"
# Rows read one hop query at a time before the walker reads every continuation at once.
_PRELOAD_AFTER = 400
# Rows the listing's server-side cursor brings over per round trip.
_LISTING_BATCH = 200


def _listed_filter(
    source: str | None, exclude_sources: Sequence[str] | None, include_archived: bool
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if not include_archived:
        where.append("s.archived = 0")
    if source is not None:
        where.append("s.source = %s")
        params.append(source)
    if exclude_sources:
        where.append("NOT (s.source = ANY(%s))")
        params.append(list(exclude_sources))
    return where, params


def list_sessions_rich(
    conn: Conn,
    ns: str,
    *,
    source: str | None = None,
    exclude_sources: Sequence[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    include_archived: bool = False,
    order_by_last_active: bool = True,
) -> list[dict[str, Any]]:
    """One row per conversation, each compression chain projected onto its tip.

    Same keys and order as :func:`memstrata.store.sqlite.lineage.list_sessions_rich`, and the
    same plan: ordered by start, the page is one indexed query; ordered by activity (a
    conversation is as recent as the newest session of its chain), the server sorts the
    sessions by activity and a server-side cursor reads them newest first, stopping as
    soon as the page is full. Only the page's conversations are walked.
    """
    want = max(0, offset) + max(0, limit)
    if want == 0:
        return []
    filters, params = _listed_filter(source, exclude_sources, include_archived)
    listed = f"COALESCE({KIND_SQL}, 'root') NOT IN ('compression', 'delegate')"
    if not order_by_last_active:
        rows = conn.execute(
            f"SELECT s.id {_FROM} WHERE {' AND '.join(['s.namespace = %s', listed, *filters])} "
            "ORDER BY s.started_at DESC, s.id DESC LIMIT %s OFFSET %s",
            [ns, *params, max(0, limit), max(0, offset)],
        ).fetchall()
        return [session_entry(conn, ns, compression_chain(conn, ns, r["id"])) for r in rows]
    # Continuations pass unfiltered: the filters apply to the conversation's first session.
    passes = " AND ".join([listed, *filters])
    # Sessions without a parent (most of them) are roots: no join, no kind to work out.
    roots = " AND ".join(["s.namespace = %s", "s.parent_session_id IS NULL", *filters])
    walker = _ChainWalker(conn, ns)
    ordered: list[str] = []
    placed: set[str] = set()
    verdicts: dict[str, bool] = {}  # conversation head -> listed under the filters?
    tied: list[str] = []  # conversations whose activity equals the current row's
    current: float | None = None
    # A server-side cursor: the rows come over in batches, and the scan stops with the page.
    with conn.cursor(name="memstrata_listing") as cursor:
        cursor.itersize = _LISTING_BATCH
        cursor.execute(
            f"SELECT s.id, NULL AS kind, {_ACTIVITY_SQL} AS activity FROM sessions s "
            f"WHERE {roots} UNION ALL "
            f"SELECT s.id, {KIND_SQL} AS kind, {_ACTIVITY_SQL} AS activity {_FROM} "
            "WHERE s.namespace = %s AND s.parent_session_id IS NOT NULL "
            f"AND ({KIND_SQL} = 'compression' OR ({passes})) "
            "ORDER BY activity DESC",
            [ns, *params, ns, *params],
        )
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
                    verdicts[head] = _is_listed(conn, ns, head, passes, params)
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
    return [session_entry(conn, ns, walker.chain(head)) for head in ordered[max(0, offset) : want]]


class _ChainWalker:
    """Compression heads and chains, by one query per hop or, once preloaded, from memory.

    Both ways give what :func:`compression_ancestors` and :func:`compression_chain` give.
    """

    def __init__(self, conn: Conn, ns: str) -> None:
        self._conn = conn
        self._ns = ns
        self._chains: dict[str, list[str]] = {}
        self._parent: dict[str, str] | None = None
        self._children: dict[str, list[Row]] = {}

    def preload(self) -> None:
        self._parent = {}
        for row in self._conn.execute(
            f"SELECT {_EDGE_COLUMNS} {_FROM} WHERE s.namespace = %s AND {KIND_SQL} = 'compression'",
            (self._ns,),
        ).fetchall():
            self._parent[row["id"]] = row["parent_session_id"]
            self._children.setdefault(row["parent_session_id"], []).append(row)

    def head(self, session_id: str) -> str:
        if self._parent is None:
            ancestors = compression_ancestors(self._conn, self._ns, session_id)
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
            chain = compression_chain(self._conn, self._ns, head)
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


def _is_listed(conn: Conn, ns: str, session_id: str, passes: str, params: list[Any]) -> bool:
    row = conn.execute(
        f"SELECT 1 {_FROM} WHERE s.namespace = %s AND s.id = %s AND {passes}",
        [ns, session_id, *params],
    )
    return row.fetchone() is not None


def session_entry(conn: Conn, ns: str, ids: Sequence[str]) -> dict[str, Any]:
    """The listing row of the conversation whose compression chain is ``ids`` (root first)."""
    rows = {
        r["id"]: r
        for r in conn.execute(
            "SELECT * FROM sessions WHERE namespace = %s AND id = ANY(%s)", (ns, list(ids))
        ).fetchall()
    }
    preview = ""
    for sid in ids:
        hit = conn.execute(
            "SELECT content FROM messages WHERE namespace = %s AND session_id = %s "
            "AND role = 'user' ORDER BY id LIMIT 1",
            (ns, sid),
        ).fetchone()
        if hit is not None:
            preview = preview_text(sqlite_form(hit["content"]))
            break
    return chain_entry(rows, ids, preview)
