"""Full-text search on SQLite: the candidates of a compiled query, from three FTS5 indexes.

A query is compiled once (:mod:`memstrata.query.compile`) into one MATCH expression per
index. Each index answers with a bounded candidate list (its best ``k`` rows by BM25, all
filters applied inside the same SQL, so a filter never empties a truncated list), and
the lists are fused by summing each message's BM25 over the indexes and scaling the
query once, so that its best message scores 1.0. The indexes hold disjoint evidence (the
bigram index serves CJK text, the trigram index only terms the word index does not
know), so the sum counts each matched term once, by its rarity in the index that holds
it: ten rare Chinese bigrams outweigh one English name. Scaling each index to its own
best hit (the previous fusion) made one word of the word index weigh as much as all the
bigram evidence together. Reciprocal rank fusion was measured as well and lost (see
``benchmarks/results/recall.md``): it throws away how far apart the scores are.

What a search does with the candidates (dates, fallback, grouping, hits) is the same on
every backend: :mod:`memstrata.store.rank`.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

from memstrata.query.cjk import has_cjk
from memstrata.query.compile import CompiledQuery, Index, Node, Term
from memstrata.query.filters import Filters, tool_call_pattern
from memstrata.query.fold import fold
from memstrata.store.backend import Candidate
from memstrata.store.hits import term_needle, text_of
from memstrata.store.rank import BOOLEAN_RANKED, CANDIDATES, COMMON_DF, fuse_evidence
from memstrata.store.sqlite import bm25, substring

__all__ = [
    "COLUMN_WEIGHTS",
    "collect_candidates",
    "filter_sql",
    "joined_sessions",
    "message_texts",
]

# BM25 column weights of the word and trigram indexes: content, tool_name, tool_calls.
# A tool name is short and deliberate (a match there is strong evidence); tool-call
# arguments are long JSON whose keys repeat in every call, so they count half.
COLUMN_WEIGHTS = (1.0, 1.0, 0.5)
# An OR of more rare terms than this (a pasted page of text) is ranked in parts of this
# many terms (see _rare_candidates).
_OR_PART = 64
# In the "every common term" step, a term in more than this share of the rows is checked
# on the text of the other terms' AND instead of being walked (see _holding_every).
_AND_DENSE = 0.1
Fusion = Literal["evidence", "scaled", "rrf"]
Order = Literal["rank", "newest", "oldest"]

_TABLES: dict[Index, str] = {
    "word": "messages_fts",
    "trigram": "messages_fts_trigram",
    "cjk": "messages_fts_cjk",
}


def filter_sql(filters: Filters) -> tuple[str, list[Any]]:
    """The WHERE fragment of ``filters`` (starting with AND, or empty) over ``messages m``
    (and ``sessions s`` when :attr:`Filters.needs_sessions`), and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if not filters.include_inactive:
        # Rewound or undone rows are hidden; compaction-archived rows stay findable.
        clauses.append("(m.active = 1 OR m.compacted = 1)")
    for column, values, negate in (
        ("m.role", filters.roles, False),
        ("s.source", filters.sources, False),
        ("s.source", filters.exclude_sources, True),
        ("m.session_id", filters.exclude_session_ids, True),
    ):
        if values:
            marks = ", ".join("?" for _ in values)
            clauses.append(f"{column} {'NOT IN' if negate else 'IN'} ({marks})")
            params.extend(values)
    for tool in filters.hidden_tools:
        clauses.append("(m.tool_name IS NULL OR m.tool_name <> ?)")
        clauses.append(
            "NOT (m.tool_calls IS NOT NULL AND coalesce(m.content, '') = '' "
            "AND instr(m.tool_calls, ?) > 0)"
        )
        params.extend([tool, tool_call_pattern(tool)])
    if filters.hide_live:
        # The live rows of the current conversation are in the model's context already.
        marks = ", ".join("?" for _ in filters.hide_live)
        clauses.append(f"NOT (m.active = 1 AND m.session_id IN ({marks}))")
        params.extend(filters.hide_live)
    if filters.since is not None:
        clauses.append("m.timestamp >= ?")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("m.timestamp <= ?")
        params.append(filters.until)
    return "".join(f" AND {c}" for c in clauses), params


