"""Where a PostgreSQL search's time goes: each statement it sends, and its Python.

Usage::

    python benchmarks/pg_statement_times.py --dsn DSN --namespace NS [--classes question]
        [--rounds 3]

Searches one tenant already in the database (a schema kept by
``benchmarks/store_postgres_ab.py``, say: add ``?options=-csearch_path%3DSCHEMA,public``
to the DSN) with every query of each class of ``benchmarks/corpus.py``, once untimed,
then ``--rounds`` times. Each ``search_messages(query, limit=20)`` is timed whole, and
every statement it sends through a psycopg cursor is timed in the client (its round
trip: the server's planning and execution and the transfer). Prints per class the
search's p50/p95, the statements' and the rest's (Python: compiling, ranking, snippets,
row decoding) p50, and the statements that took the most time in all, by their first
characters, with how often a search sends each and its mean. ``BEGIN`` and ``COMMIT``
go through the connection, not a cursor, and count in the rest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg

import corpus  # the benchmark's own generator, importable by path
from memstrata.store.postgres import PostgresSessionStore
from store import percentile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--classes", nargs="+", default=list(corpus.queries()))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=6, help="statements listed per class")
    args = parser.parse_args(argv)

    timed: list[tuple[float, str]] = []
    execute = psycopg.Cursor.execute

    def timed_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(self, query, params, **kw)
        finally:
            timed.append((time.perf_counter() - start, " ".join(str(query).split())[:80]))

    psycopg.Cursor.execute = timed_execute  # type: ignore[method-assign]
    store = PostgresSessionStore(args.dsn, namespace=args.namespace, durability="normal")
    try:
        by_class = corpus.queries()
        for cls in args.classes:
            queries = by_class[cls]
            for q in queries:
                store.search_messages(q, limit=20)  # warm-up
            whole, sql = [], []
            each: dict[str, list[float]] = defaultdict(list)
            for _ in range(args.rounds):
                for q in queries:
                    timed.clear()
                    start = time.perf_counter()
                    store.search_messages(q, limit=20)
                    whole.append((time.perf_counter() - start) * 1000)
                    sql.append(sum(t for t, _ in timed) * 1000)
                    for t, text in timed:
                        each[text].append(t * 1000)
            rest = [w - s for w, s in zip(whole, sql, strict=True)]
            print(
                f"{cls}: search p50 {statistics.median(whole):.2f} ms, "
                f"p95 {percentile(whole, 95):.2f}; statements p50 {statistics.median(sql):.2f}; "
                f"the rest p50 {statistics.median(rest):.2f}"
            )
            ranked = sorted(each.items(), key=lambda kv: -sum(kv[1]))[: args.top]
            for text, times in ranked:
                print(
                    f"  {len(times) / len(whole):5.2f} per search, mean "
                    f"{statistics.mean(times):6.3f} ms  {text}"
                )
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
