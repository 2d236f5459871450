"""Latency of curated-memory writes: add, replace, remove with lock and fsync.

Each cycle adds an entry to a realistic MEMORY.md (about 1,700 of its 2,200 chars in 14
entries), replaces it, then removes it, so the store stays the same size throughout.
Every operation takes the file lock, re-reads the file, scans the new content, and
writes it atomically with fsync, as in real use.

Run:

    python benchmarks/memory_ops.py [--ops 200] [--hermes-python PATH] [--output FILE]

With ``--hermes-python`` (or ``MEMSTRATA_HERMES_PYTHON``) pointing at a Python that has
``hermes-agent`` installed, the same cycles run on its ``tools.memory_tool.MemoryStore``
in a subprocess with ``HERMES_HOME`` set to a temporary folder, and the ratio is printed.
Without it, that part is skipped.

The script is also its own Hermes harness (``--hermes-harness HOME``): that mode imports
only the standard library and Hermes, and prints the timings as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

OPS = ("add", "replace", "remove")
SCAN = "threat scan of one entry (part of add/replace)"
ROWS = (*OPS, SCAN)
WARMUP = 5
ROUNDS = 4
LIMIT = 2200
DELIMITER = "\n§\n"
SUBJECTS = (
    "The API server",
    "The staging database",
    "CI on the main branch",
    "The user's laptop",
    "The docs site",
    "The release script",
    "The mobile app",
)
FACTS = (
    "runs Python 3.11 under uvicorn with four workers behind nginx",
    "is PostgreSQL 16 at db.staging.internal, migrations via alembic",
    "needs `make lint test` green before merge; flaky test is test_upload_resume",
    "is an M2 MacBook with Homebrew in /opt/homebrew; prefers zsh and tmux",
    "builds with mkdocs-material; deploy with `make docs-deploy` from main only",
    "tags vX.Y.Z, writes CHANGELOG from PR titles, then uploads with twine",
)


def base_entries() -> list[str]:
    """About 1,700 chars of plausible agent notes in 14 entries."""
    entries = []
    for i in range(14):
        subject = SUBJECTS[i % len(SUBJECTS)]
        fact = FACTS[(i * 5) % len(FACTS)]
        entries.append(f"{subject} ({i}) {fact}; checked on day {i + 3}.")
    return entries


def cycle_texts(i: int) -> tuple[str, str, str]:
    """Content to add, the old_text to find it by, and its replacement, for cycle ``i``."""
    added = f"Note {i:04d}: the user prefers concise diffs and asks for tests with every fix."
    replacement = f"Note {i:04d}: the user prefers concise diffs; always include tests."
    return added, f"Note {i:04d}:", replacement


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def run_cycles(
    ops: int,
    add: Callable[[str], Any],
    replace: Callable[[str, str], Any],
    remove: Callable[[str], Any],
) -> dict[str, list[float]]:
    """Time ``ops`` add/replace/remove cycles (after a warm-up); milliseconds per op."""
    timings: dict[str, list[float]] = {op: [] for op in OPS}
    for i in range(WARMUP + ops):
        added, old, replacement = cycle_texts(i)
        steps = (
            ("add", lambda a=added: add(a)),
            ("replace", lambda o=old, r=replacement: replace(o, r)),
            ("remove", lambda o=old: remove(o)),
        )
        for name, step in steps:
            start = time.perf_counter()
            step()
            elapsed = (time.perf_counter() - start) * 1000
            if i >= WARMUP:
                timings[name].append(elapsed)
    return timings


def time_scans(ops: int, scan: Callable[[str], Any]) -> list[float]:
    """Milliseconds to threat-scan each added and replacement entry at strict scope."""
    timings = []
    for i in range(ops):
        added, _, replacement = cycle_texts(i)
        for text in (added, replacement):
            start = time.perf_counter()
            scan(text)
            timings.append((time.perf_counter() - start) * 1000)
    return timings


def seed_file(memories: Path) -> None:
    memories.mkdir(parents=True, exist_ok=True)
    (memories / "MEMORY.md").write_text(DELIMITER.join(base_entries()), encoding="utf-8")


# -- memstrata ----------------------------------------------------------------------------


def cost_breakdown(samples: int = 300) -> dict[str, float]:
    """Median ms of the parts memstrata adds over a bare write: lock and folder fsync."""
    from memstrata import fileio

    with tempfile.TemporaryDirectory(prefix="memstrata-parts-") as tmp:
        folder = Path(tmp)
        lock_path = folder / "MEMORY.md.lock"
        lock_ms, fsync_ms = [], []
        for _ in range(samples):
            start = time.perf_counter()
            with fileio.file_lock(lock_path):
                pass
            lock_ms.append((time.perf_counter() - start) * 1000)
            fd = os.open(folder, os.O_RDONLY)
            start = time.perf_counter()
            os.fsync(fd)
            fsync_ms.append((time.perf_counter() - start) * 1000)
            os.close(fd)
    return {
        "fileio.file_lock acquire + release": percentile(lock_ms, 50),
        "folder fsync after the rename": percentile(fsync_ms, 50),
    }


def bench_memstrata(ops: int, durability: str) -> dict[str, list[float]]:
    from memstrata.config import Config
    from memstrata.memory.files import FileMemory

    with tempfile.TemporaryDirectory(prefix="memstrata-bench-") as tmp:
        home = Path(tmp)
        seed_file(home / "memories")
        config = Config.load(home, environ={"MEMSTRATA_STORE__DURABILITY": durability})
        memory = FileMemory(home, config=config, memory_char_limit=LIMIT)
        timings = run_cycles(
            ops,
            lambda c: memory.add("memory", c),
            lambda o, c: memory.replace("memory", o, c),
            lambda o: memory.remove("memory", o),
        )
        assert memory.entries("memory") == base_entries(), "store drifted during the run"
    from memstrata.scanner.scan import scan_for_threats

    timings[SCAN] = time_scans(ops, lambda text: scan_for_threats(text, "strict"))
    return timings


# -- Hermes (runs under Hermes' interpreter) ----------------------------------------------


def hermes_harness(home: str, ops: int) -> None:
    """Time the same cycles on Hermes' MemoryStore; print JSON timings."""
    os.environ["HERMES_HOME"] = home
    seed_file(Path(home) / "memories")
    from tools.memory_tool import MemoryStore  # type: ignore[import-not-found]

    store = MemoryStore(memory_char_limit=LIMIT, user_char_limit=1375)
    store.load_from_disk()

    def checked(response: dict[str, Any]) -> dict[str, Any]:
        if not response.get("success"):
            raise SystemExit(f"Hermes refused an operation: {response}")
        return response

    timings = run_cycles(
        ops,
        lambda c: checked(store.add("memory", c)),
        lambda o, c: checked(store.replace("memory", o, c)),
        lambda o: checked(store.remove("memory", o)),
    )
    from tools.threat_patterns import first_threat_message  # type: ignore[import-not-found]

    timings[SCAN] = time_scans(ops, lambda text: first_threat_message(text, scope="strict"))
    json.dump(timings, sys.stdout)


