"""PostgreSQL search with the GIN pending lists empty and full: what a writer leaves
behind between two merges, for one or two versions of memstrata.

Usage::

    python benchmarks/pg_pending_lists.py --dsn postgresql://127.0.0.1:5432/test \\
        [--messages 100000] [--pending 1000] [--src PATH/src ...] [--out FILE]

For each ``--src`` (default: this checkout), in a fresh schema of its own: one tenant of
``--messages`` corpus messages written through the public API (whole sessions, one
process) and the store closed, then the corpus queries of every class timed (per-query
median of 3, p50/p95 per class) twice: as the writes left the indexes, and after
``--pending`` more messages appended turn by turn by a store whose own maintenance is
held back, as a live writer leaves them between two passes of that maintenance. The
figures say what a search pays for the rows waiting in the pending lists under each
version's list size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402  (the benchmarks' own modules, by path)
from store import summarize_classes, time_queries  # noqa: E402
from store_ab import commit_of  # noqa: E402
from store_postgres import own_schema  # noqa: E402

SRC = HERE.parent / "src"
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
REPEATS = 3


def child(args: argparse.Namespace) -> int:
    """In the version under test: load, time, append without merging, time again."""
    from memstrata.store.postgres import PostgresSessionStore, maintenance

    sessions = list(corpus.generate(args.messages + args.pending, seed=11))
    loaded = 0
    split = len(sessions)
    with PostgresSessionStore(args.child, namespace="t", durability="normal") as store:
        for i, s in enumerate(sessions):
            if loaded >= args.messages:
                split = i
                break
            store.create_session(s.id, source=s.source)
            store.append_messages(s.id, s.messages)
            loaded += len(s.messages)
    out = {"loaded": loaded, "empty": timed(args.child)}
    # A writer between two passes of its maintenance: the rows stay in the pending lists.
    maintenance.Keeper.wrote = lambda self, messages=0: None  # type: ignore[method-assign]
    maintenance.Keeper.close = lambda self: None  # type: ignore[method-assign]
    appended = 0
    with PostgresSessionStore(args.child, namespace="t", durability="normal") as store:
        for s in sessions[split:]:
            store.create_session(s.id, source=s.source)
            for turn in s.turns:
                store.append_messages(s.id, turn)
                appended += len(turn)
            if appended >= args.pending:
                break
    out["appended"] = appended
    out["pending"] = timed(args.child)
    print(json.dumps(out))
    return 0


def timed(dsn: str) -> dict[str, dict[str, float]]:
    """p50/p95 per class over the per-query medians, as benchmarks/store.py takes them."""
    from memstrata.store.postgres import PostgresSessionStore

    with PostgresSessionStore(dsn, namespace="t") as store:

        def search(query: str) -> int:
            return len(store.search_messages(query, limit=20))

        classes = time_queries(search, corpus.queries(), REPEATS, slow_s=float("inf"))
    return {
        name: {"p50": c["p50_ms"], "p95": c["p95_ms"]}
        for name, c in summarize_classes(classes).items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--src", type=Path, action="append")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    sources = args.src or [SRC]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = []
    for i, src in enumerate(sources):
        with own_schema(args.dsn, f"pending{i}") as dsn:
            env = {**os.environ, "PYTHONPATH": str(src.resolve())}
            cmd = [sys.executable, __file__, "--child", dsn]
            cmd += ["--messages", str(args.messages), "--pending", str(args.pending)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{src}: {proc.stderr[-3000:]}")
            results.append((commit_of(src), json.loads(proc.stdout.strip().splitlines()[-1])))
    text = render(args, results, load, " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


def render(args: argparse.Namespace, results: list, before: str, after: str) -> str:
    lines = [
        "# PostgreSQL search with the GIN pending lists empty and full",
        "",
        f"`python benchmarks/pg_pending_lists.py --messages {args.messages} "
        f"--pending {args.pending}" + "".join(" --src PATH" for _ in results) + "`",
        "",
        f"One tenant of {args.messages:,} corpus messages written through the public API and "
        f"the store closed (*merged*), then {args.pending:,} more appended turn by turn with "
        "the store's maintenance held back (*pending*), as a live writer leaves the lists "
        "between two passes. Per-query median of 3, p50/p95 per class over its queries "
        f"(ms). {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; load "
        f"average {before} before, {after} after (a shared machine).",
        "",
    ]
    lines += timings_table(results, ("empty", "merged"), ("pending", "pending"))
    return "\n".join(lines) + "\n"


def timings_table(
    results: list[tuple[str, dict[str, Any]]], *timings: tuple[str, str]
) -> list[str]:
    """p50/p95 per class, for each version and each of ``timings`` (key in a version's
    results, column label), as Markdown table lines."""
    header, rule = "| class |", "|---|"
    for commit, _ in results:
        for _, label in timings:
            header += f" {commit} {label} p50 | p95 |"
            rule += "---:|---:|"
    lines = [header, rule]
    for name in results[0][1][timings[0][0]]:
        row = f"| {name} |"
        for _, r in results:
            for key, _ in timings:
                row += f" {r[key][name]['p50']:.2f} | {r[key][name]['p95']:.2f} |"
        lines.append(row)
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