def joined_sessions(filters: Filters) -> str:
    """The join a filter on the session's source needs."""
    return " JOIN sessions s ON s.id = m.session_id" if filters.needs_sessions else ""


def _index_candidates(
    conn: sqlite3.Connection,
    index: Index,
    match: str,
    filters: Filters,
    k: int,
    order: Literal["rank", "newest", "oldest"],
) -> list[tuple[int, str, float, float]]:
    """Best k rows of one index as (id, session_id, timestamp, bm25)."""
    table = _TABLES[index]
    if order == "rank":
        return _ranked_candidates(conn, _scored(index), [match], filters, k)
    where, params = filter_sql(filters)
    join_sessions = joined_sessions(filters)
    # Newest/oldest walk the index in rowid order, which FTS5 serves without sorting
    # and stops after k rows (rowids grow with insertion; the page is then sorted by
    # timestamp). No BM25 here: its first call counts every row of every term.
    order_by = f"{table}.rowid {'DESC' if order == 'newest' else 'ASC'}"
    sql = (
        f"SELECT m.id, m.session_id, m.timestamp, 0.0 AS score "
        f"FROM {table} JOIN messages m ON m.id = {table}.rowid{join_sessions} "
        f"WHERE {table} MATCH ?{where} ORDER BY {order_by} LIMIT ?"
    )
    return [
        (int(r[0]), str(r[1]), float(r[2]), float(r[3]))
        for r in conn.execute(sql, [match, *params, k])
    ]


def _scored(index: Index) -> str:
    """The SELECT of ``rid, score`` (bm25) of one index's rows matching a MATCH parameter."""
    table = _TABLES[index]
    return (
        f"SELECT rowid AS rid, bm25({table}{_weights(index)}) AS score FROM {table} "
        f"WHERE {table} MATCH ?"
    )


def _weights(index: Index) -> str:
    # The bm25() arguments after the table: column weights (the bigram index has one column).
    return "" if index == "cjk" else ", " + ", ".join(str(w) for w in COLUMN_WEIGHTS)


def _ranked_candidates(
    conn: sqlite3.Connection,
    scored: str,
    scored_params: Sequence[Any],
    filters: Filters,
    k: int,
) -> list[tuple[int, str, float, float]]:
    """The best k rows of ``scored`` (a SELECT of ``rid, score``, bm25's sign) that pass
    ``filters``, as (id, session_id, timestamp, score); equal scores: the newer row first,
    as the final sort orders them.

    Rank inside the index first and join only its best rows: joining every match before
    sorting doubles the cost. Filters that drop more than half of those rows leave too
    few, and then the exact (joined) query runs instead, unless the index had no more
    matches than that (the count rides along, computed once from the materialised
    list): then the filtered list is already exact.
    """
    where, params = filter_sql(filters)
    join_sessions = joined_sessions(filters)
    fast = (
        f"WITH f AS MATERIALIZED ({scored} ORDER BY score, rid DESC LIMIT ?) "
        "SELECT m.id, m.session_id, m.timestamp, f.score, (SELECT count(*) FROM f) "
        f"FROM f JOIN messages m ON m.id = f.rid{join_sessions} WHERE 1{where} "
        "ORDER BY f.score, m.id DESC"
    )
    scanned = 0
    rows = []
    for r in conn.execute(fast, [*scored_params, 2 * k, *params]):
        rows.append((int(r[0]), str(r[1]), float(r[2]), float(r[3])))
        scanned = int(r[4])
    # With no row back the count is unknown (every row filtered, or no match at all):
    # the exact query settles it.
    complete = bool(rows) and scanned < 2 * k
    if len(rows) >= k or complete or (not where and not join_sessions):
        return rows[:k]
    exact = (
        f"SELECT m.id, m.session_id, m.timestamp, f.score FROM ({scored}) f "
        f"JOIN messages m ON m.id = f.rid{join_sessions} WHERE 1{where} "
        "ORDER BY f.score, m.id DESC LIMIT ?"
    )
    return [
        (int(r[0]), str(r[1]), float(r[2]), float(r[3]))
        for r in conn.execute(exact, [*scored_params, *params, k])
    ]


