"""Full-text search of the session store: messages and sessions, best first.

A query is compiled once (:mod:`memstrata.query.compile`) into one MATCH expression per index.
Each index answers with a bounded candidate list (its best ``CANDIDATES`` rows by BM25,
all filters applied inside the same SQL, so a filter never empties a truncated list), and
the lists are fused by scaling each index's BM25 to its own best hit (1.0) and summing
per message. BM25 values from different indexes are not on one scale (different
vocabularies and document frequencies); scaling makes "the best hit of the bigram index"
and "the best hit of the word index" count the same, and a message found by two indexes
gets the evidence of both. Reciprocal rank fusion was measured as well and lost (see
``benchmarks/results/recall.md``): it throws away how far apart the scores are.

Only the final page is turned into dicts: snippets, the session row and the previous and
next message are fetched for those rows alone, so the cost of a query does not grow with
the number of messages that match it beyond the bounded candidate scans.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from memstrata.errors import ConfigError, SessionStoreError
from memstrata.query.cjk import has_cjk
from memstrata.query.compile import CompiledQuery, Index, Node, Term, compile_query
from memstrata.query.dates import DateWindow, find_dates, is_question, spans_of, strip_dates
from memstrata.query.filters import Filters, make_filters
from memstrata.store import boosts
from memstrata.store.sqlite import bm25, substring
from memstrata.store.sqlite.hits import highlight, hit_dicts, session_titles, term_needle, text_of

if TYPE_CHECKING:
    from memstrata.search.embedders import Embedder

__all__ = [
    "BOOLEAN_RANKED",
    "CANDIDATES",
    "COLUMN_WEIGHTS",
    "COMMON_DF",
    "MESSAGE_CANDIDATES",
    "SESSION_HIT_DECAY",
    "SESSION_TOP_HITS",
    "Candidate",
    "RankedQuery",
    "Filters",
    "aggregate_sessions",
    "collect_candidates",
    "dated_query",
    "highlight",
    "hit_dicts",
    "lineage_roots",
    "make_filters",
    "rank_query",
    "search_messages",
    "search_sessions",
    "session_results",
    "term_needle",
    "text_of",
]

# How many rows each index contributes before fusion. Bounded so a query's cost does not
# grow with the number of matching rows. Ranking sessions needs several hits per session
# (300, also what Hermes' session_search scans); a page of messages needs fewer.
CANDIDATES = 300
MESSAGE_CANDIDATES = 100
# BM25 column weights of the word and trigram indexes: content, tool_name, tool_calls.
# A tool name is short and deliberate (a match there is strong evidence); tool-call
# arguments are long JSON whose keys repeat in every call, so they count half.
COLUMN_WEIGHTS = (1.0, 1.0, 0.5)
# Session score = its best SESSION_TOP_HITS message scores, the i-th weighted
# SESSION_HIT_DECAY**i (1, 0.6, 0.36): a session that discusses the topic in several
# messages beats one stray mention, a long session cannot win on volume alone, and the
# best message counts most. Measured on LoCoMo against plain top-n sums
# (benchmarks/results/recall.md).
SESSION_TOP_HITS = 3
SESSION_HIT_DECAY = 0.6
# A term found in more rows than this is "common": it is not scanned with BM25 when a
# rarer term can find the candidates (see _bounded_candidates). Scoring a row
# costs a few microseconds, so this bounds a query's BM25 scan to about a millisecond per
# term whatever the store's size. LoCoMo session recall is unchanged down to ~50 rows
# (benchmarks/results/recall.md); 500 keeps a wide margin above that.
COMMON_DF = 500
# A boolean query (AND, NOT) ranks only its newest BOOLEAN_RANKED matches (see
# _capped_candidates). Higher than COMMON_DF: an AND of common words has no rarer term to
# lean on, and BM25's preference for short messages that hold every word is what finds
# the right one among thousands. Measured at 1M messages (store-search-tuning.md):
# 2,000 found 29 of 40 planted answers in the first page, 1,000 found 32 at two thirds
# of the cost (the walk and the length lookups grow with it), 500 found 31.
BOOLEAN_RANKED = 1000
# In the "every common term" step, a term in more than this share of the rows is checked
# on the text of the other terms' AND instead of being walked (see _holding_every).
_AND_DENSE = 0.1

Fusion = Literal["scaled", "rrf"]
Sort = Literal["newest", "oldest"]

_TABLES: dict[Index, str] = {
    "word": "messages_fts",
    "trigram": "messages_fts_trigram",
    "cjk": "messages_fts_cjk",
}


class ReadableStore(Protocol):
    """Anything that lends a read connection: a SessionStore."""

    def read_conn(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """Yield a connection on which the store's SQL functions are registered."""


