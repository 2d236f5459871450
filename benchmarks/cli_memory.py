"""Wall time of `memstrata memory` commands, with and without an external provider.

Memory writes are mirrored to the provider named by ``memory.provider`` at their source,
the CLI included. A command must stay as fast as before when no provider is configured,
and reads must not start one even when it is: the provider is started only after a
write. Each case runs the real console script in a fresh process, in alternating rounds:

- baseline: ``memory add`` in a home without a provider;
- ``memory list`` in a home with ``memory.provider = "facts"`` (nothing written: no start);
- ``memory add`` in a home without a provider, adding a second entry;
- ``memory add`` with ``memory.provider = "facts"`` (the write is mirrored before exit).

Run:

    python benchmarks/cli_memory.py [--runs 9] [--output FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

CASES = (
    ("add, no provider (baseline)", False, ("memory", "add", "Prefers tea {n}", "-t", "user")),
    ("list, facts provider configured", True, ("memory", "list")),
    ("add, facts provider (mirrored)", True, ("memory", "add", "Likes 乌龙茶 {n}", "-t", "user")),
)


def console_script() -> list[str]:
    script = Path(sys.executable).with_name("memstrata")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memstrata"]


def run_once(home: Path, args: tuple[str, ...], n: int) -> float:
    env = {**os.environ, "MEMSTRATA_HOME": str(home)}
    command = [*console_script(), *(a.format(n=n) for a in args)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    return elapsed * 1000


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--output", type=Path)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memstrata-cli-bench-"))
    try:
        homes = {}
        for label, with_provider, _ in CASES:
            home = folder / str(len(homes))
            home.mkdir()
            if with_provider:
                (home / "config.toml").write_text('[memory]\nprovider = "facts"\n')
            homes[label] = home
        run_once(homes[CASES[0][0]], ("memory", "list"), 0)  # warm the file cache
        times: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
        for n in range(options.runs):
            for label, _, args in CASES:
                times[label].append(run_once(homes[label], args, n))
        facts = homes[CASES[2][0]] / "facts.db"
        mirrored = facts.exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = statistics.median(times[CASES[0][0]])
    lines = [
        "# `memstrata memory` command wall time",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        f"- command: `python benchmarks/cli_memory.py --runs {options.runs}`",
        "- each run is a fresh process of the console script; cases alternate per round",
        f"- the mirrored add wrote facts.db: {mirrored}",
        "",
        "| case | median ms | p95 ms | median / baseline |",
        "|---|---:|---:|---:|",
    ]
    for label, _, _ in CASES:
        median = statistics.median(times[label])
        lines.append(f"| {label} | {median:.0f} | {p95(times[label]):.0f} | {median / base:.2f}x |")
    lines += [
        "",
        "A ratio near 1.00 means no extra cost over a plain write. The mirrored add pays for",
        "starting the provider and waiting for its write; a read with a provider configured",
        "starts nothing. Other processes were running on the machine: compare ratios.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if options.output is not None:
        options.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