def _rare_phrase(
    walks: bm25.Walks,
    index: Index,
    leaf: str,
    filters: Filters,
    k: int,
    total: int,
) -> list[tuple[int, str, float, float]] | None:
    """The best k rows of a phrase found in at most COMMON_DF rows; None when it is found
    in more, or when its words are too common to rank it unprobed.

    A phrase found in few rows is ranked by FTS5's bm25() (see _bounded_candidates), and
    its density probe walks every one of its matches first, checking positions over the
    doclists of all its words, newest first (a backward walk, dearer than a forward
    one): a third of the whole cost. A phrase occurs in no more rows than its rarest
    word, so when a word is in at most bm25.EXACT_ROWS rows (its own probe reads one
    doclist), ranking every match is cheap: one statement ranks them (equal scores: the
    newer row first, the order of the final sort) and hands back at most COMMON_DF + 1
    of them. At most COMMON_DF is every match, joined with their messages best first
    until k pass the filters: the answer the probe would have led to. More is a common
    phrase, left to the caller's steps.
    """
    if "*" in leaf:
        return None
    table = _TABLES[index]
    # The longest word first: usually the rarest, and one rare word is enough.
    words = sorted(re.findall(r"[^\W_]+", leaf), key=len, reverse=True)
    if not any(
        bm25.density_count(walks, table, f'"{w}"', total, COMMON_DF)[0] <= bm25.EXACT_ROWS
        for w in words
    ):
        return None
    ranked = [
        (int(r[0]), float(r[1]))
        for r in walks.conn.execute(
            f"{_scored(index)} ORDER BY score, rid DESC LIMIT ?",
            (leaf, COMMON_DF + 1),
        )
    ]
    if len(ranked) > COMMON_DF:
        return None
    return _join_ranked(walks.conn, ranked, filters, k)


def _common_df(walks: bm25.Walks, index: Index, leaf: str, total: int, k: int) -> float | None:
    """Estimated row count of a term found in more than COMMON_DF rows, else None.

    FTS5 walks a doclist at tens of nanoseconds a row but scores a row (BM25 reads its
    length) at microseconds, so "which row is the (COMMON_DF+1)-th newest match?" is cheap
    to ask. Its distance from the newest row gives the term's density, hence its count.
    A phrase is walked newest first only as far as the later steps read it (k rows), the
    rest of the probe from the oldest row up: a phrase of a word found in millions of
    rows costs a third less so (see bm25.density_count). A prefix is not: its walk is
    the OR of the words it covers, no cheaper forwards, and two walks cost more than one.
    """
    head = None if "*" in leaf else k
    count, exact = bm25.density_count(walks, _TABLES[index], leaf, total, COMMON_DF, head=head)
    return None if exact else min(float(total), count)


def _capped_candidates(
    conn: sqlite3.Connection,
    index: Index,
    match: str,
    tree: Node | None,
    filters: Filters,
    k: int,
    walks: bm25.Walks,
) -> list[tuple[int, str, float, float]]:
    """Rank a boolean query (AND, NOT, OR of groups) without FTS5's bm25().

    ``deploying NOT desert`` matches every row of a common word, and bm25() counts every
    row of every term of the query before scoring one. Only the newest BOOLEAN_RANKED
    matches are ranked, by :func:`memstrata.store.sqlite.bm25.rank_newest`, and joined with
    their messages best first until k pass the filters. When the filters leave fewer
    and older matches exist, the exact query runs.
    """
    if tree is None or k > BOOLEAN_RANKED:
        return _index_candidates(conn, index, match, filters, k, "rank")
    ranked = bm25.rank_newest(
        conn,
        _TABLES[index],
        index,
        tree,
        match,
        limit=BOOLEAN_RANKED,
        probe=COMMON_DF,
        weights=() if index == "cjk" else COLUMN_WEIGHTS,
        walks=walks,
    )
    rows = _join_ranked(conn, ranked, filters, k)
    if len(rows) >= k or len(ranked) < BOOLEAN_RANKED:
        return rows
    return _index_candidates(conn, index, match, filters, k, "rank")


