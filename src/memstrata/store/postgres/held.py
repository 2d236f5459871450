"""Which of many index predicates some row holds, in one statement of a fixed few plans.

Typo and homophone correction ask the store which of a query's words, and of their
neighbours, any row holds (:mod:`memstrata.query.spelling`,
:mod:`memstrata.query.homophones`): a Chinese question with a slip asks about hundreds of
bigrams. One subquery per predicate, joined by UNION ALL, made a statement the server
planned afresh for every such question: 110 ms for 510 bigrams at 100k messages, all of
it planning. Here the predicates of one shape (the same SQL, other values) are one
subquery over arrays of their values, each row of the arrays tested with EXISTS through
the predicate's GIN index (7 ms for the same 510).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

__all__ = ["held_arms"]

Conn = psycopg.Connection[Any]


def held_arms(
    conn: Conn, rows: str, values: Sequence[Any], arms: Sequence[tuple[str, Sequence[Any]]]
) -> set[int]:
    """The indexes (into ``arms``) of the predicates some row of ``rows`` matches.

    ``rows``: ``FROM ... WHERE ...`` of the rows looked at (its values: ``values``), which
    each predicate is ANDed to; ``arms``: each predicate's SQL and values (text, each
    ``%s`` a value). A predicate that names no value is tested once.
    """
    shapes: dict[str, list[int]] = {}
    for k, (sql, _) in enumerate(arms):
        shapes.setdefault(sql, []).append(k)
    parts: list[str] = []
    params: list[Any] = []
    for sql, ks in shapes.items():
        count = sql.count("%s")
        body = sql
        for i in range(count):
            body = body.replace("%s", f"u.p{i}", 1)
        columns = "".join(f", p{i}" for i in range(count))
        arrays = "".join(", %s::text[]" for _ in range(count))
        parts.append(
            f"SELECT u.k FROM unnest(%s::int[]{arrays}) AS u(k{columns}) "
            f"WHERE EXISTS (SELECT 1 {rows} AND {body})"
        )
        params.append(ks)
        params += [[str(arms[k][1][i]) for k in ks] for i in range(count)]
        params += list(values)
    if not parts:
        return set()
    found = conn.execute(" UNION ALL ".join(parts), params).fetchall()
    return {int(r["k"]) for r in found}
