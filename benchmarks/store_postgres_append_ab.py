"""PostgreSQL append rate, two versions of memstrata: clients appending turn by turn.

Usage::

    git worktree add PATH BEFORE_COMMIT
    python benchmarks/store_postgres_append_ab.py --dsn postgresql://127.0.0.1:5432/test \\
        --before-src PATH/src [--messages 20000] [--clients 8] [--rounds 4] \\
        [--out benchmarks/results/store_postgres_append_ab.md]

Each side gets its own fresh schema (dropped at the end), so a version that adds a
migration never meets the other's tables. A round starts ``--clients`` processes per
side, one side after the other (the side going first alternating between rounds), each
client appending its share of ``--messages`` messages of ``benchmarks/corpus.py`` turn
by turn into sessions of its own, as ``benchmarks/store.py --backend postgres`` measures
append throughput; every round appends new sessions, so the tables grow alike on both
sides. Every message must be found afterwards (nothing lost).

Figures: the rate of each round (messages over the span from the first client's start
to the last client's end), the median over rounds, and the ratio after/before.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402  (the benchmarks' own modules, by path)
import store_postgres  # noqa: E402
from store import log  # noqa: E402
from store_ab import commit_of  # noqa: E402
from store_postgres_ab import shown_command  # noqa: E402

SRC = HERE.parent / "src"
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--before-src", type=Path, required=True)
    parser.add_argument("--after-src", type=Path, default=SRC)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sides = {"before": args.before_src.resolve(), "after": args.after_src.resolve()}
    load = os.getloadavg()
    rates: dict[str, list[float]] = {side: [] for side in sides}
    lost: dict[str, int] = dict.fromkeys(sides, 0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        parts = [
            store_postgres.write_parts(work, args.messages, corpus.SEED + r, args.clients)
            for r in range(args.rounds)
        ]
        with (
            store_postgres.own_schema(args.dsn, "append_before") as before_dsn,
            store_postgres.own_schema(args.dsn, "append_after") as after_dsn,
        ):
            targets = {"before": before_dsn, "after": after_dsn}
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    os.environ["PYTHONPATH"] = str(sides[side])
                    prefix = f"r{r}-"
                    res = store_postgres.run_clients(
                        "postgres",
                        targets[side],
                        "append-ab",
                        parts=parts[r],
                        mode="turn",
                        prefix=prefix,
                    )
                    found = store_postgres.count_messages(
                        "postgres", targets[side], "append-ab", prefix
                    )
                    lost[side] += res["messages"] - found
                    rates[side].append(res["rate"])
                    log(f"round {r + 1}/{args.rounds} {side}: {res['rate']:,.0f} msg/s")
                    time.sleep(1)
    report = render(args, sides, rates, lost, load, os.getloadavg())
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    return 0


def render(
    args: argparse.Namespace,
    sides: dict[str, Path],
    rates: dict[str, list[float]],
    lost: dict[str, int],
    load_before: tuple[float, ...],
    load_after: tuple[float, ...],
) -> str:
    before, after = commit_of(sides["before"]), commit_of(sides["after"])
    med = {side: statistics.median(r) for side, r in rates.items()}
    shown = shown_command(sys.argv[1:], "benchmarks/store_postgres_append_ab.py")
    lines = [
        f"# PostgreSQL append A/B: before {before} → after {after}\n",
        f"`{shown}`\n",
        f"{args.clients} client processes per side, each appending its share of "
        f"{args.messages:,} messages turn by turn into sessions of its own; "
        f"{args.rounds} rounds, the side going first alternating; each side in its own "
        f"fresh schema. {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average {' '.join(f'{x:.2f}' for x in load_before)} before the run, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after (a shared machine: compare the "
        "two rows of one run, not runs).\n",
        "| side | msg/s (median) | rounds (msg/s) | lost |",
        "|---|---:|---|---:|",
    ]
    for side in sides:
        runs = ", ".join(f"{x:,.0f}" for x in rates[side])
        lines.append(f"| {side} | {med[side]:,.0f} | {runs} | {lost[side]} |")
    lines.append(f"\nRatio after/before (medians): {med['after'] / med['before']:.3f}\n")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
