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
  :func:`significant`) of one of its clauses (``RECALL_MIN_COVERAGE``). An answered
  message is ranked as a search for its words is (same compile, same fusion; only the
  chat words of ``RECALL_STOPWORDS`` are dropped too): the gate decides whether to
  speak, never the order. BM25 itself cannot gate: FTS5 clamps the IDF of a term found
  in half the rows or more to almost zero, so in a store of three facts every score is
  about 1e-6 and no threshold tells a hit from a miss.

Optional embeddings are fused on top of both by :mod:`memstrata.providers.facts.vectors`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from memstrata.providers.facts.schema import FTS_TABLES
from memstrata.query.cjk import has_cjk
from memstrata.query.compile import STOPWORDS, CompiledQuery, Index, compile_query
from memstrata.store.rank import fuse_evidence

# Words left out of an explicit search: the session search's list. (Measured in
# benchmarks/facts_recall.py: without it, "what"/"did"/"the" flood BM25.)
SEARCH_STOPWORDS: frozenset[str] = STOPWORDS
# Indexes an explicit search fuses (the word index alone is an ablation of the benchmark).
SEARCH_INDEXES: tuple[Index, ...] = tuple(FTS_TABLES)
# A fact whose subject the query names as a word ("What did Melanie paint?" and a fact
# of subject "melanie") has its score multiplied by 1 + SUBJECT_BOOST, in search and
# recall: a name appears in the facts of everyone who talks about that person, the
# subject says whom the fact is about. +1.5 points R@5 and +5.7 on multi-hop questions
# in benchmarks/results/facts_recall.md; a boost, never a filter.
SUBJECT_BOOST: float = 0.5

# Each index contributes at most this many rows before fusion, so a query's cost does
# not grow with the number of facts that match it.
CANDIDATES: Final = 200
# Column weights of the word and trigram indexes (content, key, value): a slot's key and
# value are repeated in its content, so they count half to avoid scoring them twice.
_WEIGHTS: Final = ", 1.0, 0.5, 0.5"
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


def filters(
    *,
    category: str | None = None,
    subject: str | None = None,
    status: str | None = None,
    source: str | None = None,
) -> tuple[str, list[Any]]:
    """A ``WHERE`` clause over ``facts f`` and its parameters ("" when unfiltered)."""
    clauses: list[str] = []
    params: list[Any] = []
    pairs = (("category", category), ("subject", subject), ("status", status), ("source", source))
    for column, value in pairs:
        if value is not None:
            clauses.append(f"f.{column} = ?")
            params.append(value)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def compile_search(query: str) -> CompiledQuery:
    """``query`` compiled for an explicit search (the session search's stopwords)."""
    return compile_query(query, stopwords=SEARCH_STOPWORDS)


def search_scores(
    conn: sqlite3.Connection,
    compiled: CompiledQuery,
    *,
    category: str | None = None,
    subject: str | None = None,
) -> tuple[dict[int, float], dict[int, sqlite3.Row]]:
    """Every live candidate of ``compiled`` (at most CANDIDATES per index) with its fused
    score, and its row."""
    where, params = filters(category=category, subject=subject, status="live")
    matches: list[tuple[int, float]] = []
    rows: dict[int, sqlite3.Row] = {}
    for index, table in FTS_TABLES.items():
        expression = compiled.match.get(index)
        if expression is None or index not in SEARCH_INDEXES:
            continue
        weights = "" if index == "cjk" else _WEIGHTS
        found = conn.execute(
            f"SELECT f.*, bm25({table}{weights}) AS score_ FROM {table} "
            f"CROSS JOIN facts f ON f.id = {table}.rowid {where} AND {table} MATCH ? "
            "ORDER BY score_ LIMIT ?",
            [*params, expression, CANDIDATES],
        ).fetchall()
        for r in found:
            matches.append((int(r["id"]), min(float(r["score_"]), 0.0)))
            rows[int(r["id"])] = r
    # The session search's fusion (one rule, memstrata.store.rank.fuse_evidence); a fact
    # whose terms are in most rows (an IDF clamped to ~0) still counts as found.
    scores = {i: max(score, 1e-6) for i, score in fuse_evidence(matches).items()}
    boost_subjects(conn, scores, compiled.text)
    return scores, rows