Source = ReadableStore | sqlite3.Connection


@contextlib.contextmanager
def _connection(store: Source) -> Iterator[sqlite3.Connection]:
    if isinstance(store, sqlite3.Connection):
        yield store
    else:
        with store.read_conn() as conn:
            yield conn


@dataclass
class Candidate:
    """A message found by at least one index, with its per-index BM25 and fused score."""

    id: int
    session_id: str
    timestamp: float
    bm25: dict[Index, float]
    score: float = 0.0


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
    where, params = filters.sql()
    match_sql, match_params = f"{table} MATCH ?", [match]
    join_sessions = " JOIN sessions s ON s.id = m.session_id" if filters.needs_sessions else ""
    if order == "rank":
        weights = "" if index == "cjk" else ", " + ", ".join(str(w) for w in COLUMN_WEIGHTS)
        # Rank inside the index first and join only its best rows: joining every match
        # before sorting doubles the cost. Filters that drop more than half of those
        # rows leave too few, and then the exact (joined) query runs instead, unless
        # the index had no more matches than that (the count rides along, computed once
        # from the materialised list): then the filtered list is already exact.
        inner = (
            f"SELECT rowid AS rid, bm25({table}{weights}) AS score FROM {table} "
            f"WHERE {match_sql} ORDER BY score LIMIT ?"
        )
        fast = (
            f"WITH f AS MATERIALIZED ({inner}) "
            "SELECT m.id, m.session_id, m.timestamp, f.score, (SELECT count(*) FROM f) "
            f"FROM f JOIN messages m ON m.id = f.rid{join_sessions} WHERE 1{where} "
            "ORDER BY f.score"
        )
        scanned = 0
        rows = []
        for r in conn.execute(fast, [*match_params, 2 * k, *params]):
            rows.append((int(r[0]), str(r[1]), float(r[2]), float(r[3])))
            scanned = int(r[4])
        # With no row back the count is unknown (every row filtered, or no match at all):
        # the exact query settles it.
        complete = bool(rows) and scanned < 2 * k
        if len(rows) >= k or complete or (not where and not join_sessions):
            return rows[:k]
        score, order_by = f"bm25({table}{weights})", "score"
    else:
        # Newest/oldest walk the index in rowid order, which FTS5 serves without sorting
        # and stops after k rows (rowids grow with insertion; the page is then sorted by
        # timestamp). No BM25 here: its first call counts every row of every term.
        score, order_by = "0.0", f"{table}.rowid {'DESC' if order == 'newest' else 'ASC'}"
    sql = (
        f"SELECT m.id, m.session_id, m.timestamp, {score} AS score "
        f"FROM {table} JOIN messages m ON m.id = {table}.rowid{join_sessions} "
        f"WHERE {match_sql}{where} ORDER BY {order_by} LIMIT ?"
    )
    return [
        (int(r[0]), str(r[1]), float(r[2]), float(r[3]))
        for r in conn.execute(sql, [*match_params, *params, k])
    ]


def _common_df(conn: sqlite3.Connection, index: Index, leaf: str, total: int) -> float | None:
    """Estimated row count of a term found in more than COMMON_DF rows, else None.

    FTS5 walks a doclist at tens of nanoseconds a row but scores a row (BM25 reads its
    length) at microseconds, so "which row is the (COMMON_DF+1)-th newest match?" is cheap
    to ask. Its distance from the newest row gives the term's density, hence its count.
    """
    count, exact = bm25.density_count(conn, _TABLES[index], leaf, total, COMMON_DF)
    return None if exact else min(float(total), count)


def _capped_candidates(
    conn: sqlite3.Connection,
    index: Index,
    match: str,
    tree: Node | None,
    filters: Filters,
    k: int,
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
    )
    rows = _join_ranked(conn, ranked, filters, k)
    if len(rows) >= k or len(ranked) < BOOLEAN_RANKED:
        return rows
    return _index_candidates(conn, index, match, filters, k, "rank")