def _join_ranked(
    conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]], filters: Filters, k: int
) -> list[tuple[int, str, float, float]]:
    """The best k of ``ranked`` (row id, score) that pass ``filters``, with their messages.

    Rows are joined k, then 2k at a time, best first: a page needs k of them (the filters
    rarely drop any), and reading every ranked row's message would cost more than ranking
    them did.
    """
    where, params = filter_sql(filters)
    join_sessions = joined_sessions(filters)
    out: list[tuple[int, str, float, float]] = []
    bounds = [0, *range(k, len(ranked) + 2 * k, 2 * k)]
    for start, stop in itertools.pairwise(bounds):
        chunk = ranked[start:stop]
        if not chunk:
            break
        marks = ", ".join("?" for _ in chunk)
        found = {
            int(r[0]): (str(r[1]), float(r[2]))
            for r in conn.execute(
                f"SELECT m.id, m.session_id, m.timestamp FROM messages m{join_sessions} "
                f"WHERE m.id IN ({marks}){where}",
                [*(rid for rid, _ in chunk), *params],
            )
        }
        out += [(rid, *found[rid], score) for rid, score in chunk if rid in found]
        if len(out) >= k:
            break
    return out[:k]


def index_hit(conn: sqlite3.Connection, index: Index, term: Term) -> bool:
    """Whether ``index`` finds ``term`` in any row (one lookup, stopped at the first)."""
    match = term.render(index)
    if match is None:
        return False
    table = _TABLES[index]
    row = conn.execute(f"SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT 1", (match,)).fetchone()
    return row is not None


def _bounded_candidates(
    conn: sqlite3.Connection,
    index: Index,
    leaves: Sequence[tuple[str, Term]],
    filters: Filters,
    k: int,
    total: int,
    walks: bm25.Walks,
) -> list[tuple[int, str, float, float]]:
    """Rank an OR of terms without scoring every row of its most common terms.

    Terms in more than COMMON_DF rows carry little weight (their IDF is low) but would
    dominate the cost. They are left out of the BM25 scan when a rarer term exists, and
    added back to the candidates' scores as IDF x presence. When the rare terms find
    fewer than k rows, the newest rows holding every common term follow, then the
    newest matches of any of them, scored by the common terms alone.

    Presence comes from the index where it is known (a row of the AND holds every common
    term; each term's newest row ids settle the newest rows, see _newest_by_term) and
    from the row's text only for the rows those walks did not settle.
    """
    if len(leaves) == 1 and bm25.Walks.costly(leaves[0][0]):
        direct = _rare_phrase(walks, index, leaves[0][0], filters, k, total)
        if direct is not None:
            return direct
    common: list[tuple[str, Term, float]] = []
    rare: list[str] = []
    for leaf, term in leaves:
        df = _common_df(walks, index, leaf, total, k)
        if df is None:
            rare.append(leaf)
        else:
            common.append((leaf, term, df))
    if not common:
        return _rare_candidates(conn, index, rare, filters, k)
    rows = _rare_candidates(conn, index, rare, filters, k) if rare else []
    everything = frozenset(range(len(common)))
    # Row id -> indexes (into ``common``) of the terms it is known to hold.
    present: dict[int, frozenset[int]] = {}
    # Per common term: the smallest row id down to which its matches are all known.
    known_from: list[int | None] = [None] * len(common)
    if len(rows) < k and len(common) > 1:
        # Rows holding every common term come next (newest first): with the presence
        # bonus below they rank above rows holding only some of them, as a full OR scan
        # would rank them. No BM25 here: its IDF counts every row of every common term.
        seen = {r[0] for r in rows}
        both = _holding_every(conn, index, common, filters, k - len(rows), total)
        for r in both:
            present[r[0]] = everything
        rows += [r for r in both if r[0] not in seen]
    if len(rows) < k:
        # Too few rare matches (or none): the newest matches of the common terms fill up.
        seen = {r[0] for r in rows}
        newest = _newest_of_any(walks, index, [leaf for leaf, _, _ in common], filters, k)
        rows += [r for r in newest if r[0] not in seen][: k - len(rows)]
        holders, known_from = _newest_by_term(walks, index, common, k)
        for mid, terms in holders.items():
            if present.get(mid) != everything:
                present[mid] = terms
    if not rows:
        return rows
    # FTS5's own IDF, with the estimated n.
    weights = [(term_needle(term), bm25.idf(total, df)) for _, term, df in common]
    if not rare and len(weights) == 1:
        # One common term and nothing else: every candidate matched it in this index, so
        # its text need not be read to know it holds the term.
        return [(mid, sid, ts, bm - weights[0][1]) for mid, sid, ts, bm in rows]
    settled = {
        mid
        for mid, _, _, _ in rows
        if present.get(mid) == everything
        or all(floor is not None and mid >= floor for floor in known_from)
    }
    unsettled = [r[0] for r in rows if r[0] not in settled]
    texts = message_texts(conn, unsettled)
    out = []
    for mid, sid, ts, bm in rows:
        if mid in texts:
            text = texts[mid]
            bonus = sum(idf for needle, idf in weights if needle in text)
        else:
            held = present.get(mid, frozenset())
            bonus = sum(idf for i, (_, idf) in enumerate(weights) if i in held)
        out.append((mid, sid, ts, bm - bonus))
    return out