def boost_subjects(conn: sqlite3.Connection, scores: dict[int, float], text: str) -> int:
    """Multiply by ``1 + SUBJECT_BOOST`` the score of each fact whose subject ``text``
    names as a word; return how many were boosted."""
    if not scores or SUBJECT_BOOST == 0:
        return 0
    words = {w.lower() for w in re.findall(r"\w+", text[:MAX_RECALL_QUERY_CHARS])}
    subjects = [
        str(r[0])
        for r in conn.execute("SELECT DISTINCT subject FROM facts WHERE status = 'live'")
        if str(r[0]) in words
    ]
    if not subjects:
        return 0
    boosted = 0
    ids = list(scores)
    marks = ", ".join("?" for _ in subjects)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for (fact_id,) in conn.execute(
            f"SELECT id FROM facts WHERE subject IN ({marks}) "
            f"AND id IN ({', '.join('?' for _ in chunk)})",
            [*subjects, *chunk],
        ):
            scores[int(fact_id)] *= 1 + SUBJECT_BOOST
            boosted += 1
    return boosted


def rank(scores: dict[int, float], rows: dict[int, sqlite3.Row], limit: int) -> list[int]:
    """Ids best first; ties go to the most recently updated fact, then the newest id."""
    ranked = sorted(scores, key=lambda i: (-scores[i], -rows[i]["updated_at"], -i))
    return ranked[: max(0, limit)]


def live_rows(
    conn: sqlite3.Connection,
    ids: Iterable[int],
    *,
    category: str | None = None,
    subject: str | None = None,
    categories: Sequence[str] | None = None,
) -> dict[int, sqlite3.Row]:
    """The live rows among ``ids`` that pass the filters."""
    wanted = list(dict.fromkeys(int(i) for i in ids))
    where, params = filters(category=category, subject=subject, status="live")
    out: dict[int, sqlite3.Row] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in conn.execute(
            f"SELECT * FROM facts f {where} AND f.id IN ({marks})", [*params, *chunk]
        ):
            if categories is None or r["category"] in categories:
                out[int(r["id"])] = r
    return out


def search_rows(
    conn: sqlite3.Connection,
    compiled: CompiledQuery,
    *,
    category: str | None = None,
    subject: str | None = None,
    limit: int = 10,
) -> list[tuple[sqlite3.Row, float]]:
    """Live fact rows matching ``compiled``, best first, each with its fused score."""
    scores, rows = search_scores(conn, compiled, category=category, subject=subject)
    return [(rows[i], scores[i]) for i in rank(scores, rows, limit)]


def _recall_terms(compiled: CompiledQuery) -> dict[str, list[tuple[Index, str]]]:
    """Each query term (by text) with its MATCH expression in every index that sees it."""
    terms: dict[str, list[tuple[Index, str]]] = {}
    for index, pairs in (compiled.leaves or {}).items():
        for expression, term in pairs:
            if term.text in terms or len(terms) < MAX_RECALL_TERMS:
                terms.setdefault(term.text, []).append((index, expression))
    return terms


# A message is gated clause by clause: a line or a sentence (ended by 。！？；!?; or a
# full stop before a space) is what one significant-term share is taken of.
_CLAUSE_END = re.compile(r"[\n。！？；!?;]+|\.(?:\s|$)")


def clauses(message: str) -> list[str]:
    """The lines and sentences of ``message`` (at most its first
    MAX_RECALL_QUERY_CHARS characters), the empty ones left out."""
    return [c.strip() for c in _CLAUSE_END.split(message[:MAX_RECALL_QUERY_CHARS]) if c.strip()]


