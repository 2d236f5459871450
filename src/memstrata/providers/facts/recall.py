"""Finding facts: explicit search (tools, CLI) and gated recall (per-turn prefetch).

Both compile the query with :func:`memstrata.query.compile.compile_query`, the compiler the
session search uses (Porter-stemmed word index, its English stopwords), so a query never
raises and CJK words reach the bigram index.

* :func:`search_rows` is for someone who asked: every match counts. The indexes are
  fused by the session search's rule (:func:`memstrata.store.rank.fuse_evidence`): each
  fact's BM25 summed over the indexes and the query scaled once (best fact 1.0), so a
  term counts by its rarity, whichever index found it.
* :func:`recall_rows` is for a chat message nobody wrote as a query, so it must stay
  silent when nothing is relevant (an injected list of unrelated facts is noise the
  model pays for and may act on). A gate (:func:`admitted`) decides whether the message
  is answered at all: some fact must hold enough of the *significant* terms (see
  :func:`significant`) of one of its clauses (``RECALL_MIN_COVERAGE``), and only facts
  holding such a term are admitted. They are ranked as a search for the message's words
  ranks them (same compile, same fusion; the chat words of ``RECALL_STOPWORDS`` dropped
  too): the gate decides who may speak, never the order. BM25 itself cannot gate: FTS5
  clamps the IDF of a term found in half the rows or more to almost zero, so in a store
  of three facts every score is about 1e-6 and no threshold tells a hit from a miss.

Optional embeddings are fused on top of both by :mod:`memstrata.providers.facts.vectors`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from memstrata.query.cjk import has_cjk
from memstrata.query.compile import STOPWORDS, CompiledQuery, Index, Term, compile_query
from memstrata.query.transcript import LAST_TURN_WEIGHT, readings
from memstrata.store.boosts import mix_readings
from memstrata.store.rank import fuse_evidence

if TYPE_CHECKING:
    from memstrata.providers.facts.backend import FactTransaction
    from memstrata.providers.facts.contract import FactRow

# The three keyword indexes of a facts store, the session store's three.
INDEXES: Final[tuple[Index, ...]] = ("word", "trigram", "cjk")

# Words left out of an explicit search: the session search's list. (Measured in
# benchmarks/facts_recall.py: without it, "what"/"did"/"the" flood BM25.)
SEARCH_STOPWORDS: frozenset[str] = STOPWORDS
# Indexes an explicit search fuses (the word index alone is an ablation of the benchmark).
SEARCH_INDEXES: tuple[Index, ...] = INDEXES
# A fact whose subject the query names as a word ("What did Melanie paint?" and a fact
# of subject "melanie") has its score multiplied by 1 + SUBJECT_BOOST, in search and
# recall: a name appears in the facts of everyone who talks about that person, the
# subject says whom the fact is about. +1.5 points R@5 and +5.7 on multi-hop questions
# in benchmarks/results/facts_recall.md; a boost, never a filter.
SUBJECT_BOOST: float = 0.5

# Each index contributes at most this many rows before fusion, so a query's cost does
# not grow with the number of facts that match it.
CANDIDATES: Final = 200
# A term found in more than COMMON_SHARE of the live facts (and in more than
# COMMON_MIN_DF of them) tells facts apart no better than a stopword, so a fact matched
# only by such terms is not recalled. Below COMMON_MIN_DF every term counts: in a young
# store, "name" in the one fact holding a name is exactly what should come back.
COMMON_SHARE: Final = 0.5
COMMON_MIN_DF: Final = 3
# A user message can be long (pasted code, logs); recall reads its start only. Each
# term costs one indexed lookup per index that sees it.
MAX_RECALL_TERMS: Final = 256
MAX_RECALL_QUERY_CHARS: Final = 1000
# A fact is recalled only when it holds at least this share of the message's significant
# terms (terms too common to gate count neither way; a CJK bigram counts only when some
# fact holds it). One incidental word of a longer unrelated request ("write a haiku
# about autumn leaves" against "painted a lake in autumn": 1 of 3) stays below it; a
# question naming two of its fact's words among four passes. Terms are counted, not
# IDF-weighted: in a young store of a few facts every held term has a tiny IDF next to
# the ones it lacks. Measured in benchmarks/results/facts_recall.md.
RECALL_MIN_COVERAGE: float = 0.34
# Words that carry no topic in a chat message, on top of query.STOPWORDS. "user" is
# here because mirrored profile entries read "User prefers ...": it matches them all.
_CHATTER = """
    user ok okay thanks thank hi hello hey yes yeah no sure great cool nice fine good
    tell know think want need help make go let lets helpful please again continue try
    today morning bye remind explain mean means suggest recommend give write show find
    list fix tonight tomorrow