def _join_ranked(
    conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]], filters: Filters, k: int
) -> list[tuple[int, str, float, float]]:
    """The best k of ``ranked`` (row id, score) that pass ``filters``, with their messages.

    Rows are joined 2k at a time, best first: a page needs k of them, and reading every
    ranked row's message would cost more than ranking them did.
    """
    where, params = filters.sql()
    join_sessions = " JOIN sessions s ON s.id = m.session_id" if filters.needs_sessions else ""
    out: list[tuple[int, str, float, float]] = []
    step = 2 * k
    for start in range(0, len(ranked), step):
        chunk = ranked[start : start + step]
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


def _word_hit(conn: sqlite3.Connection, term: Term) -> bool:
    if term.word is None:
        return False
    row = conn.execute(
        "SELECT 1 FROM messages_fts WHERE messages_fts MATCH ? LIMIT 1", (term.word,)
    ).fetchone()
    return row is not None


def _bounded_candidates(
    conn: sqlite3.Connection,
    index: Index,
    leaves: Sequence[tuple[str, Term]],
    filters: Filters,
    k: int,
    total: int,
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
    common: list[tuple[str, Term, float]] = []
    rare: list[str] = []
    for leaf, term in leaves:
        df = _common_df(conn, index, leaf, total)
        if df is None:
            rare.append(leaf)
        else:
            common.append((leaf, term, df))
    if not common:
        return _index_candidates(conn, index, " OR ".join(rare), filters, k, "rank")
    rows = _index_candidates(conn, index, " OR ".join(rare), filters, k, "rank") if rare else []
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
        either = " OR ".join(leaf for leaf, _, _ in common)
        newest = _index_candidates(conn, index, either, filters, k, "newest")
        rows += [r for r in newest if r[0] not in seen][: k - len(rows)]
        holders, known_from = _newest_by_term(conn, index, common, k)
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
    texts = _texts(conn, unsettled)
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
        wider = _index_candidates(conn, index, " AND ".join(narrow), filters, 2 * k, "newest")
        texts = _texts(conn, [r[0] for r in wider])
        held = [r for r in wider if _holds(texts.get(r[0], ""), checked)][:k]
        if held or len(wider) < 2 * k:
            return held
    every = " AND ".join(leaf for leaf, _, _ in common)
    return _index_candidates(conn, index, every, filters, k, "newest")


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


def _texts(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, str]:
    """Lowercased searchable text (content, tool name, tool calls) of the given rows."""
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    return {
        int(r[0]): " ".join(x for x in (text_of(r[1]), r[2], r[3]) if x).lower()
        for r in conn.execute(
            f"SELECT id, content, tool_name, tool_calls FROM messages WHERE id IN ({marks})",
            list(ids),
        )
    }


def _newest_by_term(
    conn: sqlite3.Connection, index: Index, common: Sequence[tuple[str, Term, float]], k: int
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
        found = [
            int(r[0])
            for r in conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?",
                (leaf, k),
            )
        ]
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
    fusion: Fusion = "scaled",
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
            leaves = tuple((leaf, t) for leaf, t in leaves if not _word_hit(conn, t))
            if not leaves:
                continue
            match = " OR ".join(leaf for leaf, _ in leaves)
        if index == "trigram" and not substring.positions_kept(conn):
            if compiled.leaves is not None:
                node = Node("or", tuple(Node("term", term=t) for _, t in leaves))
            else:
                assert compiled.tree is not None  # a query with a MATCH has a tree
                node = compiled.tree
            where, params = filters.sql()
            joined = " JOIN sessions s ON s.id = m.session_id" if filters.needs_sessions else ""
            rows = substring.candidates(conn, node, where, params, joined, k, order)
        elif total > COMMON_DF and leaves:
            rows = _bounded_candidates(conn, index, leaves, filters, k, total)
        elif bounded and order == "rank" and compiled.leaves is None:
            rows = _capped_candidates(conn, index, match, compiled.tree, filters, k)
        else:
            rows = _index_candidates(conn, index, match, filters, k, order)
        if not rows:
            continue
        # bm25() is negative, best most negative; rescale so this index's best is 1.0.
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
            else:
                cand.score += bm / best if best < 0 else 0.0
    cands = list(found.values())
    if order == "rank":
        cands.sort(key=lambda c: (-c.score, -c.id))
    else:
        cands.sort(key=lambda c: (c.timestamp, c.id), reverse=order == "newest")
    return cands


def _check_paging(limit: int, offset: int, sort: str | None, query: object = None) -> None:
    if query is not None and not isinstance(query, str):
        raise SessionStoreError(f"The query must be text, not {type(query).__name__}.")
    if sort not in (None, "newest", "oldest", "relevance"):
        raise SessionStoreError(
            f"Unknown sort {sort!r}: use 'newest', 'oldest', or leave it unset for relevance."
        )
    if not isinstance(limit, int) or limit < 1:
        raise SessionStoreError(f"limit must be a positive integer, got {limit!r}.")
    if not isinstance(offset, int) or offset < 0:
        raise SessionStoreError(f"offset must be a non-negative integer, got {offset!r}.")


def search_messages(
    store: Source,
    query: str | None,
    *,
    role_filter: str | Iterable[str] | None = None,
    source_filter: str | Iterable[str] | None = None,
    exclude_sources: str | Iterable[str] | None = None,
    exclude_session_ids: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    sort: str | None = None,
    limit: int = 20,
    offset: int = 0,
    include_inactive: bool = False,
    dates: bool = True,
) -> list[dict[str, Any]]:
    """Search messages; return the page of hits as dicts, best first (or by time).

    ``query`` is natural language by default (see :mod:`memstrata.query.compile`); a blank query,
    or one with nothing searchable left, returns ``[]``. ``role_filter``, ``source_filter``,
    ``exclude_sources`` and ``exclude_session_ids`` take a list or a comma-separated
    string; ``since``/``until`` are inclusive Unix timestamps; ``sort`` is ``"newest"``,
    ``"oldest"`` or None for relevance. Rewound rows (``active=0`` and not compacted) are
    hidden unless ``include_inactive``.

    Each hit has ``id, session_id, role, snippet`` (matches between ``>>>`` and ``<<<``),
    ``timestamp, tool_name, source, model, session_started, score`` (higher is better;
    1.0 is the best hit of one index) and ``context``: the previous and next message of
    the same session as ``{role, content}`` with content cut to 200 characters.
    With ``dates`` (the default) a natural-language query that names calendar dates
    ranks the messages written then higher (see :func:`rank_query`).
    """
    _check_paging(limit, offset, sort, query)
    filters = make_filters(
        role_filter=role_filter,
        source_filter=source_filter,
        exclude_sources=exclude_sources,
        exclude_session_ids=exclude_session_ids,
        since=since,
        until=until,
        include_inactive=include_inactive,
    )
    order: Literal["rank", "newest", "oldest"] = (
        "newest" if sort == "newest" else "oldest" if sort == "oldest" else "rank"
    )
    k = max(MESSAGE_CANDIDATES, offset + limit)
    with _connection(store) as conn:
        if order == "rank":
            ranked = rank_query(conn, query, filters, k=k, dates=dates, want=offset + limit)
            compiled, cands = ranked.compiled, ranked.candidates
        else:
            compiled = compile_query(query)
            if compiled.is_empty:
                return []
            cands = collect_candidates(conn, compiled, filters, k=k, order=order)
        page = cands[offset : offset + limit]
        return hit_dicts(conn, compiled, page, filters)


def search_sessions(
    store: Source,
    query: str | None,
    *,
    limit: int = 10,
    role_filter: str | Iterable[str] | None = None,
    source_filter: str | Iterable[str] | None = None,
    exclude_sources: str | Iterable[str] | None = None,
    exclude_session_ids: str | Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    include_inactive: bool = False,
    by_lineage: bool = False,
    top_hits: int = SESSION_TOP_HITS,
    hit_decay: float = SESSION_HIT_DECAY,
    dates: bool = True,
    speakers: bool = False,
    embedder: Embedder | None = None,
    subqueries: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Rank sessions for ``query``: each scores its best ``top_hits`` messages, the i-th
    weighted ``hit_decay ** i``.

    The evidence options (see :func:`rank_query`): ``dates`` (on) boosts messages written
    inside a date the question names; ``speakers`` (off) boosts transcript lines of a
    person it names; ``embedder`` adds hybrid recall from the vectors that
    :func:`memstrata.search.embedders.index_pending` stored; ``subqueries`` (from
    :func:`memstrata.search.expansion.expand_query`) add their candidates.

    With ``by_lineage`` the sessions of one lineage (a root and every descendant through
    ``parent_session_id``) are pooled and reported once, under the session holding the
    best hit, with ``lineage_root`` set. Each result has ``session_id, lineage_root,
    score, hit_count, match_message_id, matched_role, snippet, timestamp, source, model,
    title, session_started`` and ``message_ids`` (its best hits, best first).
    """
    _check_paging(limit, 0, None, query)
    if top_hits < 1:
        raise SessionStoreError(f"top_hits must be at least 1, got {top_hits!r}.")
    if not isinstance(hit_decay, int | float) or not 0 < hit_decay <= 1:
        raise SessionStoreError(
            f"hit_decay must be a number in (0, 1] (1 sums the best hits), got {hit_decay!r}."
        )
    filters = make_filters(
        role_filter=role_filter,
        source_filter=source_filter,
        exclude_sources=exclude_sources,
        exclude_session_ids=exclude_session_ids,
        since=since,
        until=until,
        include_inactive=include_inactive,
    )
    with _connection(store) as conn:
        found = rank_query(
            conn,
            query,
            filters,
            dates=dates,
            speakers=speakers,
            embedder=embedder,
            subqueries=subqueries,
            want=limit,
            by_session=True,
        )
        compiled, cands = found.compiled, found.candidates
        roots = (
            lineage_roots(conn, {c.session_id for c in cands})
            if by_lineage
            else {c.session_id: c.session_id for c in cands}
        )
        ranked = aggregate_sessions(cands, roots, top_hits=top_hits, decay=hit_decay)[:limit]
        best = [group[0] for _, group in ranked]
        hits = {h["id"]: h for h in hit_dicts(conn, compiled, best, filters, context=False)}
        titles = session_titles(conn, [c.session_id for c in best])
    return session_results(
        ranked, hits, titles, by_lineage=by_lineage, top_hits=top_hits, hit_decay=hit_decay
    )


def session_results(
    ranked: Sequence[tuple[str, Sequence[Candidate]]],
    hits: Mapping[int, dict[str, Any]],
    titles: Mapping[str, str | None],
    *,
    by_lineage: bool,
    top_hits: int,
    hit_decay: float,
) -> list[dict[str, Any]]:
    """One result per ranked group (see :func:`session_result`), for the groups whose best
    message has a hit; both backends shape their session rankings with it."""
    return [
        session_result(
            root if by_lineage else None,
            group,
            hits[group[0].id],
            titles.get(group[0].session_id),
            top_hits=top_hits,
            hit_decay=hit_decay,
        )
        for root, group in ranked
        if group[0].id in hits
    ]


def session_result(
    lineage_root: str | None,
    group: Sequence[Candidate],
    hit: Mapping[str, Any],
    title: str | None,
    *,
    top_hits: int,
    hit_decay: float,
) -> dict[str, Any]:
    """One :func:`search_sessions` result: a session's best hits (best first) and the
    hit dict of the first; the PostgreSQL store shapes its results with it too."""
    top = group[0]
    return {
        "session_id": top.session_id,
        "lineage_root": lineage_root,
        "score": round(session_score(group, top_hits, hit_decay), 6),
        "hit_count": len(group),
        "match_message_id": top.id,
        "matched_role": hit["role"],
        "snippet": hit["snippet"],
        "timestamp": hit["timestamp"],
        "source": hit["source"],
        "model": hit["model"],
        "title": title,
        "session_started": hit["session_started"],
        "message_ids": [c.id for c in group[:top_hits]],
    }


def session_score(
    group: Sequence[Candidate], top_hits: int = SESSION_TOP_HITS, decay: float = SESSION_HIT_DECAY
) -> float:
    """Score of a group of candidates (best first): its ``top_hits`` best scores, the
    i-th weighted ``decay ** i``."""
    return sum(c.score * decay**i for i, c in enumerate(group[:top_hits]))


def aggregate_sessions(
    cands: Sequence[Candidate],
    roots: dict[str, str],
    *,
    top_hits: int = SESSION_TOP_HITS,
    decay: float = SESSION_HIT_DECAY,
) -> list[tuple[str, list[Candidate]]]:
    """Group fused candidates by ``roots[session_id]`` and rank the groups.

    A group's score is :func:`session_score` of its messages; ties go to the group whose
    best message is newer. Each group's list is best first.
    """
    groups: dict[str, list[Candidate]] = {}
    for cand in sorted(cands, key=lambda c: (-c.score, -c.id)):
        groups.setdefault(roots.get(cand.session_id, cand.session_id), []).append(cand)
    return sorted(
        groups.items(),
        key=lambda kv: (-session_score(kv[1], top_hits, decay), -kv[1][0].id),
    )


@dataclass
class RankedQuery:
    """What :func:`rank_query` found: the compiled keyword query (for snippets), the
    dates it read and the candidates, best first."""

    compiled: CompiledQuery
    windows: list[DateWindow]
    candidates: list[Candidate]


# Score of a message found only because it was written on the day a date-only question
# names (keyword hits of the date's words, scaled to at most 1 per index, may add to it).
WINDOW_SCORE: Final = 1.0


def _window_candidates(
    conn: sqlite3.Connection, windows: Sequence[DateWindow], filters: Filters, k: int
) -> list[Candidate]:
    """The newest ``k`` messages written inside the windows.

    A month of no year ("in June") is that month of every year the store has messages
    from, so the newest come from the latest such month.
    """
    first = last = None
    if any(w.month is not None for w in windows):
        # Two statements: SQLite reads a lone min() or max() from the index's ends.
        first = conn.execute("SELECT min(timestamp) FROM messages").fetchone()[0]
        last = conn.execute("SELECT max(timestamp) FROM messages").fetchone()[0]
    spans = spans_of(windows, first, last)
    if not spans:
        return []
    where, params = filters.sql()
    join = " JOIN sessions s ON s.id = m.session_id" if filters.needs_sessions else ""
    inside = " OR ".join("(m.timestamp >= ? AND m.timestamp < ?)" for _ in spans)
    rows = conn.execute(
        f"SELECT m.id, m.session_id, m.timestamp FROM messages m{join} "
        f"WHERE ({inside}){where} ORDER BY m.timestamp DESC LIMIT ?",
        [*(bound for span in spans for bound in span), *params, k],
    ).fetchall()
    return [Candidate(int(r[0]), str(r[1]), float(r[2]), {}, score=WINDOW_SCORE) for r in rows]


def dated_query(
    query: str | None, *, dates: bool = True
) -> tuple[CompiledQuery, list[DateWindow], bool]:
    """The compiled query, the dates it names and whether it names nothing else.

    With ``dates``, the calendar dates of a natural query leave its keywords (they are
    evidence about when, not words to find); a query with operators or quotes is taken
    as written. A query made only of a date keeps its words (``date_only``): the search
    then also fetches what was written inside the windows. Shared by both backends.
    """
    compiled = compile_query(query)
    if not dates or compiled.explicit or not query:
        return compiled, [], False
    windows = find_dates(query)
    if not windows:
        return compiled, [], False
    stripped = compile_query(strip_dates(query, windows))
    if stripped.is_empty or (stripped.stopwords_only and is_question(query)):
        # "What did we do in July 2023?" asks about the date alone; "in July 2023" still
        # searches its words.
        return compiled, windows, True
    return stripped, windows, False


def rank_query(
    conn: sqlite3.Connection,
    query: str | None,
    filters: Filters,
    *,
    k: int = CANDIDATES,
    dates: bool = True,
    speakers: bool = False,
    embedder: Embedder | None = None,
    subqueries: Sequence[str] = (),
    want: int = 0,
    by_session: bool = False,
) -> RankedQuery:
    """Candidates of a natural-language ``query`` with every evidence option applied.

    ``dates``: calendar dates named in the query (``memstrata.query.dates``) leave the
    keyword query and boost the messages written then (a query with operators or quotes
    is taken as written). ``speakers``, ``embedder`` and ``subqueries``: see
    :mod:`memstrata.store.boosts`. With none of them this is
    :func:`collect_candidates` of the compiled query. An explicit query that finds fewer
    than ``want`` messages (sessions, with ``by_session``) adds its fallback's candidates
    below its own.
    """
    if isinstance(subqueries, str):
        raise SessionStoreError(
            "subqueries must be a list of query strings, not one string: "
            "pass [text] (expand_query returns such a list)."
        )
    compiled, windows, date_only = dated_query(query, dates=dates)
    found = (
        {c.id: c for c in collect_candidates(conn, compiled, filters, k=k)}
        if not compiled.is_empty
        else {}
    )
    fallback = compiled.fallback
    if fallback is not None and want and boosts.too_few(found.values(), want, sessions=by_session):
        # An explicit query that finds too little falls back to its words, below its hits.
        boosts.merge_fallback(found, collect_candidates(conn, fallback, filters, k=k))
    if date_only:
        # "What did we do on 7 July 2023?" names nothing but a day: what was written
        # that day is the answer, whether or not a message quotes the date.
        for cand in _window_candidates(conn, windows, filters, k):
            found.setdefault(cand.id, cand)
    if subqueries:
        extra = []
        for sub in subqueries:
            sub_compiled = compile_query(sub)
            if not sub_compiled.is_empty:
                extra.append(collect_candidates(conn, sub_compiled, filters, k=k))
        boosts.merge_subqueries(found, extra, boosts.EXPANSION_WEIGHT)
    if embedder is not None and query and query.strip():
        vectors = embedder.embed([query])
        if len(vectors) != 1 or len(vectors[0]) != embedder.dims:
            raise ConfigError(
                f"Embedder {embedder.name!r} returned no {embedder.dims}-dims vector for the "
                "query; check its `dims` and `embed()`."
            )
        from memstrata.search.embedders import vector_scores  # numpy only when hybrid is on

        # Vectors of the best keyword candidates, and of the messages of the best
        # candidate sessions (where a message the keywords missed is likely to be).
        ranked = sorted(found.values(), key=lambda c: (-c.score, -c.id))
        best = ranked[: boosts.VECTOR_RERANK]
        sessions = list(dict.fromkeys(c.session_id for c in ranked))[: boosts.VECTOR_SESSIONS]
        sims = vector_scores(
            conn,
            embedder.name,
            vectors[0],
            message_ids=[c.id for c in best],
            session_ids=sessions,
        )
        boosts.fuse_vectors(
            conn,
            found,
            sims,
            filters,
            weight=boosts.VECTOR_WEIGHT,
            floor=boosts.VECTOR_FLOOR,
            only_min=boosts.VECTOR_ONLY_MIN,
        )
    cands = list(found.values())
    boosts.boost_dates(cands, windows, boosts.DATE_BOOST)
    if speakers and query:
        boosts.boost_speakers(conn, cands, query, boosts.SPEAKER_BOOST)
    cands.sort(key=lambda c: (-c.score, -c.id))
    return RankedQuery(compiled, windows, cands)


def lineage_roots(conn: sqlite3.Connection, session_ids: Iterable[str]) -> dict[str, str]:
    """Map each session id to the root of its lineage (parent links followed, cycle-safe)."""
    ids = list(session_ids)
    if not ids:
        return {}
    roots = {sid: sid for sid in ids}
    # Most sessions have no parent: one indexed lookup settles them, and only the
    # children walk up (a search hands in up to a few hundred sessions).
    marks = ", ".join("?" for _ in ids)
    ids = [
        str(r[0])
        for r in conn.execute(
            f"SELECT id FROM sessions WHERE id IN ({marks}) AND parent_session_id IS NOT NULL",
            ids,
        )
    ]
    if not ids:
        return roots
    marks = ", ".join("?" for _ in ids)
    # UNION (not UNION ALL) drops repeated (start, ancestor) pairs, so a corrupt cycle
    # ends the walk; the depth bound is a second guard.
    sql = f"""
        WITH RECURSIVE up(start, cur, depth) AS (
            SELECT id, id, 0 FROM sessions WHERE id IN ({marks})
            UNION
            SELECT up.start, s.parent_session_id, up.depth + 1
            FROM up JOIN sessions s ON s.id = up.cur
            WHERE s.parent_session_id IS NOT NULL AND up.depth < 100
        )
        SELECT start, cur FROM up ORDER BY start, depth
    """
    for start, cur in conn.execute(sql, ids):
        roots[start] = cur
    return roots
