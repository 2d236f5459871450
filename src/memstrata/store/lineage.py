"""Session lineage: why a child session exists, compression chains and conversation roots.

A child records why it exists in ``sessions.lineage_kind`` when it is created:

* ``compression`` — the parent was compressed and this session continues it;
* ``branch`` — a fork the user asked for; listed as a conversation of its own;
* ``delegate`` — a sub-agent's session; hidden from listings, deleted with its parent;
* ``reset`` — a fresh start (``/new``) that remembers where it came from; listed.

Rows without the record (imported from Hermes, whose rule raced, see the reference's
lineage notes) fall back to markers in ``model_config`` (``_delegate_from``,
``_branched_from``), a ``subagent`` source, and then to the timestamp rule: a child that
started at or after a compression-ended parent ended is a continuation, a child that
started while its parent ran is a delegate, anything else is a branch. Each backend
applies that classification in its SQL (:meth:`~memstrata.store.backend.Transaction.parent_kind`);
the walks over it are here, written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memstrata.store.backend import HIDDEN_KINDS, Edge, Transaction

# A walk stops after this many hops: lineage is shallow, and damaged data may loop.
MAX_HOPS = 100


def tip_rank(edge: Edge) -> tuple[bool, bool, float, float, str]:
    """Among several continuations of one session (a race in older data): prefer one that
    was itself compressed (the chain goes on there), then a live one, then the most active."""
    return (
        edge.end_reason == "compression",
        edge.ended_at is None,
        float(edge.last_active or edge.started_at or 0.0),
        float(edge.started_at or 0.0),
        edge.id,
    )


def pick_tip(children: Sequence[Edge]) -> Edge | None:
    """The continuation a chain goes on through (see :func:`tip_rank`)."""
    return max(children, key=tip_rank) if children else None


def compression_chain(tx: Transaction, session_id: str) -> list[str]:
    """``session_id`` followed by its compression continuations up to the tip.

    At most :data:`MAX_HOPS` hops; a cycle (only possible in damaged or hand-edited
    data) ends the walk at the last session not seen before.
    """
    chain = [session_id]
    seen = {session_id}
    for _ in range(MAX_HOPS):
        nxt = pick_tip(tx.continuations(chain[-1]))
        if nxt is None or nxt.id in seen:
            break
        chain.append(nxt.id)
        seen.add(nxt.id)
    return chain


def _walk_up(tx: Transaction, session_id: str, kinds: Sequence[str]) -> list[str]:
    """``session_id`` and its ancestors through children of ``kinds``, nearest first."""
    out = [session_id]
    seen = {session_id}
    for _ in range(MAX_HOPS):
        parent, kind = tx.parent_kind(out[-1])
        if parent is None or kind not in kinds or parent in seen:
            break
        out.append(parent)
        seen.add(parent)
    return out


def lineage_root(tx: Transaction, session_id: str) -> str:
    """The session whose listing entry stands for ``session_id``.

    Walks up through compression continuations and delegate links (at most
    :data:`MAX_HOPS`, cycle-guarded); stops at a root, a branch or a reset.
    """
    return _walk_up(tx, session_id, HIDDEN_KINDS)[-1]


def lineage_roots(tx: Transaction, session_ids: Iterable[str]) -> dict[str, str]:
    """:func:`lineage_root` of each session. Most sessions have no parent: one query
    settles them, and only the children walk up (a search hands in up to 300)."""
    ids = list(dict.fromkeys(session_ids))
    roots = {sid: sid for sid in ids}
    for child in tx.with_parent(ids) if ids else []:
        roots[child] = lineage_root(tx, child)
    return roots


def compression_ancestors(tx: Transaction, session_id: str) -> list[str]:
    """Sessions that ``session_id`` continues through compression, nearest first."""
    return _walk_up(tx, session_id, ("compression",))[1:]


def compression_head(tx: Transaction, session_id: str) -> str:
    """The first session of the compressed conversation ``session_id`` belongs to."""
    return _walk_up(tx, session_id, ("compression",))[-1]


def conversation_chain(tx: Transaction, session_id: str) -> list[str]:
    """The compressed conversation ``session_id`` is part of, oldest session first.

    Its compression ancestors, itself, then its continuations up to the tip. A
    continuation the chain does not pass through (a race in older data) still shows
    with the sessions that lead to it.
    """
    ancestors = compression_ancestors(tx, session_id)
    head = ancestors[-1] if ancestors else session_id
    chain = compression_chain(tx, head)
    return chain if session_id in chain else [*reversed(ancestors), session_id]


def lineage_ids(tx: Transaction, session_id: str) -> list[str]:
    """Every session of the conversation ``session_id`` belongs to, root first.

    The root (see :func:`lineage_root`) and everything reachable from it through
    compression continuations and delegates; search uses it to exclude the live
    conversation from its own results.
    """
    root = lineage_root(tx, session_id)
    # The bound counts the root, as the conversation's size limit does.
    return [root, *descendants(tx, [root], HIDDEN_KINDS, bound=MAX_HOPS * 10 - 1)]


def delegate_descendants(tx: Transaction, session_ids: Iterable[str]) -> list[str]:
    """Sessions reachable from ``session_ids`` through delegate links (not the seeds)."""
    return descendants(tx, list(dict.fromkeys(session_ids)), ("delegate",))


def descendants(
    tx: Transaction, seeds: Sequence[str], kinds: Sequence[str], *, bound: int | None = None
) -> list[str]:
    """Sessions reachable from ``seeds`` through children of the given ``kinds``.

    Breadth first, each level oldest first; the seeds are not included. The walk stops
    once ``bound`` sessions are found (it may end a level past it), which keeps a
    corrupted parent loop from running away.
    """
    seen = set(seeds)
    frontier = list(seeds)
    out: list[str] = []
    while frontier and (bound is None or len(out) < bound):
        frontier = [i for i in tx.children(frontier, kinds) if i not in seen]
        seen.update(frontier)
        out.extend(frontier)
    return out


class ChainWalker:
    """Compression heads and chains, by one query per hop or, once preloaded, from memory.

    Both ways give what :func:`compression_head` and :func:`compression_chain` give; a
    listing deep in a large store preloads every continuation once instead of walking
    hop by hop for each conversation it meets.
    """

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx
        self._chains: dict[str, list[str]] = {}
        self._parent: dict[str, str] | None = None
        self._children: dict[str, list[Edge]] = {}

    def preload(self) -> None:
        """Read every continuation of the store at once."""
        self._parent = {}
        for edge in self._tx.continuations(None):
            self._parent[edge.id] = edge.parent
            self._children.setdefault(edge.parent, []).append(edge)

    def head(self, session_id: str) -> str:
        """The first session of ``session_id``'s compressed conversation."""
        if self._parent is None:
            return compression_head(self._tx, session_id)
        current, seen = session_id, {session_id}
        for _ in range(MAX_HOPS):
            parent = self._parent.get(current)
            if parent is None or parent in seen:
                break
            current = parent
            seen.add(current)
        return current

    def chain(self, head: str) -> list[str]:
        """``head`` and its continuations up to the tip."""
        if head in self._chains:
            return self._chains[head]
        if self._parent is None:
            chain = compression_chain(self._tx, head)
        else:
            chain, seen = [head], {head}
            for _ in range(MAX_HOPS):
                nxt = pick_tip(self._children.get(chain[-1], []))
                if nxt is None or nxt.id in seen:
                    break
                chain.append(nxt.id)
                seen.add(nxt.id)
        self._chains[head] = chain
        return chain