def _rare_candidates(
    conn: sqlite3.Connection, index: Index, rare: Sequence[str], filters: Filters, k: int
) -> list[tuple[int, str, float, float]]:
    """The best k rows of the OR of ``rare`` by bm25(), the OR ranked in parts of
    _OR_PART terms when it has more.

    FTS5 works each row of an OR once per phrase of the query, to merge the doclists and
    again to list the row's matches for bm25(), so a pasted page of Chinese (950 rare
    bigrams over 30,000 rows of a million messages) costs rows x phrases: 0.3 s in one
    OR. bm25() of an OR is a sum over its phrases, each scored on its own (its IDF from
    its own row count, the row's length from the index), so the sum of the parts'
    scores is the whole query's score, and each part pays only for its own terms. The
    terms are rare (at most COMMON_DF rows each), which bounds the rows summed.
    """
    if len(rare) <= _OR_PART:
        return _index_candidates(conn, index, " OR ".join(rare), filters, k, "rank")
    parts = [" OR ".join(rare[i : i + _OR_PART]) for i in range(0, len(rare), _OR_PART)]
    union = " UNION ALL ".join(_scored(index) for _ in parts)
    scored = f"SELECT rid, sum(score) AS score FROM ({union}) GROUP BY rid"
    return _ranked_candidates(conn, scored, parts, filters, k)


def _holding_every(
    conn: sqlite3.Connection,
    index: Index,
    common: Sequence[tuple[str, Term, float]],
    filters: Filters,
    k: int,
    total: int,
) -> list[tuple[int, str, float, float]]:
    """The newest rows (at most k) holding every ``common`` term (no BM25).

    An AND walks the doclist of every term to its end when few rows hold them all, so
    its cost follows its commonest parts: a multi-word term (``auth-api`` is the phrase
    ``auth api``, checked position by position over the doclists of its words) and a
    term found in more than a tenth of the rows. So the AND of the other single-word
    terms runs first, newest first, for at most 2k rows, and the rows among them whose
    text holds the remaining terms (as a word start, see _holds) are the answer. When
    those 2k rows were all there is, no row is missed; otherwise it is the newest part
    of the answer, which bounds the walk on a large store. Only when none of them holds the
    remaining terms (or nothing is left to narrow with) does the whole AND run.
    """
    narrow = [leaf for leaf, _, df in common if not _is_phrase(leaf) and df <= total * _AND_DENSE]
    checked = [
        term_needle(term)
        for leaf, term, df in common
        if _is_phrase(leaf) or df > total * _AND_DENSE
    ]
    if narrow and checked:
        held, walked = _newest_holding(conn, index, " AND ".join(narrow), checked, filters, k)
        if held or walked < 2 * k:
            return held
    every = " AND ".join(leaf for leaf, _, _ in common)
    return _index_candidates(conn, index, every, filters, k, "newest")


def _newest_holding(
    conn: sqlite3.Connection,
    index: Index,
    match: str,
    needles: Sequence[str],
    filters: Filters,
    k: int,
) -> tuple[list[tuple[int, str, float, float]], int]:
    """The newest (at most k) of the newest 2k matches of ``match`` whose text holds
    every needle, and how many matches were walked.

    One statement reads each match's text with its session and time (the row is read
    for those anyway) and is left as soon as k rows hold the needles: when most do,
    the walk stops after about k rows instead of reading 2k rows twice.
    """
    table = _TABLES[index]
    where, params = filter_sql(filters)
    join_sessions = joined_sessions(filters)
    sql = (
        f"SELECT m.id, m.session_id, m.timestamp, m.content, m.tool_name, m.tool_calls "
        f"FROM {table} JOIN messages m ON m.id = {table}.rowid{join_sessions} "
        f"WHERE {table} MATCH ?{where} ORDER BY {table}.rowid DESC LIMIT ?"
    )
    held: list[tuple[int, str, float, float]] = []
    walked = 0
    for r in conn.execute(sql, [match, *params, 2 * k]):
        walked += 1
        if _holds(_searchable(r[3], r[4], r[5]), needles):
            held.append((int(r[0]), str(r[1]), float(r[2]), 0.0))
            if len(held) >= k:
                break
    return held, walked