def admitted(conn: sqlite3.Connection, message: str, *, skip: Iterable[int] = ()) -> set[int]:
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
    up (one indexed read each per index that sees them).
    """
    retired = {r[0] for r in conn.execute("SELECT id FROM facts WHERE status <> 'live'")}
    skipped = retired | {int(i) for i in skip}
    total = int(conn.execute("SELECT count(*) FROM facts WHERE status = 'live'").fetchone()[0])
    common = max(COMMON_MIN_DF, COMMON_SHARE * total)
    holders: dict[str, set[int] | None] = {}  # term -> facts holding it; None: not counted
    answered = False
    for clause in clauses(natural_text(message)):
        compiled = compile_query(clause, stopwords=RECALL_STOPWORDS)
        counted = 0
        shared: dict[int, int] = {}
        for text, expressions in _recall_terms(compiled).items():
            if text not in holders:
                if len(holders) >= MAX_RECALL_TERMS:
                    break
                holders[text] = _holders(conn, text, expressions, retired, common)
            ids = holders[text]
            if ids is None:
                continue
            counted += 1
            for fact_id in ids - skipped:
                shared[fact_id] = shared.get(fact_id, 0) + 1
        if counted and max(shared.values(), default=0) >= RECALL_MIN_COVERAGE * counted:
            answered = True
    if not answered:
        return set()
    return set().union(*(ids for ids in holders.values() if ids is not None)) - skipped


def _holders(
    conn: sqlite3.Connection,
    text: str,
    expressions: Sequence[tuple[Index, str]],
    retired: set[int],
    common: float,
) -> set[int] | None:
    """The live facts holding one term, or None when the term does not count in the gate
    (not significant, too common, or a CJK bigram no fact holds)."""
    if not significant(text):
        return None
    ids: set[int] = set()
    for index, expression in expressions:
        table = FTS_TABLES[index]
        ids.update(
            r[0]
            for r in conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expression,))
        )
    ids -= retired
    # Overlapping CJK bigrams straddle word boundaries ("天喝" in 今天喝), so one the
    # store lacks says nothing about the message's topic: only present ones count.
    if len(ids) > common or (not ids and has_cjk(text)):
        return None
    return ids


def recall_scores(
    conn: sqlite3.Connection,
    message: str,
    *,
    exclude: Iterable[int] = (),
) -> dict[int, float]:
    """The facts recall returns for ``message``, each with its score; ``{}`` when the gate
    (:func:`admitted`) refuses the message.

    The admitted facts are ranked exactly as :func:`search_scores` ranks a search for the
    same words (one compile, one fusion): the gate decides who may speak, never the order.
    """
    compiled = compile_query(natural_text(message), stopwords=RECALL_STOPWORDS)
    if compiled.is_empty:
        return {}
    allowed = admitted(conn, message, skip=exclude)
    if not allowed:
        return {}
    scores, _ = search_scores(conn, compiled)
    return {i: score for i, score in scores.items() if i in allowed}


def recall_rows(
    conn: sqlite3.Connection,
    message: str,
    *,
    limit: int = 5,
    exclude: Iterable[int] = (),
    categories: Sequence[str] | None = None,
) -> list[tuple[sqlite3.Row, float]]:
    """Live fact rows relevant to a chat message, best first; ``[]`` when none is.

    The message is answered only when some fact holds at least ``RECALL_MIN_COVERAGE``
    of the significant terms of one of its clauses, each found in at most
    ``max(COMMON_MIN_DF, COMMON_SHARE * live facts)`` facts (:func:`admitted`). Then its
    facts are ranked as :func:`search_rows` ranks them (see :func:`recall_scores`); ties
    go to the newest fact (highest id).
    """
    return rows_by_score(conn, recall_scores(conn, message, exclude=exclude), limit, categories)


def rows_by_score(
    conn: sqlite3.Connection,
    matched: dict[int, float],
    limit: int,
    categories: Sequence[str] | None = None,
) -> list[tuple[sqlite3.Row, float]]:
    """The best ``limit`` live rows of ``matched`` (id -> score) in ``categories``."""
    if not matched:
        return []
    # Ids grow with time and a fact is never edited in place, so the id orders live
    # facts by age. Only the best few rows are read: a common query term can admit
    # thousands of facts in a large store.
    ranked = sorted(matched, key=lambda i: (-matched[i], -i))
    window = ranked[: max(limit * 20, 100)] if categories is not None else ranked[:limit]
    rows = live_rows(conn, window, categories=categories)
    return [(rows[i], matched[i]) for i in window if i in rows][: max(0, limit)]
