"""Run the fault-injection and fuzzing suites, long runs included, and report the figures.

Usage::

    python benchmarks/hardening.py [--examples 5000] [--quick] [--output PATH]
                                   [--load-seconds 20] [--clients 16] [--dsn postgresql://...]

Runs ``tests/test_faults_*.py`` and ``tests/test_fuzz_*.py`` with the ``stress`` tests
(``-m "stress or not stress"``), in a subprocess of pytest, with two variables the tests
read: ``MEMSTRATA_TEST_FUZZ_EXAMPLES`` (inputs per fuzz target in the long runs; the CLI
fuzz takes a fifth of it, each command line being a whole CLI run) and
``MEMSTRATA_TEST_HARDENING_LOG`` (a file each test appends its figures to: faults tried
with the acknowledged writes and how many were lost, inputs fuzzed per target).

Prints, and with ``--output`` writes as Markdown: every fault with its runs,
acknowledged writes and losses; every fuzz target with its inputs; the pytest outcome.
Then runs ``benchmarks/mcp_load.py`` (16 MCP clients against one and two server
processes; ``--dsn`` adds PostgreSQL) and reports clients, acknowledged writes, losses
and latency percentiles. A failing test or a lost write is a finding: it is listed and
the exit status is non-zero. The
machine may be shared, so the load average is printed; the figures are counts, not
timings, and do not depend on it (the wall time is given for scale only).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITES = [
    "tests/test_faults_disk.py",
    "tests/test_faults_files.py",
    "tests/test_faults_locks.py",
    "tests/test_fuzz_text.py",
    "tests/test_fuzz_tools.py",
    "tests/test_fuzz_cli.py",
    # Security: each attack the tests make is counted (tried, stopped).
    "tests/test_mcp_http_security.py",
    "tests/test_file_safety.py",
    "tests/test_secrets.py",
    "tests/test_plugins.py",
    "tests/test_postgres_bounds.py",
]


def log(msg: str) -> None:
    print(msg, flush=True)


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "n/a"


def run_suites(examples: int, extra: list[str]) -> dict[str, Any]:
    """Run the suites once; return the pytest outcome and the figures the tests logged."""
    with tempfile.TemporaryDirectory(prefix="memstrata-hardening-") as tmp:
        figures_log = Path(tmp) / "figures.jsonl"
        junit = Path(tmp) / "junit.xml"
        env = {
            **os.environ,
            "MEMSTRATA_TEST_FUZZ_EXAMPLES": str(examples),
            "MEMSTRATA_TEST_HARDENING_LOG": str(figures_log),
        }
        cmd = [
            sys.executable, "-m", "pytest", *SUITES, "-m", "stress or not stress",
            "-p", "no:randomly", "-q", f"--junitxml={junit}", *extra,
        ]  # fmt: skip
        log("$ " + " ".join(cmd))
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        wall = time.perf_counter() - started
        lines = figures_log.read_text(encoding="utf-8").splitlines() if figures_log.exists() else []
        outcome = _junit_outcome(junit)
    return {
        "exit_status": proc.returncode,
        "wall_s": wall,
        "figures": [json.loads(line) for line in lines if line.strip()],
        **outcome,
    }


def run_load(seconds: float, clients: int, dsn: str | None) -> list[dict[str, Any]]:
    """benchmarks/mcp_load.py against one and two server processes; its JSON figures."""
    cmd = [
        sys.executable, str(HERE / "mcp_load.py"), "--json", "--seconds", str(seconds),
        "--clients", str(clients), "--servers", "1", "2",
    ]  # fmt: skip
    if dsn:
        cmd += ["--dsn", dsn]
    log("$ " + " ".join("postgresql://..." if a == dsn else a for a in cmd))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        log(proc.stderr[-2000:])
        raise SystemExit(f"mcp_load.py failed with exit status {proc.returncode}")
    figures: list[dict[str, Any]] = json.loads(proc.stdout)
    return figures


def _junit_outcome(junit: Path) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed: list[str] = []
    skipped: list[str] = []
    if not junit.exists():
        return {**counts, "failed_tests": failed, "skipped_tests": skipped}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            failed.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
            skipped.append(name)
        else:
            counts["passed"] += 1
    return {**counts, "failed_tests": failed, "skipped_tests": skipped}


def summarise(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """Faults grouped by name (runs, acknowledged writes, lost) and fuzz inputs by target."""
    faults: dict[str, dict[str, int]] = defaultdict(
        lambda: {"runs": 0, "acked": 0, "destroyed": 0, "lost": 0}
    )
    fuzz: dict[str, int] = defaultdict(int)
    attacks: dict[str, dict[str, int]] = defaultdict(lambda: {"tried": 0, "stopped": 0})
    for row in figures:
        if row.get("kind") == "attack":
            attacks[row["category"]]["tried"] += int(row["tried"])
            attacks[row["category"]]["stopped"] += int(row["stopped"])
        if row.get("kind") == "fault":
            entry = faults[row["fault"]]
            entry["runs"] += int(row.get("calls", 1)) if "calls" in row else 1
            entry["acked"] += int(row.get("acked", 0))
            entry["destroyed"] += int(row.get("destroyed", 0))
            entry["lost"] += int(row.get("lost", 0))
        elif row.get("kind") == "fuzz":
            fuzz[row["target"]] += int(row["inputs"])
    return {
        "faults": dict(sorted(faults.items())),
        "fuzz": dict(sorted(fuzz.items())),
        "attacks": dict(sorted(attacks.items())),
        "attacks_tried": sum(a["tried"] for a in attacks.values()),
        "attacks_passed": sum(a["tried"] - a["stopped"] for a in attacks.values()),
        "fault_runs": sum(f["runs"] for f in faults.values()),
        "acked": sum(f["acked"] for f in faults.values()),
        "destroyed": sum(f["destroyed"] for f in faults.values()),
        "lost": sum(f["lost"] for f in faults.values()),
        "inputs": sum(fuzz.values()),
    }


def render_load(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """The MCP load section: clients, writes, losses and latency percentiles per run."""
    lines = [
        "",
        "## Load: the MCP HTTP server",
        "",
        f"`benchmarks/mcp_load.py --seconds {args.load_seconds:g} --clients {args.clients}`: "
        "MCP SDK clients over streamable HTTP mixing `memory` adds of unique tokens and "
        "`session_search` calls against one and two `memstrata mcp` processes sharing a "
        "store; afterwards every acknowledged token is looked up. Latencies are one run "
        "each on the shared machine.",
        "",
        "| store | servers | clients | calls | acknowledged writes | lost | errors "
        "| add p50 / p95 / p99 ms | search p50 / p95 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in runs:
        add, search = r["ops"]["memory_add"], r["ops"]["session_search"]
        calls = add["count"] + search["count"]
        lines.append(
            f"| {r['backend']} | {r['servers']} | {r['clients']} | {calls:,} | "
            f"{r['acknowledged_writes']:,} | **{r['lost_writes']}** | {r['errors']} | "
            f"{add['p50_ms']:.0f} / {add['p95_ms']:.0f} / {add['p99_ms']:.0f} | "
            f"{search['p50_ms']:.0f} / {search['p95_ms']:.0f} / {search['p99_ms']:.0f} |"
        )
    return lines


def render(result: dict[str, Any], summary: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# Hardening: fault injection, fuzzing and load",
        "",
        f"Run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC with `python benchmarks/hardening.py "
        f"--examples {args.examples}{' --dsn DSN' if args.dsn else ''}`; load average before "
        f"{result['load_before']}, after "
        f"{result['load_after']} (a shared machine; the figures below are counts and do not "
        f"depend on it). Wall time {result['wall_s']:.0f} s.",
        "",
        f"pytest: {result['passed']} passed, {result['failed']} failed, "
        f"{result['skipped']} skipped (suites: {', '.join(Path(s).name for s in SUITES)}; "
        "stress tests included).",
        "",
        f"**{summary['fault_runs']:,} fault runs, {summary['acked']:,} acknowledged writes "
        f"checked afterwards, {summary['lost']} lost ({summary['destroyed']} more were on "
        f"pages the fault itself overwrote); {summary['inputs']:,} fuzzed inputs, "
        f"{result['failed']} failing properties.**",
        "",
        "## Faults",
        "",
        "Each row is a real fault: a tmpfs filled or remounted read-only inside a private "
        "mount namespace, a home owned by another user, bytes of `state.db` or `MEMORY.md` "
        "overwritten or cut, a lock holder SIGKILLed. *Acknowledged* counts writes whose "
        "call had returned before the fault; *destroyed* those stored on bytes the fault "
        "itself overwrote (no software brings them back); *lost* those missing afterwards for "
        "any other reason. Damaged files hold no acknowledged write of their own except where "
        "a row says so (the index-page and salvage rows check every message; the truncation "
        "row every entry still whole).",
        "",
        "| fault | runs | acknowledged writes | destroyed by the fault | lost |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, f in summary["faults"].items():
        lines.append(
            f"| {name} | {f['runs']:,} | {f['acked']:,} | {f['destroyed']} | {f['lost']} |"
        )
    lines += [
        "",
        "## Fuzzed inputs",
        "",
        "Hypothesis inputs per target, the fast and the long (stress) runs together. A "
        "property failing on any input fails its test and is listed below.",
        "",
        "| target | inputs |",
        "|---|---:|",
    ]
    for target, count in summary["fuzz"].items():
        lines.append(f"| {target} | {count:,} |")
    lines += [
        "",
        "## Attacks",
        "",
        f"{summary['attacks_tried']:,} attacks tried by the security tests, "
        f"{summary['attacks_passed']} got through. Each row is a category of the attacks of "
        "issue 17 made for real: HTTP requests against a running `memstrata mcp` process, "
        "symlinks and umask 0 against the console script, secrets through `config`, "
        "plugin folders, pathological queries on PostgreSQL (see docs/security.md).",
        "",
        "| attack | tried | stopped |",
        "|---|---:|---:|",
    ]
    for category, a in summary["attacks"].items():
        lines.append(f"| {category} | {a['tried']:,} | {a['stopped']:,} |")
    if result.get("load"):
        lines += render_load(result["load"], args)
    lines += ["", "## Findings", ""]
    if result["failed_tests"]:
        lines += [f"- failing: `{name}`" for name in result["failed_tests"]]
    else:
        lines.append("- No test failed: no loss, no traceback, no unhandled error.")
    for r in result.get("load", []):
        if r["lost_writes"] or r["errors"]:
            lines.append(
                f"- MCP load on {r['backend']} with {r['servers']} server(s): "
                f"{r['lost_writes']} lost writes, {r['errors']} errors."
            )
    if result["skipped_tests"]:
        lines += [f"- skipped (environment): `{name}`" for name in result["skipped_tests"]]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=5000, help="fuzz inputs per target")
    parser.add_argument("--quick", action="store_true", help="300 inputs per target")
    parser.add_argument("--output", type=Path, default=None, help="write the Markdown here")
    parser.add_argument(
        "--load-seconds", type=float, default=20.0, help="MCP load duration (0 = no load run)"
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent MCP clients")
    parser.add_argument("--dsn", default=None, help="also load the MCP server on PostgreSQL")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args(argv)
    if args.quick:
        args.examples = 300
    before = load()
    result = run_suites(args.examples, args.pytest_args)
    result.update(load_before=before, load_after=load())
    result["load"] = (
        run_load(args.load_seconds, args.clients, args.dsn) if args.load_seconds > 0 else []
    )
    summary = summarise(result["figures"])
    log("")
    log(f"faults: {summary['fault_runs']:,} runs, {summary['acked']:,} acknowledged writes, "
        f"{summary['destroyed']} destroyed by the fault, {summary['lost']} lost")  # fmt: skip
    for name, f in summary["faults"].items():
        log(
            f"  {name}: runs {f['runs']:,}, acknowledged {f['acked']:,}, "
            f"destroyed {f['destroyed']}, lost {f['lost']}"
        )
    log(f"attacks: {summary['attacks_tried']:,} tried, {summary['attacks_passed']} got through")
    log(f"fuzz: {summary['inputs']:,} inputs")
    for target, count in summary["fuzz"].items():
        log(f"  {target}: {count:,}")
    log(
        f"pytest: {result['passed']} passed, {result['failed']} failed, {result['skipped']} skipped"
    )
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(render(result, summary, args), encoding="utf-8")
        log(f"wrote {args.output}")
    for r in result["load"]:
        log(
            f"mcp load ({r['backend']}, {r['servers']} server(s), {r['clients']} clients): "
            f"{r['acknowledged_writes']:,} acknowledged writes, {r['lost_writes']} lost, "
            f"{r['errors']} errors"
        )
    load_ok = all(r["lost_writes"] == 0 and not r["errors"] for r in result["load"])
    safe = summary["attacks_passed"] == 0
    return 0 if result["exit_status"] == 0 and summary["lost"] == 0 and load_ok and safe else 1


if __name__ == "__main__":
    sys.exit(main())
