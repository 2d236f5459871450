"""Finding facts: explicit search (tools, CLI) and gated recall (per-turn prefetch).

Both compile the query with :func:`memstrata.query.compile_query`, the compiler the
session search uses, so a query never raises and CJK words reach the bigram index.

* :func:`search_rows` is for someone who asked: every match counts. Each index's BM25 is
  scaled to its own best hit and the scales are summed per fact, as the session store
  fuses its indexes.
* :func:`recall_rows` is for a chat message nobody wrote as a query, so it must stay
  silent when nothing is relevant (an injected list of unrelated facts is noise the
  model pays for and may act on). It ranks by the rarity of the terms a fact shares with
  the message, and a fact enters only through a *significant* term (see
  :func:`significant`). BM25 itself cannot gate: FTS5 clamps the IDF of a term found in
  half the rows or more to almost zero, so in a store of three facts every score is
  about 1e-6 and no threshold tells a hit from a miss.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from memstrata.cjk import has_cjk
from memstrata.facts_schema import FTS_TABLES
from memstrata.query import STOPWORDS, CompiledQuery, Index, compile_query

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
MAX_RECALL_TERMS: Final = 48
MAX_RECALL_QUERY_CHARS: Final = 1000
# Words that carry no topic in a chat message, on top of query.STOPWORDS. "user" is
# here because mirrored profile entries read "User prefers ...": it matches them all.
_CHATTER = """
    user ok okay thanks thank hi hello hey yes yeah no sure great cool nice fine good
    tell know think want need help make go let lets
"""
RECALL_STOPWORDS: Final = STOPWORDS | frozenset(_CHATTER.split())
# CJK bigrams of function words, which a long Chinese sentence always contains.
_CJK_FUNCTION_BIGRAMS = """
    我们 你们 他们 她们 一个 这个 那个 什么 怎么 可以 没有 就是 还是 不是 我的 你的
    的是 是的 一下 现在 因为 所以 但是 如果 这样 那样 一些 自己 知道 觉得 帮我 请问
"""
CJK_STOP_BIGRAMS: Final = frozenset(_CJK_FUNCTION_BIGRAMS.split())


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
    return sum(ch.isalnum() for ch in term) >= 2 and term not in RECALL_STOPWORDS


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


def search_rows(
    conn: sqlite3.Connection,
    compiled: CompiledQuery,
    *,
    category: str | None = None,
    subject: str | None = None,
    limit: int = 10,
) -> list[tuple[sqlite3.Row, float]]:
    """Live fact rows matching ``compiled``, best first, each with its fused score."""
    where, params = filters(category=category, subject=subject, status="live")
    scores: dict[int, float] = {}
    rows: dict[int, sqlite3.Row] = {}
    for index, table in FTS_TABLES.items():
        expression = compiled.match.get(index)
        if expression is None:
            continue
        weights = "" if index == "cjk" else _WEIGHTS
        found = conn.execute(
            f"SELECT f.*, bm25({table}{weights}) AS score_ FROM {table} "
            f"CROSS JOIN facts f ON f.id = {table}.rowid {where} AND {table} MATCH ? "
            "ORDER BY score_ LIMIT ?",
            [*params, expression, CANDIDATES],
        ).fetchall()
        # FTS5's BM25 is negative, best lowest; scaled to the best hit it becomes (0, 1].
        best = min((r["score_"] for r in found), default=0.0)
        for r in found:
            scores[r["id"]] = scores.get(r["id"], 0.0) + (r["score_"] / best if best < 0 else 1.0)
            rows[r["id"]] = r
    ranked = sorted(scores, key=lambda i: (-scores[i], -rows[i]["updated_at"], -i))
    return [(rows[i], scores[i]) for i in ranked[: max(0, limit)]]


def _recall_terms(compiled: CompiledQuery) -> dict[str, list[tuple[Index, str]]]:
    """Each query term (by text) with its MATCH expression in every index that sees it."""
    terms: dict[str, list[tuple[Index, str]]] = {}
    for index, pairs in (compiled.leaves or {}).items():
        for expression, term in pairs:
            if term.text in terms or len(terms) < MAX_RECALL_TERMS:
                terms.setdefault(term.text, []).append((index, expression))
    return terms


def recall_rows(
    conn: sqlite3.Connection,
    message: str,
    *,
    limit: int = 5,
    exclude: Iterable[int] = (),
    categories: Sequence[str] | None = None,
) -> list[tuple[sqlite3.Row, float]]:
    """Live fact rows relevant to a chat message, best first; ``[]`` when none is.

    A fact must share at least one significant term with the message that is found in
    at most ``max(COMMON_MIN_DF, COMMON_SHARE * live facts)`` facts. Its score is the
    sum of those terms' IDF in the ``log(1 + (N - df + 0.5) / (df + 0.5))`` form, which
    never goes negative; ties go to the newest fact (highest id).
    """
    compiled = compile_query(natural_text(message), stopwords=RECALL_STOPWORDS)
    terms = _recall_terms(compiled)
    if not terms:
        return []
    # Retired facts stay indexed (a status change never touches the indexes), so they
    # are subtracted here: one indexed read, cheaper than joining every posting.
    retired = {r[0] for r in conn.execute("SELECT id FROM facts WHERE status <> 'live'")}
    skip = retired | {int(i) for i in exclude}
    total = int(conn.execute("SELECT count(*) FROM facts WHERE status = 'live'").fetchone()[0])
    common = max(COMMON_MIN_DF, COMMON_SHARE * total)
    matched: dict[int, float] = {}
    for text, expressions in terms.items():
        if not significant(text):
            continue
        ids: set[int] = set()
        for index, expression in expressions:
            table = FTS_TABLES[index]
            ids.update(
                r[0]
                for r in conn.execute(
                    f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expression,)
                )
            )
        ids -= retired
        if not ids or len(ids) > common:
            continue
        idf = math.log(1 + (total - len(ids) + 0.5) / (len(ids) + 0.5))
        for fact_id in ids - skip:
            matched[fact_id] = matched.get(fact_id, 0.0) + idf
    if not matched:
        return []
    # Ids grow with time and a fact is never edited in place, so the id orders live
    # facts by age. Only the best few rows are read: a common query term can admit
    # thousands of facts in a large store.
    ranked = sorted(matched, key=lambda i: (-matched[i], -i))
    window = ranked[: max(limit * 20, 100)] if categories is not None else ranked[:limit]
    marks = ", ".join("?" for _ in window)
    rows = {
        r["id"]: r
        for r in conn.execute(f"SELECT * FROM facts WHERE id IN ({marks})", window)
        if categories is None or r["category"] in categories
    }
    return [(rows[i], matched[i]) for i in window if i in rows][: max(0, limit)]