"""
RECALL_STOPWORDS: Final = STOPWORDS | frozenset(_CHATTER.split())
# CJK bigrams of function words, which a long Chinese sentence always contains.
_CJK_FUNCTION_BIGRAMS = """
    我们 你们 他们 她们 一个 这个 那个 什么 怎么 可以 没有 就是 还是 不是 我的 你的
    的是 是的 一下 现在 因为 所以 但是 如果 这样 那样 一些 自己 知道 觉得 帮我 请问
"""
CJK_STOP_BIGRAMS: Final = frozenset(_CJK_FUNCTION_BIGRAMS.split())
_ENDINGS: Final = ("ing", "s", "ed", "ful")


def natural_text(message: str) -> str:
    """``message`` with FTS operator syntax neutralised, so it compiles as plain words.

    A chat message is not a search expression: its quotes, ``*`` and capitalised
    ``AND``/``OR``/``NOT`` are prose, and recall ORs its words like any other.
    """
    text = message[:MAX_RECALL_QUERY_CHARS].replace('"', " ").replace("*", " ")
    return re.sub(r"\b(AND|OR|NOT)\b", lambda m: m.group().lower(), text)


def significant(term: str) -> bool:
    """True when ``term`` may admit a fact into recall (before the commonness check)."""
    if has_cjk(term):
        return term not in CJK_STOP_BIGRAMS
    word = term.lower()
    if sum(ch.isalnum() for ch in word) < 2 or word in RECALL_STOPWORDS:
        return False
    # The index stems ("going" finds "go"), so an inflected chat word is chat too.
    return not any(word.endswith(end) and word[: -len(end)] in RECALL_STOPWORDS for end in _ENDINGS)


def compile_search(query: str) -> CompiledQuery:
    """``query`` compiled for an explicit search (the session search's stopwords)."""
    return compile_query(query, stopwords=SEARCH_STOPWORDS)


def search_scores(
    tx: FactTransaction,
    compiled: CompiledQuery,
    *,
    category: str | None = None,
    subject: str | None = None,
) -> tuple[dict[int, float], dict[int, FactRow]]:
    """Every live candidate of ``compiled`` (at most CANDIDATES per index) with its fused
    score, and its row."""
    indexes = [i for i in SEARCH_INDEXES if compiled.match.get(i) is not None]
    scores, rows = tx.keyword_scores(
        compiled, indexes=indexes, category=category, subject=subject, limit=CANDIDATES
    )
    # The session search's fusion (one rule, memstrata.store.rank.fuse_evidence: the
    # backend sums each fact's BM25 over the indexes, the query is scaled once, best
    # fact 1.0); a fact whose terms are in most rows (an IDF clamped to ~0) still counts.
    fused = fuse_evidence((fact_id, -score) for fact_id, score in scores.items())
    scores = {fact_id: max(score, 1e-6) for fact_id, score in fused.items()}
    boost_subjects(tx, scores, compiled.text, rows)
    return scores, rows


def boost_subjects(
    tx: FactTransaction,
    scores: dict[int, float],
    text: str,
    rows: Mapping[int, FactRow] | None = None,
) -> int:
    """Multiply by ``1 + SUBJECT_BOOST`` the score of each fact whose subject ``text``
    names as a word; return how many were boosted."""
    if not scores or SUBJECT_BOOST == 0:
        return 0
    words = {w.lower() for w in re.findall(r"\w+", text[:MAX_RECALL_QUERY_CHARS])}
    subjects = {s for s in tx.live_subjects() if s in words}
    if not subjects:
        return 0
    known = dict(rows) if rows is not None else {}
    missing = [i for i in scores if i not in known]
    if missing:
        known.update(tx.live_rows(missing, category=None, subject=None))
    boosted = 0
    for fact_id in scores:
        row = known.get(fact_id)
        if row is not None and row["subject"] in subjects:
            scores[fact_id] *= 1 + SUBJECT_BOOST
            boosted += 1
    return boosted


def rank(scores: dict[int, float], rows: Mapping[int, FactRow], limit: int) -> list[int]:
    """Ids best first; ties go to the most recently updated fact, then the newest id."""
    ranked = sorted(scores, key=lambda i: (-scores[i], -rows[i]["updated_at"], -i))
    return ranked[: max(0, limit)]


def live_rows(
    tx: FactTransaction,
    ids: Iterable[int],
    *,
    category: str | None = None,
    subject: str | None = None,
    categories: Sequence[str] | None = None,
) -> dict[int, FactRow]:
    """The live rows among ``ids`` that pass the filters."""
    wanted = list(dict.fromkeys(int(i) for i in ids))
    found = tx.live_rows(wanted, category=category, subject=subject)
    if categories is None:
        return found
    return {i: r for i, r in found.items() if r["category"] in categories}


def search_rows(
    tx: FactTransaction,
    compiled: CompiledQuery,
    *,
    category: str | None = None,
    subject: str | None = None,
    limit: int = 10,
) -> list[tuple[FactRow, float]]:
    """Live fact rows matching ``compiled``, best first, each with its fused score."""
    scores, rows = search_scores(tx, compiled, category=category, subject=subject)
    return [(rows[i], scores[i]) for i in rank(scores, rows, limit)]


def _recall_terms(compiled: CompiledQuery) -> dict[str, list[tuple[Index, str, Term]]]:
    """Each query term (by text) with its MATCH expression in every index that sees it."""
    terms: dict[str, list[tuple[Index, str, Term]]] = {}
    for index, pairs in (compiled.leaves or {}).items():
        for expression, term in pairs:
            if term.text in terms or len(terms) < MAX_RECALL_TERMS:
                terms.setdefault(term.text, []).append((index, expression, term))
    return terms


# A message is gated clause by clause: a line or a sentence (ended by 。！？；!?; or a
# full stop before a space) is what one significant-term share is taken of.
_CLAUSE_END = re.compile(r"[\n。！？；!?;]+|\.(?:\s|$)")


def clauses(message: str) -> list[str]:
    """The lines and sentences of ``message`` (at most its first
    MAX_RECALL_QUERY_CHARS characters), the empty ones left out."""
    return [c.strip() for c in _CLAUSE_END.split(message[:MAX_RECALL_QUERY_CHARS]) if c.strip()]


def admitted(tx: FactTransaction, message: str, *, skip: Iterable[int] = ()) -> set[int]:
    """The gate of recall: the live facts (``skip`` left out) that may answer ``message``,
    or an empty set when it is not answered.

    A term of the message counts when it is significant (:func:`significant`), found in
    at most ``max(COMMON_MIN_DF, COMMON_SHARE * live facts)`` facts, and (a CJK bigram)
    found at all. The message is answered when some fact holds at least
    RECALL_MIN_COVERAGE of the counted terms of one of its clauses (:func:`clauses`);
    then every fact holding a counted term is admitted. The share is taken per clause,
    not over the whole message: a message of many sentences (a pasted dialogue, a long
    request) is about what each of them is about, and over its whole length no fact
    could hold a third of its terms. At most MAX_RECALL_TERMS distinct terms are looked
    up, in one round trip.
    """
    per_clause: list[list[str]] = []
    probes: dict[str, list[tuple[Index, str, Term]]] = {}
    for clause in clauses(natural_text(message)):
        texts = []
        for text, found in _recall_terms(compile_query(clause, stopwords=RECALL_STOPWORDS)).items():
            if not significant(text):
                continue
            if text not in probes:
                if len(probes) >= MAX_RECALL_TERMS:
                    break
                probes[text] = found
            texts.append(text)
        per_clause.append(texts)
    if not probes:
        return set()
    # Retired facts stay indexed (a status change never touches the indexes), so they
    # are subtracted here: one indexed read, cheaper than joining every posting.
    retired = tx.retired_ids()
    skipped = retired | {int(i) for i in skip}
    common = max(COMMON_MIN_DF, COMMON_SHARE * tx.live_count())
    found_ids = iter(tx.terms_ids([probe for found in probes.values() for probe in found]))
    holders: dict[str, set[int]] = {}  # the counted terms and the live facts holding them
    for text, found in probes.items():
        ids: set[int] = set()
        for _ in found:
            ids.update(next(found_ids))
        ids -= retired
        # Overlapping CJK bigrams straddle word boundaries ("天喝" in 今天喝), so one the
        # store lacks says nothing about the message's topic: only present ones count.
        if len(ids) <= common and (ids or not has_cjk(text)):
            holders[text] = ids
    answered = False
    for texts in per_clause:
        counted = [t for t in texts if t in holders]
        shared: dict[int, int] = {}
        for text in counted:
            for fact_id in holders[text] - skipped:
                shared[fact_id] = shared.get(fact_id, 0) + 1
        if counted and max(shared.values(), default=0) >= RECALL_MIN_COVERAGE * len(counted):
            answered = True
            break
    if not answered:
        return set()
    return set().union(*holders.values()) - skipped


def recall_scores(
    tx: FactTransaction,
    message: str,
    *,
    exclude: Iterable[int] = (),
) -> dict[int, float]:
    """The facts recall returns for ``message``, each with its score; ``{}`` when the gate
    (:func:`admitted`) refuses the message.

    The admitted facts are ranked exactly as :func:`search_scores` ranks a search for the
    same words (one compile, one fusion; a transcript-shaped message read twice, as a
    whole and by its last turn, :mod:`memstrata.query.transcript`): the gate decides who
    may speak, never the order.
    """
    compiled = compile_query(natural_text(message), stopwords=RECALL_STOPWORDS)
    if compiled.is_empty:
        return {}
    allowed = admitted(tx, message, skip=exclude)
    if not allowed:
        return {}
    scores, _ = search_scores(tx, compiled)
    read = readings(message)
    if read is not None:
        last = compile_query(natural_text(read.last_turn), stopwords=RECALL_STOPWORDS)
        if not last.is_empty:
            scores = mix_readings(scores, search_scores(tx, last)[0], LAST_TURN_WEIGHT)
    return {i: score for i, score in scores.items() if i in allowed}


def recall_rows(
    tx: FactTransaction,
    message: str,
    *,
    limit: int = 5,
    exclude: Iterable[int] = (),
    categories: Sequence[str] | None = None,
) -> list[tuple[FactRow, float]]:
    """Live fact rows relevant to a chat message, best first; ``[]`` when none is.

    The message is answered only when some fact holds at least ``RECALL_MIN_COVERAGE``
    of the significant terms of one of its clauses, each found in at most
    ``max(COMMON_MIN_DF, COMMON_SHARE * live facts)`` facts (:func:`admitted`). Then its
    facts are ranked as :func:`search_rows` ranks them (see :func:`recall_scores`); ties
    go to the newest fact (highest id).
    """
    return rows_by_score(tx, recall_scores(tx, message, exclude=exclude), limit, categories)


def rows_by_score(
    tx: FactTransaction,
    matched: dict[int, float],
    limit: int,
    categories: Sequence[str] | None = None,
) -> list[tuple[FactRow, float]]:
    """The best ``limit`` live rows of ``matched`` (id -> score) in ``categories``."""
    if not matched:
        return []
    # Ids grow with time and a fact is never edited in place, so the id orders live
    # facts by age. Only the best few rows are read: a common query term can admit
    # thousands of facts in a large store.
    ranked = sorted(matched, key=lambda i: (-matched[i], -i))
    window = ranked[: max(limit * 20, 100)] if categories is not None else ranked[:limit]
    rows = live_rows(tx, window, categories=categories)
    return [(rows[i], matched[i]) for i in window if i in rows][: max(0, limit)]
