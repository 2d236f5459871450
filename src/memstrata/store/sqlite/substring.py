"""Substring search on a trigram index that keeps no positions (``detail='none'``).

A trigram index with ``detail='full'`` stores the position of every trigram, most of the
store's size. Without positions FTS5 rejects phrase queries, so a term longer than three
characters cannot be matched as the phrase of its trigrams. Instead the AND of its
distinct trigrams finds candidates (a superset: every row holding the substring holds
each of its trigrams) and each candidate's text is checked for the substring itself
(``instr`` on the case-folded column), inside the same SQL, newest first, stopping after
the page. Without positions there is no meaningful BM25 either: every verified hit
scores the same, so other indexes rank substring hits when they find them too, recency
otherwise.

With ``detail='full'`` (or on a store created before the change) the caller keeps using
phrase MATCH and BM25; :func:`positions_kept` tells which applies.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from memstrata.query.compile import Node

TABLE = "messages_fts_trigram"
FOLD_FUNCTION = "memstrata_fold"
# Candidates need only a superset: a handful of trigrams narrows it as well as all of a
# long phrase's, at a fraction of the doclist merging.
_MAX_GRAMS = 12
_COLUMNS = ("m.content", "m.tool_name", "m.tool_calls")


def positions_kept(conn: sqlite3.Connection) -> bool:
    """True when the trigram index stores positions (phrase queries and BM25 work)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    if row is None or row[0] is None:
        return True
    sql = str(row[0]).lower().replace(" ", "")
    return "detail='none'" not in sql and "detail='column'" not in sql


def _fold(text: object) -> str | None:
    # The trigram tokenizer folds case over all of Unicode; SQLite's lower() only ASCII.
    return None if text is None else str(text).lower()


def _grams(needle: str) -> list[str]:
    grams = list(dict.fromkeys(needle[i : i + 3] for i in range(len(needle) - 2)))
    if len(grams) > _MAX_GRAMS:
        # Spread the kept trigrams over the whole needle: its two ends are most distinct.
        step = (len(grams) - 1) / (_MAX_GRAMS - 1)
        grams = [grams[round(i * step)] for i in range(_MAX_GRAMS)]
    return grams


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def render(node: Node) -> tuple[str, str, list[str]] | None:
    """``(match, check, needles)`` for ``node``: a superset MATCH of trigram ANDs, the SQL
    boolean that checks the exact substrings on the joined row ``m``, and the check's
    parameters; None when the trigram index cannot see the query.

    A branch the index cannot see is dropped from an OR, makes an AND unsatisfiable and is
    ignored as the excluded side of a NOT, as in :meth:`memstrata.query.compile.Node.render`. The
    excluded side of a NOT stays out of the MATCH (a superset of it would exclude too
    much) and is applied by the check alone.
    """
    if node.op == "term":
        term = node.term
        if term is None or term.trigram is None or len(term.text) < 3:
            return None
        needle = term.text.lower()
        match = "(" + " AND ".join(_quote(g) for g in _grams(needle)) + ")"
        check = " OR ".join(f"instr({FOLD_FUNCTION}({c}), ?) > 0" for c in _COLUMNS)
        return match, f"({check})", [needle] * len(_COLUMNS)
    parts = [render(child) for child in node.children]
    if node.op == "or":
        kept = [p for p in parts if p is not None]
        if not kept:
            return None
        return (
            "(" + " OR ".join(p[0] for p in kept) + ")",
            "(" + " OR ".join(p[1] for p in kept) + ")",
            [n for p in kept for n in p[2]],
        )
    if node.op == "and":
        if any(p is None for p in parts):
            return None
        full = [p for p in parts if p is not None]
        return (
            "(" + " AND ".join(p[0] for p in full) + ")",
            "(" + " AND ".join(p[1] for p in full) + ")",
            [n for p in full for n in p[2]],
        )
    head, rest = parts[0], [p for p in parts[1:] if p is not None]
    if head is None:
        return None
    check = " AND ".join([head[1], *(f"NOT {p[1]}" for p in rest)])
    return head[0], f"({check})", head[2] + [n for p in rest for n in p[2]]


def candidates(
    conn: sqlite3.Connection,
    node: Node,
    where: str,
    params: list[Any],
    join_sessions: str,
    k: int,
    order: Literal["rank", "newest", "oldest"],
) -> list[tuple[int, str, float, float]]:
    """Up to k rows holding the query's substrings, as (id, session_id, timestamp, -1.0).

    Newest first (oldest first for ``order="oldest"``); ``where``/``params`` are the
    search filters on ``m`` (and ``s`` through ``join_sessions``).
    """
    rendered = render(node)
    if rendered is None:
        return []
    match, check, needles = rendered
    conn.create_function(FOLD_FUNCTION, 1, _fold, deterministic=True)
    direction = "ASC" if order == "oldest" else "DESC"
    sql = (
        f"SELECT m.id, m.session_id, m.timestamp FROM {TABLE} "
        f"JOIN messages m ON m.id = {TABLE}.rowid{join_sessions} "
        f"WHERE {TABLE} MATCH ? AND {check}{where} ORDER BY {TABLE}.rowid {direction} LIMIT ?"
    )
    return [
        (int(r[0]), str(r[1]), float(r[2]), -1.0)
        for r in conn.execute(sql, [match, *needles, *params, k])
    ]
