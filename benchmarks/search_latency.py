"""Search latency per query class on one store, in CPU time, with a check of the results.

Usage::

    python benchmarks/search_latency.py --db PATH [--messages 100000] [--repeats 3]

Builds the benchmark corpus (``benchmarks/corpus.py``) into ``--db`` when the file does
not exist yet (one ``append_messages`` call per session, then ``store.optimize()``), or
reuses it. Then runs every query of every class through ``search_messages(query,
limit=20)`` and prints, per class, the p50 and p95 of the per-query median **CPU** time
(process time: on a machine shared with other jobs it moves far less than wall time), and
how many queries found their planted message in the page (``found@20``) and first
(``top1``). To compare two versions of the code, run the same command against the same
database with each version first on ``PYTHONPATH``, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path
from memstrata.store.sqlite.store import SessionStore


def build(path: Path, messages: int) -> None:
    """Load the first ``messages`` messages of the corpus into a new store at ``path``."""
    with SessionStore(path) as store:
        for session in corpus.generate(messages):
            store.create_session(session.id, source=session.source)
            store.append_messages(session.id, session.messages)
        store.optimize()


def planted_in(store: SessionStore, ids: list[int], needle: str) -> list[bool]:
    """For each message id, whether its text holds the planted ``needle``."""
    texts: dict[int, str] = {}
    for i in ids:
        row = store.get_message(i)
        if row is not None:
            fields = (row["content"], row["tool_name"], row["tool_calls"])
            texts[i] = " ".join(str(x) for x in fields if x).lower()
    return [needle.lower() in texts.get(i, "") for i in ids]


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the store, time every query class, print one line per class."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="store file (built if absent)")
    parser.add_argument("--messages", type=int, default=100_000, help="corpus size to build")
    parser.add_argument("--repeats", type=int, default=3, help="runs per query")
    args = parser.parse_args(argv)
    if not args.db.exists():
        started = time.perf_counter()
        build(args.db, args.messages)
        print(f"built {args.db} in {time.perf_counter() - started:.0f} s", flush=True)
    by_class: dict[str, list[corpus.Plant]] = {}
    for plant in corpus.PLANTS:
        by_class.setdefault(plant.query_class, []).append(plant)
    with SessionStore(args.db) as store:
        store.search_messages("warmup", limit=20)
        total = store.stats()["messages"]
        print(f"{total} messages, {args.repeats} runs per query, CPU ms per query")
        for cls, plants in by_class.items():
            per_query: list[float] = []
            found = top1 = 0
            for plant in plants:
                times: list[float] = []
                hits: list[dict[str, object]] = []
                for _ in range(args.repeats):
                    start = time.process_time()
                    hits = store.search_messages(plant.query, limit=20)
                    times.append(time.process_time() - start)
                per_query.append(statistics.median(times) * 1000)
                marks = planted_in(store, [int(str(h["id"])) for h in hits], plant.needle)
                found += any(marks)
                top1 += bool(marks and marks[0])
            per_query.sort()
            p50 = per_query[len(per_query) // 2]
            p95 = per_query[min(len(per_query) - 1, int(0.95 * len(per_query)))]
            print(
                f"{cls:10s} p50 {p50:7.2f}  p95 {p95:7.2f}  "
                f"found@20 {found}/{len(plants)}  top1 {top1}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
