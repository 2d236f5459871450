"""Ranking a search, written once for every backend.

A backend finds and scores the messages matching a compiled query
(:meth:`~memstrata.store.backend.Transaction.candidates`); everything else is here: the
dates a question names leave its keywords and become evidence, an explicit query that
finds too little falls back to its words, sub-queries, vectors and speakers add their
evidence (:mod:`memstrata.store.boosts`), and the messages are grouped into sessions
(or whole lineages), each scored by its best few hits.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from memstrata.errors import ConfigError, SessionStoreError
from memstrata.query.compile import CompiledQuery, compile_query
from memstrata.query.dates import DateWindow, find_dates, is_question, spans_of, strip_dates
from memstrata.query.filters import Filters
from memstrata.query.paging import MAX_PAGE
from memstrata.query.spelling import respell
from memstrata.query.transcript import LAST_TURN_WEIGHT, Readings, readings
from memstrata.store import boosts
from memstrata.store.backend import Candidate
from memstrata.store.vectors import (
    VECTOR_RECENT,
    VECTOR_SCAN,
    calibrated,
    cosines,
    embed_queries,
    relative,
)

if TYPE_CHECKING:
    from memstrata.store.backend import Transaction
    from memstrata.store.vectors import Embedder

# How many messages each search considers before grouping. Bounded so a query's cost
# does not grow with the number of matching rows. Ranking sessions needs several hits per
# session (300, also what Hermes' session_search scans); a page of messages needs fewer.
CANDIDATES = 300
MESSAGE_CANDIDATES = 100
# Session score = its best SESSION_TOP_HITS message scores, the i-th weighted
# SESSION_HIT_DECAY**i (1, 0.6, 0.36): a session that discusses the topic in several
# messages beats one stray mention, a long session cannot win on volume alone, and the
# best message counts most. Measured on LoCoMo against plain top-n sums
# (benchmarks/results/recall.md).
SESSION_TOP_HITS = 3
SESSION_HIT_DECAY = 0.6
# A term found in more rows than this is "common": its IDF is low, and scanning all its
# rows would make a query's cost grow with the store, so a backend ranks only the newest
# of them when a rarer term can find the candidates. LoCoMo session recall is unchanged
# down to ~50 rows (benchmarks/results/recall.md); 500 keeps a wide margin above that.
COMMON_DF = 500
# A boolean query (AND, NOT) ranks only its newest BOOLEAN_RANKED matches. Higher than
# COMMON_DF: an AND of common words has no rarer term to lean on, and the preference for
# short messages that hold every word is what finds the right one among thousands.
# Measured at 1M messages (store-search-tuning.md): 2,000 found 29 of 40 planted answers
# in the first page, 1,000 found 32 at two thirds of the cost, 500 found 31.
BOOLEAN_RANKED = 1000
Key = TypeVar("Key", bound=Hashable)
# Score of a message found only because it was written on the day a date-only question
# names (keyword hits of the date's words may add to it).
WINDOW_SCORE: Final = 1.0


@dataclass
class RankedQuery:
    """What :func:`rank_query` found: the compiled keyword query (for snippets), the
    dates it read, the candidates, best first, and the typos it corrected (each
    misspelt word, lowercased, and the word searched instead)."""

    compiled: CompiledQuery
    windows: list[DateWindow]
    candidates: list[Candidate]
    corrections: dict[str, str] = field(default_factory=dict)


def check_paging(limit: int, offset: int, sort: str | None, query: object = None) -> None:
    """Refuse a query that is not text, an unknown sort and a bad page, saying the fix."""
    if query is not None and not isinstance(query, str):
        raise SessionStoreError(f"The query must be text, not {type(query).__name__}.")
    if sort not in (None, "newest", "oldest", "relevance"):
        raise SessionStoreError(
            f"Unknown sort {sort!r}: use 'newest', 'oldest', or leave it unset for relevance."
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise SessionStoreError(f"limit must be an integer from 1 to {MAX_PAGE:,}, got {limit!r}.")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_PAGE:
        raise SessionStoreError(
            f"offset must be an integer from 0 to {MAX_PAGE:,}, got {offset!r}."
        )


def check_session_scoring(top_hits: int, hit_decay: float) -> None:
    """Refuse a session score that would not rank (see :func:`session_score`)."""
    if isinstance(top_hits, bool) or not isinstance(top_hits, int) or top_hits < 1:
        raise SessionStoreError(f"top_hits must be at least 1, got {top_hits!r}.")
    if not isinstance(hit_decay, int | float) or not 0 < hit_decay <= 1:
        raise SessionStoreError(
            f"hit_decay must be a number in (0, 1] (1 sums the best hits), got {hit_decay!r}."
        )


def dated_query(
    query: str | None, *, dates: bool = True
) -> tuple[CompiledQuery, list[DateWindow], bool]:
    """The compiled query, the dates it names and whether it names nothing else.

    With ``dates``, the calendar dates of a natural query leave its keywords (they are
    evidence about when, not words to find); a query with operators or quotes is taken
    as written. A query made only of a date keeps its words (``date_only``): the search
    then also fetches what was written inside the windows.
    """
    compiled = compile_query(query)
    if not dates or compiled.explicit or not query:
        return compiled, [], False
    windows = find_dates(query)
    if not windows:
        return compiled, [], False
    stripped = compile_query(strip_dates(query, windows))
    # What the question says besides its dates, the literal ones too ("yesterday" stays
    # a keyword, but "what did we do yesterday?" still asks about the day alone).
    bare = stripped
    if any(w.literal for w in windows):
        bare = compile_query(strip_dates(query, windows, every=True))
    if bare.is_empty or (bare.stopwords_only and is_question(query)):
        # "What did we do in July 2023?" asks about the date alone; "in July 2023" still
        # searches its words.
        return compiled, windows, True
    return stripped, windows, False


def rank_query(
    tx: Transaction,
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
    typos: bool = True,
) -> RankedQuery:
    """Candidates of a natural-language ``query`` with every evidence option applied.

    ``dates``: calendar dates named in the query (:mod:`memstrata.query.dates`) leave the
    keyword query and boost the messages written then (a query with operators or quotes
    is taken as written). A transcript-shaped query is also read by its last turn
    (:mod:`memstrata.query.transcript`), keyword scores and cosines alike. ``speakers``,
    ``embedder`` and ``subqueries``: see :mod:`memstrata.store.boosts`. An explicit query
    that finds fewer than ``want`` messages (sessions, with ``by_session``) adds its
    fallback's candidates below its own. With ``typos``, a natural query's misspelt
    words that no message holds search the English word one edit away that some message
    does (:mod:`memstrata.query.spelling`); they are in the result's ``corrections``.
    """
    if isinstance(subqueries, str):
        raise SessionStoreError(
            "subqueries must be a list of query strings, not one string: "
            "pass [text] (expand_query returns such a list)."
        )
    query, fixes = respell(query, tx.held_words) if typos else (query, {})
    # A transcript-shaped query is read as a whole (its end, when long) and again by its
    # last turn (query.transcript).
    read = readings(query)
    compiled, windows, date_only = dated_query(query if read is None else read.whole, dates=dates)
    first = k
    alone = read is None and not (by_session or speakers or embedder is not None or subqueries)
    if want and alone and compiled.lone_phrase and tx.phrase_pages:
        # A page of messages for one quoted phrase: the backend ranks it in page order,
        # so the page is all it needs to read (its best row, the score's scale, is on
        # it). Sessions, vectors and boosts need the wider set.
        first = min(k, want)
    found = (
        {c.id: c for c in tx.candidates(compiled, filters, first, "rank")}
        if not compiled.is_empty
        else {}
    )
    if read is not None:
        _mix_last_turn(tx, found, read, filters, k, dates=dates)
    fallback = compiled.fallback
    if fallback is not None and want and boosts.too_few(found.values(), want, sessions=by_session):
        # An explicit query that finds too little falls back to its words, below its hits.
        boosts.merge_fallback(found, tx.candidates(fallback, filters, k, "rank"))
    if date_only:
        # "What did we do on 7 July 2023?" names nothing but a day: what was written
        # that day is the answer, whether or not a message quotes the date.
        for cand in _written_in(tx, windows, filters, k):
            found.setdefault(cand.id, cand)
    if subqueries:
        extra = []
        for sub in subqueries:
            sub_compiled = compile_query(sub)
            if not sub_compiled.is_empty:
                extra.append(tx.candidates(sub_compiled, filters, k, "rank"))
        boosts.merge_subqueries(found, extra, boosts.EXPANSION_WEIGHT)
    if embedder is not None and query and query.strip():
        _add_vectors(tx, found, embedder, query, filters, read)
    cands = list(found.values())
    boosts.boost_dates(cands, windows, boosts.DATE_BOOST)
    if speakers and query:
        boosts.boost_speakers(tx.texts([c.id for c in cands]), cands, query, boosts.SPEAKER_BOOST)
    cands.sort(key=lambda c: (-c.score, -c.id))
    return RankedQuery(compiled, windows, cands, fixes)


def _mix_last_turn(
    tx: Transaction,
    found: dict[int, Candidate],
    read: Readings,
    filters: Filters,
    k: int,
    *,
    dates: bool,
) -> None:
    """Mix into ``found`` (the whole query's candidates) the candidates of its last turn,
    each reading scaled to its best 1.0 (:func:`memstrata.store.boosts.mix_readings`)."""
    compiled, _, _ = dated_query(read.last_turn, dates=dates)
    if compiled.is_empty:
        return
    last = {c.id: c for c in tx.candidates(compiled, filters, k, "rank")}
    if not last:
        return
    mixed = boosts.mix_readings(
        _scaled({mid: c.score for mid, c in found.items()}),
        _scaled({mid: c.score for mid, c in last.items()}),
        LAST_TURN_WEIGHT,
    )
    for mid, cand in last.items():
        found.setdefault(mid, cand)
    for mid, score in mixed.items():
        found[mid].score = score


def _scaled(scores: Mapping[int, float]) -> dict[int, float]:
    """``scores`` divided by the best of them (unchanged when none is above zero)."""
    top = max(scores.values(), default=0.0)
    return {key: score / top for key, score in scores.items()} if top > 0 else dict(scores)


def _written_in(
    tx: Transaction, windows: Sequence[DateWindow], filters: Filters, k: int
) -> list[Candidate]:
    """The newest ``k`` messages written inside the windows, scored :data:`WINDOW_SCORE`.

    A month of no year ("in June") is that month of every year the store has messages
    from, so the newest come from the latest such month.
    """
    first = last = None
    if any(w.month is not None for w in windows):
        first, last = tx.timestamp_range()
    spans = spans_of(windows, first, last)
    if not spans:
        return []
    cands = tx.written_between(spans, filters, k)
    for cand in cands:
        cand.score = WINDOW_SCORE
    return cands


def _add_vectors(
    tx: Transaction,
    found: dict[int, Candidate],
    embedder: Embedder,
    query: str,
    filters: Filters,
    read: Readings | None = None,
) -> None:
    texts = [query] if read is None else [read.whole, read.last_turn]
    vectors = embed_queries(embedder, texts)
    if len(vectors) != len(texts) or any(len(v) != embedder.dims for v in vectors):
        raise ConfigError(
            f"Embedder {embedder.name!r} returned no {embedder.dims}-dims vector for the "
            "query; check its `dims` and `embed()`."
        )
    # Vectors of the best keyword candidates, and of the messages of the best candidate
    # sessions (where a message the keywords missed is likely to be).
    ranked = sorted(found.values(), key=lambda c: (-c.score, -c.id))
    best = ranked[: boosts.VECTOR_RERANK]
    sessions = list(dict.fromkeys(c.session_id for c in ranked))[: boosts.VECTOR_SESSIONS]
    ids = [c.id for c in best]
    blobs: dict[int, bytes] | None = None

    def cosines_of(vector: Sequence[float]) -> dict[int, float]:
        # The database's own cosines when it has a vector index, else the stored vectors
        # (read once for both readings of a transcript).
        nonlocal blobs
        server = tx.server_cosines(embedder.name, vector, ids)
        if server is not None:
            return server
        if blobs is None:
            blobs = stored_vectors(tx, embedder.name, ids, sessions, VECTOR_SCAN, VECTOR_RECENT)
        return cosines(blobs, vector)

    raw = cosines_of(vectors[0])
    if read is not None:
        # A transcript's cosines mix its two readings as its keyword scores do.
        raw = boosts.mix_readings(raw, cosines_of(vectors[1]), LAST_TURN_WEIGHT)
    # The gate is absolute: a message the keywords missed joins only when it is close to
    # the question in meaning (on the embedder's own scale, see calibrated).
    gate = calibrated(embedder, raw)
    newcomers = [m for m, cos in gate.items() if m not in found and cos >= boosts.VECTOR_ONLY_MIN]
    passing = tx.passing(newcomers, filters) if newcomers else []
    if boosts.VECTOR_SCALE == "relative":
        fused = boosts.hybrid_scores(
            {mid: cand.score for mid, cand in found.items()},
            relative(raw),
            [cand.id for cand in passing],
            weight=boosts.VECTOR_WEIGHT,
        )
        for cand in passing:
            found.setdefault(cand.id, cand)
        for mid, score in fused.items():
            found[mid].score = score
        return
    boosts.fuse_vectors(
        found,
        gate,
        passing,
        weight=boosts.VECTOR_WEIGHT,
        floor=boosts.VECTOR_FLOOR,
        only_min=boosts.VECTOR_ONLY_MIN,
    )


def stored_vectors(
    tx: Transaction,
    model: str,
    message_ids: Sequence[int],
    session_ids: Sequence[str],
    scan: int,
    recent: int,
) -> dict[int, bytes]:
    """The vectors of ``model`` a hybrid search compares with the query: of these
    messages, of the ``scan`` newest vectored messages of these sessions and of the
    ``recent`` newest of the store (where a message the keywords missed may be)."""
    blobs: dict[int, bytes] = {}
    if recent > 0:
        blobs.update(tx.recent_vectors(model, recent))
    if scan > 0 and session_ids:
        blobs.update(tx.session_vectors(model, session_ids, scan))
    missing = sorted({int(i) for i in message_ids} - set(blobs))
    if missing:
        blobs.update(tx.vectors_of(model, missing))
    return blobs


def fuse_evidence(matches: Iterable[tuple[Key, float]]) -> dict[Key, float]:
    """Fusion by evidence, the one rule every keyword search fuses its indexes with (the
    session stores' and the facts store's): ``matches`` holds a (row, BM25) pair per row
    and index that found it, BM25 with FTS5's sign (negative, best lowest); each row's
    BM25 is negated and summed over the indexes, then the query scaled once so its best row
    scores 1.0 (0.0 for every row when nothing scored above zero).

    The indexes hold disjoint evidence (the bigram index CJK text, the trigram index
    only terms the word index does not know), so the sum counts each matched term once,
    by its rarity in the index that holds it: ten rare Chinese bigrams outweigh one
    English name. Scaling each index to its own best row would make one word of one
    index weigh as much as all the evidence of another.
    """
    scores: dict[Key, float] = {}
    for key, bm25 in matches:
        scores[key] = scores.get(key, 0.0) - bm25
    top = max(scores.values(), default=0.0)
    return {key: score / top if top > 0 else 0.0 for key, score in scores.items()}


def session_score(
    group: Sequence[Candidate], top_hits: int = SESSION_TOP_HITS, decay: float = SESSION_HIT_DECAY
) -> float:
    """Score of a group of candidates (best first): its ``top_hits`` best scores, the
    i-th weighted ``decay ** i``."""
    return sum(c.score * decay**i for i, c in enumerate(group[:top_hits]))


def aggregate_sessions(
    cands: Sequence[Candidate],
    roots: Mapping[str, str],
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


def session_results(
    ranked: Sequence[tuple[str, Sequence[Candidate]]],
    hits: Mapping[int, Mapping[str, Any]],
    titles: Mapping[str, str | None],
    *,
    by_lineage: bool,
    top_hits: int,
    hit_decay: float,
) -> list[dict[str, Any]]:
    """One ``search_sessions`` result per ranked group whose best message has a hit: its
    best hits (best first) and the hit dict of the first."""
    out = []
    for root, group in ranked:
        top = group[0]
        hit = hits.get(top.id)
        if hit is None:
            continue
        out.append(
            {
                "session_id": top.session_id,
                "lineage_root": root if by_lineage else None,
                "score": round(session_score(group, top_hits, hit_decay), 6),
                "hit_count": len(group),
                "match_message_id": top.id,
                "matched_role": hit["role"],
                "snippet": hit["snippet"],
                "timestamp": hit["timestamp"],
                "source": hit["source"],
                "model": hit["model"],
                "title": titles.get(top.session_id),
                "session_started": hit["session_started"],
                "message_ids": [c.id for c in group[:top_hits]],
            }
        )
    return out