def bench_hermes(python: str, ops: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        env = dict(os.environ, HERMES_HOME=tmp)
        proc = subprocess.run(
            [python, __file__, "--hermes-harness", tmp, "--ops", str(ops)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
    if proc.returncode != 0:
        raise SystemExit(f"Hermes harness failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, list[float]] = json.loads(proc.stdout)
    return result


def hermes_version(python: str) -> str:
    proc = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('hermes-agent'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


# -- report -------------------------------------------------------------------------------


def summarize(timings: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    return {op: (percentile(v, 50), percentile(v, 95)) for op, v in timings.items()}


def render(
    ops: int,
    ours: dict[str, dict[str, tuple[float, float]]],
    theirs: dict[str, tuple[float, float]] | None,
    version: str | None,
    command: str,
    parts: dict[str, float],
) -> str:
    lines = [
        "# Curated memory write latency",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        f"- command: `{command}`",
        f"- workload: {ops} cycles of add / replace / remove per side, in {ROUNDS} alternating "
        f"chunks (each after {WARMUP} warm-up cycles) "
        f"on a MEMORY.md of {len(DELIMITER.join(base_entries())):,}/{LIMIT:,} chars in "
        f"{len(base_entries())} entries",
        "- durability of each column: everyone fsyncs the file before the rename and takes a "
        "lock file per write, re-reading the file under it. memstrata `normal` (the default) "
        "stops there, like Hermes 0.19.0; memstrata `full` also fsyncs the folder after the "
        "rename, so the rename itself survives a power cut.",
        "",
    ]
    modes = list(ours)
    head = " | ".join(f"memstrata {m} median / p95 ms" for m in modes)
    if theirs is None:
        lines += [
            f"| op | {head} |",
            "|---|" + "---:|" * len(modes),
            *(
                f"| {op} | "
                + " | ".join(f"{ours[m][op][0]:.2f} / {ours[m][op][1]:.2f}" for m in modes)
                + " |"
                for op in ROWS
            ),
            "",
            "Hermes was not run (no --hermes-python / MEMSTRATA_HERMES_PYTHON).",
        ]
    else:
        ratios = " | ".join(f"Hermes / memstrata {m} (median)" for m in modes)
        lines += [
            f"| op | {head} | Hermes {version} median / p95 ms | {ratios} |",
            "|---|" + "---:|" * (2 * len(modes) + 1),
            *(
                f"| {op} | "
                + " | ".join(f"{ours[m][op][0]:.2f} / {ours[m][op][1]:.2f}" for m in modes)
                + f" | {theirs[op][0]:.2f} / {theirs[op][1]:.2f} | "
                + " | ".join(f"{theirs[op][0] / ours[m][op][0]:.2f}x" for m in modes)
                + " |"
                for op in ROWS
            ),
            "",
            "A ratio above 1 means memstrata is faster. Latency is dominated by fsync; "
            "other processes were running on the machine, so compare ratios, not absolutes.",
        ]
    lines += [
        "",
        "Median cost of the steps memstrata performs that Hermes 0.19 does not (measured alone):",
        "",
        *(f"- {name}: {ms:.2f} ms" for name, ms in parts.items()),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="cycles to time (default 200)")
    parser.add_argument(
        "--hermes-python",
        default=os.environ.get("MEMSTRATA_HERMES_PYTHON"),
        help="Python with hermes-agent installed (or env MEMSTRATA_HERMES_PYTHON)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(__file__).parent / "results" / "memory_ops.md",
        help="Markdown results file (default benchmarks/results/memory_ops.md)",
    )
    parser.add_argument("--hermes-harness", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.hermes_harness:
        hermes_harness(args.hermes_harness, args.ops)
        return

    hermes = args.hermes_python
    if hermes and not Path(hermes).exists():
        print(f"skipping Hermes: {hermes} does not exist", file=sys.stderr)
        hermes = None
    version = hermes_version(hermes) if hermes else None
    # The two sides run in alternating chunks so a change in machine load (fsync latency
    # moves a lot when other processes write) weighs on both alike.
    chunks = max(1, min(ROUNDS, args.ops))
    modes = ("normal", "full")
    ours_ms: dict[str, dict[str, list[float]]] = {m: {op: [] for op in ROWS} for m in modes}
    theirs_ms: dict[str, list[float]] = {op: [] for op in ROWS}
    for chunk in range(chunks):
        size = args.ops // chunks + (1 if chunk < args.ops % chunks else 0)
        for mode in modes:
            for op, values in bench_memstrata(size, mode).items():
                ours_ms[mode][op] += values
        if hermes:
            for op, values in bench_hermes(hermes, size).items():
                theirs_ms[op] += values
    ours = {mode: summarize(ours_ms[mode]) for mode in modes}
    theirs = summarize(theirs_ms) if hermes else None
    command = "python benchmarks/memory_ops.py --ops {}{}".format(
        args.ops, " --hermes-python $MEMSTRATA_HERMES_PYTHON" if theirs is not None else ""
    )
    report = render(args.ops, ours, theirs, version, command, cost_breakdown())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