def _searchable(content: Any, tool_name: str | None, tool_calls: str | None) -> str:
    """The lowercased text a row is searched by: content, tool name, tool calls, folded
    as the CJK index and the query are (memstrata.query.fold)."""
    return fold(" ".join(x for x in (text_of(content), tool_name, tool_calls) if x)).lower()


def _holds(text: str, needles: Sequence[str]) -> bool:
    """True when every needle occurs in ``text``; a Latin needle must start a word (not
    follow a Latin letter or digit: ``run`` is not in ``truncate``), as snippets mark."""
    for needle in needles:
        latin = needle[:1].isalnum() and not has_cjk(needle)
        pos = text.find(needle)
        while latin and pos > 0 and text[pos - 1].isalnum() and not has_cjk(text[pos - 1]):
            pos = text.find(needle, pos + 1)
        if pos < 0:
            return False
    return True


def _is_phrase(leaf: str) -> bool:
    # A rendered term is one quoted string (plus * for a prefix); more than one token
    # inside makes FTS5 match it as a phrase.
    return len(re.findall(r"\w+", leaf)) > 1


def message_texts(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, str]:
    """Lowercased searchable text (content, tool name, tool calls) of the given rows."""
    out: dict[int, str] = {}
    for start in range(0, len(ids), 500):
        part = list(ids[start : start + 500])
        marks = ", ".join("?" for _ in part)
        for r in conn.execute(
            f"SELECT id, content, tool_name, tool_calls FROM messages WHERE id IN ({marks})",
            part,
        ):
            out[int(r[0])] = _searchable(r[1], r[2], r[3])
    return out


def _newest_of_any(
    walks: bm25.Walks, index: Index, leaves: Sequence[str], filters: Filters, k: int
) -> list[tuple[int, str, float, float]]:
    """The newest k rows matching any of ``leaves`` that pass ``filters`` (score 0.0), as
    the OR's newest-first query gives them, from each leaf's newest-first walk.

    Each walk (kept from the leaf's density probe, see :class:`bm25.Walks`) holds all of
    its leaf's matches down to its oldest row id, so their union holds every match of
    the OR down to the newest of those ids (the floor). When fewer than k rows above the
    floor pass the filters, the OR's own query runs.
    """
    table = _TABLES[index]
    lists = [walks.newest(table, leaf, k) for leaf in leaves]
    floor = max((ids[-1] for ids in lists if len(ids) >= k), default=0)
    union = sorted({mid for ids in lists for mid in ids if mid >= floor}, reverse=True)
    where, params = filter_sql(filters)
    join_sessions = joined_sessions(filters)
    out: list[tuple[int, str, float, float]] = []
    for start in range(0, len(union), 2 * k):
        chunk = union[start : start + 2 * k]
        marks = ", ".join("?" for _ in chunk)
        found = {
            int(r[0]): (str(r[1]), float(r[2]))
            for r in walks.conn.execute(
                f"SELECT m.id, m.session_id, m.timestamp FROM messages m{join_sessions} "
                f"WHERE m.id IN ({marks}){where}",
                [*chunk, *params],
            )
        }
        out += [(mid, *found[mid], 0.0) for mid in chunk if mid in found]
        if len(out) >= k:
            return out[:k]
    if floor == 0:
        return out  # every match of every leaf was in the walks
    either = " OR ".join(leaves)
    return _index_candidates(walks.conn, index, either, filters, k, "newest")


