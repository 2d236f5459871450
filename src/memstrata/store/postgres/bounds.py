"""Bounds on the work one search may cost PostgreSQL.

A ``session_search`` query is up to 2,000 characters the model (or whoever steered it)
chose. Compiled, a run of CJK text is ~2,000 ORed bigrams and a list of identifiers is
hundreds of phrase-and-substring terms; PostgreSQL plans one index probe, one count and
one rank expression per term, and such queries took 11-17 s on 20,000 messages where
SQLite's FTS5 took 0.17 s. Three bounds keep every query in the same range as a normal
question:

* at most :data:`MAX_TERMS` distinct terms reach SQL. A natural query (an OR of terms)
  keeps its rarest terms by the tenant's statistics (they carry the ranking), then its
  longest, the ones it repeats most, the last written; every term still scores the
  candidates (:mod:`memstrata.store.postgres.ranking`); an
  explicit boolean query keeps its first terms in reading order, so AND/OR/NOT keep
  their meaning over what is kept;
* at most :data:`MAX_SUBSTRING_TERMS` of them may also scan the trigram index (the
  costliest probe: a substring of common trigrams rechecks many rows);
* every search statement runs under ``SET LOCAL statement_timeout``
  (:data:`SEARCH_TIMEOUT_MS`), so nothing the caps miss can hold a connection longer.

The caps change what a pathological query matches (its first or longest terms), never
what a question of normal length matches: natural questions have well under
:data:`MAX_TERMS` terms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from memstrata.query.compile import CompiledQuery, Node, Term

__all__ = [
    "MAX_SUBSTRING_TERMS",
    "MAX_TERMS",
    "SEARCH_TIMEOUT_MS",
    "bound_query",
    "substring_budget",
]

MAX_TERMS: Final = 16
MAX_SUBSTRING_TERMS: Final = 4
SEARCH_TIMEOUT_MS: Final = 5_000


def _prune(node: Node, keep: set[int], seen: list[int]) -> Node | None:
    """``node`` with only the term leaves whose reading-order index is in ``keep``."""
    if node.op == "term":
        index = len(seen)
        seen.append(index)
        return node if index in keep else None
    children = [_prune(child, keep, seen) for child in node.children]
    if node.op == "not":
        head, rest = children[0], [c for c in children[1:] if c is not None]
        if head is None:
            return None
        return replace(node, children=(head, *rest)) if rest else head
    kept = tuple(c for c in children if c is not None)
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else replace(node, children=kept)


def _leaves(node: Node) -> list[Term]:
    if node.term is not None:
        return [node.term]
    return [t for child in node.children for t in _leaves(child)]


def bound_query(
    compiled: CompiledQuery,
    max_terms: int = MAX_TERMS,
    rarity: Mapping[Term, float] | None = None,
) -> CompiledQuery:
    """``compiled`` with at most ``max_terms`` terms in its tree (itself when within).

    A natural query keeps its rarest distinct terms by ``rarity`` (a term's estimated
    rows, see :func:`memstrata.store.postgres.ranking.rarity`), then the longest (ties:
    the most repeated, then the last written); an explicit one its first terms in
    reading order.
    """
    tree = compiled.tree
    if tree is None:
        return compiled
    leaves = _leaves(tree)
    if len(leaves) <= max_terms:
        return compiled
    order = list(range(len(leaves)))
    if compiled.leaves is None:  # explicit: the first terms, AND/OR/NOT keep their meaning
        keep = set(order[:max_terms])
    else:
        # A natural query is an OR of terms, so a repeat takes no second place. Longer
        # terms are rarer; among equals, what a long text repeats is what it is about
        # (query term frequency), and in pasted text or a dialogue the last words are
        # the current topic and the question. Measured on both halves of the MADial
        # dev set (PostgreSQL R@5 0.213/0.249 in reading order, 0.360/0.425 so).
        # The rarest first by the tenant's statistics: a long Chinese dialogue is
        # hundreds of bigrams of one length, most of them in many rows, and its memory
        # is found by the few rare ones wherever the dialogue says them.
        counts = Counter(leaf.text for leaf in leaves)
        rare = rarity or {}
        order.sort(
            key=lambda i: (
                rare.get(leaves[i], 0.0),
                -len(leaves[i].text),
                -counts[leaves[i].text],
                -i,
            )
        )
        keep, kept = set(), set()
        for i in order:
            if leaves[i].text not in kept:
                keep.add(i)
                kept.add(leaves[i].text)
                if len(keep) == max_terms:
                    break
    return replace(compiled, tree=_prune(tree, keep, []))


def substring_budget(terms: list[Term], limit: int = MAX_SUBSTRING_TERMS) -> set[Term]:
    """The terms (at most ``limit``, longest first) allowed to scan the trigram index."""
    candidates = [t for t in terms if t.trigram]
    ranked = sorted(range(len(candidates)), key=lambda i: (-len(candidates[i].text), i))
    return {candidates[i] for i in ranked[:limit]}
