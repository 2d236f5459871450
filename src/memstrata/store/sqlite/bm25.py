"""BM25 of a bounded set of matches, without FTS5's count of every row of every term.

FTS5's ``bm25()`` starts each query by counting, for every phrase of it, every row of the
table that holds the phrase (its IDF), the excluded side of a NOT included. On a million
messages ``typed AND currency NOT missings`` matches 1,382 rows, but ``bm25()`` first
walks the 313,000 rows of ``typed``: 10 ms before the first row is scored. A boolean
query ranks at most its newest ``limit`` matches. When its terms are found in few rows
all together (``EXACT_ROWS``), FTS5's ``bm25()`` ranks them: the count is cheap then.
Otherwise this module scores them itself:

- the matches come from one newest-first walk of the index, stopped after ``limit``;
- a term's document frequency comes from the row id of its ``probe``-th newest match
  (its density, hence its count; exact when it has fewer matches), as
  :func:`density_count` explains;
- a row's length comes from the index's own ``_docsize`` table, the average length and
  row count from its averages record, so the length normalisation is FTS5's;
- a term counts once per row that holds it: the frequency of a term inside a row is only
  reachable through FTS5's auxiliary-function API, which Python's sqlite3 cannot use.
  A row of an AND holds every positive term; with an OR the rows holding each term are
  found by one more bounded walk per term, and a term counts only inside a branch that
  matched the row, as in FTS5.

The scores follow FTS5's sign (more negative is better), so the caller fuses them with
the other indexes' ``bm25()`` values unchanged.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

from memstrata.query.compile import Index, Node, Term
from memstrata.store.bm25 import K1, B, gain, idf
from memstrata.store.sqlite import prefix

__all__ = ["B", "EXACT_ROWS", "K1", "Walks", "density_count", "idf", "rank_newest", "varints"]

# Up to this many rows over all the terms of a query (the excluded side of a NOT
# included), FTS5's bm25() counts them in about a millisecond and ranks exactly, with
# each term's frequency in the row.
EXACT_ROWS = 20_000


def varints(blob: bytes) -> list[int]:
    """Decode SQLite varints (FTS5's ``_docsize`` rows and averages record)."""
    out: list[int] = []
    value = 0
    length = 0
    for byte in blob:
        length += 1
        if length == 9:
            # The ninth byte of a SQLite varint carries 8 bits and ends it.
            out.append((value << 8) | byte)
            value = length = 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            out.append((value << 7) | byte)
            value = length = 0
    return out


class Walks:
    """Newest-first walks of row ids, kept for the rest of one search.

    Several steps of a search ask an index for the newest rows of the same MATCH: the
    density probe of a term, the newest matches of a common term, the newest rows of each
    term. The first asks the index; the others reuse its list when it reaches far enough.
    A walk is cheap for one word, but a phrase checks positions over the doclists of all
    its words and a prefix (without a prefix index) merges the doclists of every term it
    covers, on each walk. Use one instance per snapshot: the lists are not refreshed.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # (table, match) -> (row ids newest first, the limit they were asked with).
        self._lists: dict[tuple[str, str], tuple[list[int], int]] = {}

    def newest(self, table: str, match: str, limit: int) -> list[int]:
        """The newest ``limit`` row ids of ``table`` matching ``match`` (fewer: all of
        them), newest first."""
        known = self._lists.get((table, match))
        if known is not None:
            ids, asked = known
            if limit <= asked or len(ids) < asked:
                return ids[:limit]
        # One text value instead of a row object per id.
        (joined,) = self.conn.execute(
            f"SELECT group_concat(rid) FROM (SELECT rowid AS rid FROM {table} "
            f"WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?)",
            (self._walked(table, match), limit),
        ).fetchone()
        ids = [int(x) for x in joined.split(",")] if joined else []
        self._lists[(table, match)] = (ids, limit)
        return ids

    def oldest(self, table: str, match: str, below: int, limit: int) -> tuple[int, int]:
        """How many of the oldest ``limit`` rows of ``table`` matching ``match`` have a
        row id under ``below``, and the newest of them (0 when none): a walk from the
        oldest row up, which FTS5 serves at about two thirds of the cost of a
        newest-first walk of a phrase (it reads a doclist backwards by first walking it
        forwards, page by page)."""
        seen, last = self.conn.execute(
            f"SELECT count(*), coalesce(max(rid), 0) FROM (SELECT rowid AS rid FROM {table} "
            f"WHERE {table} MATCH ? AND rowid < ? ORDER BY rowid LIMIT ?)",
            (self._walked(table, match), below, limit),
        ).fetchone()
        return int(seen), int(last)

    def _walked(self, table: str, match: str) -> str:
        # A prefix walks as the OR of the words it covers (the same rows, see
        # memstrata.store.sqlite.prefix).
        return (prefix.as_or(self.conn, table, match) if "*" in match else None) or match

    @staticmethod
    def costly(match: str) -> bool:
        """True for a MATCH whose walk costs more than reading one doclist: a prefix (it
        merges the doclists of every term it covers) or a phrase (positions checked over
        the doclists of all its words). Only those are worth keeping from a probe."""
        return "*" in match or len(re.findall(r"\w+", match)) > 1


def density_count(
    conn: sqlite3.Connection | Walks,
    table: str,
    match: str,
    newest_id: int,
    probe: int,
    head: int | None = None,
) -> tuple[float, bool]:
    """How many rows of ``table`` match ``match``: (count, exact).

    When more than ``probe`` rows match, the (probe+1)-th newest one's row id gives the
    density of the matches over the newest ids, hence an estimate for all ``newest_id``
    ids. Walking a doclist costs tens of nanoseconds a row, so this is bounded by
    ``probe`` rows whatever the term's count; with fewer matches the count is exact.
    Given :class:`Walks`, a costly walk (:meth:`Walks.costly`) is kept for the later steps
    of the same search; a one-word walk is cheaper to repeat than to hand over.

    ``head``: a costly walk reads only the newest ``head`` rows newest first (what the
    later steps reuse) and counts the rest from the oldest row up (:meth:`Walks.oldest`),
    cheaper for a phrase; the density is then that of the two walked ends. The count is
    exact whenever it is at most ``probe``, as without ``head``.
    """
    if isinstance(conn, Walks) and Walks.costly(match):
        top = probe + 1 if head is None else max(1, min(head, probe + 1))
        ids = conn.newest(table, match, top)
        if top <= probe and len(ids) == top:
            below, last = conn.oldest(table, match, ids[-1], probe + 1 - top)
            if top + below <= probe:
                return float(top + below), True
            walked = newest_id - ids[-1] + 1 + last
            return (probe + 1) * newest_id / max(walked, probe + 1), False
        seen, oldest = len(ids), (ids[-1] if ids else None)
    else:
        # One walk of at most probe+1 rows, newest first: how many, and the oldest of them.
        sql_conn = conn.conn if isinstance(conn, Walks) else conn
        seen, oldest = sql_conn.execute(
            f"SELECT count(*), min(rid) FROM (SELECT rowid AS rid FROM {table} "
            f"WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?)",
            (match, probe + 1),
        ).fetchone()
    if int(seen) <= probe:
        return float(seen), True
    assert oldest is not None
    span = max(newest_id - int(oldest) + 1, probe + 1)
    return (probe + 1) * newest_id / span, False


def _every_term_required(node: Node) -> bool:
    # True when each row matching ``node`` holds every positive term: no OR on the
    # positive side (a NOT's excluded side holds none of its terms in a match).
    if node.op == "term":
        return True
    if node.op == "or":
        return len(node.children) == 1 and _every_term_required(node.children[0])
    children = node.children[:1] if node.op == "not" else node.children
    return all(_every_term_required(c) for c in children)


def _averages(conn: sqlite3.Connection, table: str) -> tuple[int, float]:
    """The index's row count and average row length in tokens (all columns)."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    values = varints(bytes(row[0])) if row is not None and row[0] is not None else []
    rows = values[0] if values else 0
    return rows, (sum(values[1:]) / rows if rows else 1.0)


def rank_newest(
    conn: sqlite3.Connection,
    table: str,
    index: Index,
    tree: Node,
    match: str,
    *,
    limit: int,
    probe: int,
    weights: Sequence[float] = (),
    walks: Walks | None = None,
) -> list[tuple[int, float]]:
    """The newest ``limit`` matches of ``match`` as (row id, score), best first.

    ``tree`` is the query ``match`` was rendered from, for its terms (their probes go
    through ``walks`` when given, for the rest of the search to reuse). When all its terms
    together are found in at most EXACT_ROWS rows, FTS5's own ``bm25()`` (with the column
    ``weights``) ranks the matches: its counting is cheap then. Otherwise each present term
    counts once (see the module docstring). Either way the ranking says nothing about
    matches older than these ``limit``.
    """
    newest_id = int(conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
    counts: dict[str, float] = {}
    exact: dict[str, bool] = {}
    for term in tree.terms():
        rendered = term.render(index)
        if rendered is not None and rendered not in counts:
            counts[rendered], exact[rendered] = density_count(
                walks or conn, table, rendered, newest_id, probe
            )
    positive = tuple(dict.fromkeys(_rendered(tree.positive_terms(), index)))
    if sum(counts.values()) <= EXACT_ROWS:
        # Every match holds a positive term, so when those are known to be fewer than
        # ``limit`` together, every match is among the newest ``limit``: no floor to find.
        few = all(exact[t] for t in positive) and sum(counts[t] for t in positive) < limit
        return _fts5_ranked(conn, table, match, limit, weights, floor=0 if few else None)
    found: list[tuple[int, bytes | None]] = conn.execute(
        f"SELECT f.rowid, d.sz FROM {table} f JOIN {table}_docsize d ON d.id = f.rowid "
        f"WHERE {table} MATCH ? ORDER BY f.rowid DESC LIMIT ?",
        (match, limit),
    ).fetchall()
    if not found:
        return []
    nrow, avgdl = _averages(conn, table)
    weight = {t: idf(nrow, n) for t, n in counts.items()}
    # Row id -> the terms it holds, when an OR makes that differ from row to row.
    held: dict[int, set[str]] | None = None
    if not _every_term_required(tree):
        held = {}
        for rendered in counts:
            for (rid,) in conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ? AND rowid >= ?",
                (f"({match}) AND ({rendered})", int(found[-1][0])),
            ):
                held.setdefault(int(rid), set()).add(rendered)
    # A present term's frequency is taken as 1 (see memstrata.store.bm25.gain), so a row's
    # factor depends on its length alone: computed once per distinct _docsize value (a
    # thousand rows hold a few dozen), and for an AND, whose rows all hold every positive
    # term, the terms' weight is summed once. Same arithmetic as row by row, same floats.
    factors: dict[bytes | None, float] = {}
    every = sum(weight[t] for t in positive)
    scored: list[tuple[float, int]] = []
    for rid, size in found:
        factor = factors.get(size)
        if factor is None:
            factor = factors[size] = gain(1.0, _length(size, avgdl), avgdl)
        if held is None:
            scored.append((-factor * every, -int(rid)))
        else:
            credited = _credited(tree, index, held.get(rid, set()))
            scored.append((-factor * sum(weight[t] for t in credited or ()), -int(rid)))
    scored.sort()
    return [(-neg_rid, score) for score, neg_rid in scored]


def _credited(node: Node, index: Index, held: set[str]) -> set[str] | None:
    """The terms a row holding ``held`` is scored on, or None when ``node`` misses it.

    As FTS5 counts them: a term counts only inside a branch that matched the row, so in
    ``alpha OR (delta AND echo)`` a row of alpha and delta without echo counts alpha only.
    A term the index cannot see never matches (as :meth:`Node.render` leaves it out).
    """
    if node.op == "term":
        assert node.term is not None
        rendered = node.term.render(index)
        return {rendered} if rendered is not None and rendered in held else None
    results = [_credited(child, index, held) for child in node.children]
    if node.op == "or":
        matched = [r for r in results if r is not None]
        return set().union(*matched) if matched else None
    if node.op == "and":
        every = [r for r in results if r is not None]
        return set().union(*every) if len(every) == len(results) else None
    head, rest = results[0], results[1:]
    return head if head is not None and all(r is None for r in rest) else None


def _rendered(terms: Sequence[Term], index: Index) -> list[str]:
    return [r for r in (t.render(index) for t in terms) if r is not None]


def _fts5_ranked(
    conn: sqlite3.Connection,
    table: str,
    match: str,
    limit: int,
    weights: Sequence[float],
    *,
    floor: int | None,
) -> list[tuple[int, float]]:
    """FTS5's bm25() over the newest ``limit`` matches, from row id ``floor`` on (None:
    find it, a walk of ``limit`` rows)."""
    if floor is None:
        row = conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (match, limit - 1),
        ).fetchone()
        floor = int(row[0]) if row is not None else 0
    args = "".join(f", {w}" for w in weights)
    return [
        (int(r[0]), float(r[1]))
        for r in conn.execute(
            f"SELECT rowid, bm25({table}{args}) AS score FROM {table} "
            f"WHERE {table} MATCH ? AND rowid >= ? ORDER BY score, rowid DESC",
            (match, floor),
        )
    ]


def _length(size: bytes | None, default: float) -> float:
    """A ``_docsize`` row's total length in tokens (``default`` when the row has none)."""
    if size is None:
        return default
    # Every column under 128 tokens: each varint is one byte, the byte itself.
    return float(sum(size)) if size.isascii() else float(sum(varints(size)))