def _newest_by_term(
    walks: bm25.Walks, index: Index, common: Sequence[tuple[str, Term, float]], k: int
) -> tuple[dict[int, frozenset[int]], list[int | None]]:
    """Which of the ``common`` terms each of the newest rows holds, from the index alone.

    One newest-first walk of row ids per term (each stops after k rows; no row is read).
    A row holds term i when it is in term i's list, and the list is complete down to its
    oldest row id (all of the term's matches when it has fewer than k): the rows of
    the OR's newest k are within every list's range unless filters dropped rows.
    Returns the holders and, per term, the smallest row id its list is complete from.
    """
    table = _TABLES[index]
    holders: dict[int, set[int]] = {}
    floors: list[int | None] = []
    for i, (leaf, _, _) in enumerate(common):
        found = walks.newest(table, leaf, k)
        floors.append(0 if len(found) < k else (found[-1] if found else 0))
        for mid in found:
            holders.setdefault(mid, set()).add(i)
    return {mid: frozenset(terms) for mid, terms in holders.items()}, floors


def collect_candidates(
    conn: sqlite3.Connection,
    compiled: CompiledQuery,
    filters: Filters,
    *,
    k: int = CANDIDATES,
    order: Literal["rank", "newest", "oldest"] = "rank",
    fusion: Fusion = "evidence",
    indexes: Sequence[Index] | None = None,
    bounded: bool = True,
) -> list[Candidate]:
    """Run the compiled query on each index and fuse the candidates, best first.

    ``bounded`` keeps very common terms out of the BM25 scan when ranking by relevance:
    a pure OR query (every natural question) leaves its common terms out of the scan
    (see _bounded_candidates), any other query ranks at most its BOOLEAN_RANKED newest
    matches (see _capped_candidates).
    """
    found: dict[int, Candidate] = {}
    total = 0
    walks = bm25.Walks(conn)
    if bounded and order == "rank" and compiled.leaves is not None:
        total = int(conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
    for index in indexes or tuple(_TABLES):
        match = compiled.match.get(index)
        if match is None:
            continue
        leaves = compiled.leaves[index] if compiled.leaves is not None else ()
        if index == "trigram" and leaves:
            # Substring matching is the costliest scan (a phrase of trigrams, several of
            # them in most rows); in a natural query it only serves terms the word index
            # does not find at all (``getUser`` inside ``getUserById``).
            leaves = tuple((leaf, t) for leaf, t in leaves if not index_hit(conn, "word", t))
            if not leaves:
                continue
            match = " OR ".join(leaf for leaf, _ in leaves)
        if index == "trigram" and not substring.positions_kept(conn):
            if compiled.leaves is not None:
                node = Node("or", tuple(Node("term", term=t) for _, t in leaves))
            else:
                assert compiled.tree is not None  # a query with a MATCH has a tree
                node = compiled.tree
            where, params = filter_sql(filters)
            joined = joined_sessions(filters)
            rows = substring.candidates(conn, node, where, params, joined, k, order)
        elif total > COMMON_DF and leaves:
            rows = _bounded_candidates(conn, index, leaves, filters, k, total, walks)
        elif bounded and order == "rank" and compiled.leaves is None:
            rows = _capped_candidates(conn, index, match, compiled.tree, filters, k, walks)
        else:
            rows = _index_candidates(conn, index, match, filters, k, order)
        if not rows:
            continue
        # bm25() is negative, best most negative.
        best = min(r[3] for r in rows)
        ranked = sorted(rows, key=lambda r: r[3])
        for rank, (mid, sid, ts, bm) in enumerate(ranked):
            cand = found.get(mid)
            if cand is None:
                cand = found[mid] = Candidate(mid, sid, ts, {})
            cand.bm25[index] = bm
            if order != "rank":
                continue
            if fusion == "rrf":
                cand.score += 1.0 / (60 + rank + 1)
            elif fusion == "scaled":
                cand.score += bm / best if best < 0 else 0.0
    cands = list(found.values())
    if order == "rank" and fusion == "evidence":
        # One scale for the whole query: the best message scores 1.0 (what dates,
        # vectors and sub-queries are weighed against), every other keeps its share.
        fused = fuse_evidence([(c.id, bm) for c in cands for bm in c.bm25.values()])
        for cand in cands:
            cand.score = fused[cand.id]
    if order == "rank":
        cands.sort(key=lambda c: (-c.score, -c.id))
    else:
        cands.sort(key=lambda c: (c.timestamp, c.id), reverse=order == "newest")
    return cands
