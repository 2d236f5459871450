"""Prefix queries on one SQLite store, this checkout against another: same results, time.

Usage::

    git worktree add /tmp/base main
    python benchmarks/prefix_ab.py --db memstrata-1000000-bulk.db --base-src /tmp/base/src \\
        [--rounds 3] [--repeats 3] [--out benchmarks/results/prefix_ab_1m.md]

The database is one ``benchmarks/store.py --build bulk --db-dir DIR --build-only`` kept.
Each side runs in its own interpreter (``PYTHONPATH`` set to its ``src``), the two
alternating ``--rounds`` times so that a burst of other work on a shared machine weighs
on both. Every query of the ``prefix`` class of ``benchmarks/corpus.py`` runs
``--repeats`` times per round; a query's figure is the median of all its runs, the
class's p50/p95 are over those medians. Wall time and the process's CPU time are both
reported: on a loaded machine the CPU time is the steadier figure of the two.

Before the timing, both sides answer the prefix queries (best match first, newest and
oldest first) and the extra prefix, boolean and phrase-prefix queries below; the run
stops unless the ids, scores and snippets are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Prefixes beyond the benchmark's: wide ones, stems the stemmer changes again, glued CJK
# runs (many words over few pages), hex ids, and a prefix inside boolean queries.
EXTRA = [
    "trac*", "runn*", "tracing*", "a*", "te*", "con*", "stat*", "happ*", "fail*", "agre*",
    "re*", "pr*", "ca*", "a0*", "a0f*", "e5a*", "ff*", "0*", "任务*", "内存*", "上线*",
    "token* AND postg*", "repl* OR restor*", "snaps* NOT token*", '"token refresh"*',
]  # fmt: skip


def _job(db: str, op: str, repeats: int) -> dict[str, Any]:
    """In the child: ``op="answers"``: every query's hits; ``op="time"``: its timings."""
    sys.path.insert(0, str(HERE))
    import corpus
    from memstrata.store.sqlite.store import SessionStore

    prefixes = corpus.queries()["prefix"]
    store = SessionStore(db, durability="normal")
    out: dict[str, Any] = {}
    try:
        store.search_messages("warmup", limit=20)
        if op == "answers":
            for q in prefixes + EXTRA:
                for sort in (None, "newest", "oldest"):
                    hits = store.search_messages(q, limit=20, sort=sort)
                    out[f"{sort}|{q}"] = [
                        (h["id"], round(h["score"], 9), h["snippet"]) for h in hits
                    ]
            return out
        for q in prefixes:
            wall, cpu = [], []
            for _ in range(repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                store.search_messages(q, limit=20)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            out[q] = {"wall": wall, "cpu": cpu}
        return out
    finally:
        store.close()


def _run(src: str, db: str, op: str, repeats: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, __file__, "--child", op, "--db", db, "--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--base-src", help="the other checkout's src folder")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--note", default="", help="a sentence on the store (how it was built)")
    ap.add_argument("--child", choices=("answers", "time"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_job(args.db, args.child, args.repeats), ensure_ascii=False))
        return 0
    if not args.base_src:
        ap.error("--base-src is required")
    sides = {"base": str(Path(args.base_src).resolve()), "this": str(HERE.parent / "src")}
    answers = {side: _run(src, args.db, "answers", 1) for side, src in sides.items()}
    differ = [q for q in answers["base"] if answers["base"][q] != answers["this"].get(q)]
    if differ or answers["base"].keys() != answers["this"].keys():
        print(f"results differ: {differ[:10]}", file=sys.stderr)
        return 1
    load_before = os.getloadavg()
    runs: dict[str, dict[str, dict[str, list[float]]]] = {side: {} for side in sides}
    for _ in range(args.rounds):
        for side, src in sides.items():
            for q, t in _run(src, args.db, "time", args.repeats).items():
                got = runs[side].setdefault(q, {"wall": [], "cpu": []})
                got["wall"] += t["wall"]
                got["cpu"] += t["cpu"]
    load_after = os.getloadavg()
    lines = [
        "# Prefix queries: this checkout against a base checkout, one store",
        "",
        f"Produced by `python benchmarks/prefix_ab.py --db {Path(args.db).name} --base-src BASE "
        f"--rounds {args.rounds} --repeats {args.repeats}`. Load average "
        f"{' '.join(f'{x:.1f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.1f}' for x in load_after)} after (2 CPUs).",
        "",
        *([args.note, ""] if args.note else []),
        f"Results: the {len(answers['base'])} answers (prefix class by rank, newest and oldest "
        "first, plus the extra queries) have identical ids, scores and snippets on both sides.",
        "",
        "| side | wall p50 ms | wall p95 ms | wall max ms | CPU p50 ms | CPU p95 ms | CPU max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        row = [side]
        for kind in ("wall", "cpu"):
            medians = [statistics.median(t[kind]) * 1e3 for t in runs[side].values()]
            row += [
                f"{statistics.median(medians):.2f}",
                f"{_p95(medians):.2f}",
                f"{max(medians):.2f}",
            ]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Per query (median CPU ms, base → this):", ""]
    for q in runs["base"]:
        b = statistics.median(runs["base"][q]["cpu"]) * 1e3
        t = statistics.median(runs["this"][q]["cpu"]) * 1e3
        lines.append(f"- `{q}` {b:.2f} → {t:.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
