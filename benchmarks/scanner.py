"""Threat scanner benchmark: detection, false positives and scan time against input size.

Reads the committed corpora (tests/data/scanner_attacks.jsonl, scanner_benign.jsonl),
prints memstrata's detection and false-positive rates per scope, then times
``scan_for_threats`` on adversarial inputs of 64 KB, 256 KB and 1 MB (medians) and
reports time(1 MB) / time(256 KB): about 4 means linear growth.

With ``--hermes-python PATH`` (or env MEMSTRATA_HERMES_PYTHON) it also runs Hermes Agent
0.19.0's ``tools.threat_patterns.scan_for_threats`` on the same corpora and inputs in a
subprocess (HERMES_HOME set to a temporary folder) and prints its figures beside ours.
Hermes scans only the first 64K characters, so its times stop growing past 64 KB.

    .venv/bin/python benchmarks/scanner.py --hermes-python /path/to/hermes/venv/bin/python

Results are written to benchmarks/results/scanner.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstrata.scanner.scan import PATTERNS, SCOPES, scan_for_threats

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
RESULTS = ROOT / "benchmarks" / "results" / "scanner.md"
KB = 1024
SIZES = (64 * KB, 256 * KB, 1024 * KB)

# Adversarial shapes: each unit is repeated up to the target size.
SHAPES: dict[str, str] = {
    "prose": "The deploy note says we rotate keys monthly; staging is at 10.0.3.7. ",
    "repeated 'ignore '": "ignore ",
    "repeated 'ignore all previous '": "ignore all previous ",
    "'ignore ' x n + 'instructions'": "ignore ",
    "whitespace run": " ",
    "many '<!--'": "<!--",
    "nested quotes": "\"'`(\"'",
    "one long word": "a",
    "many hidden tags": "<div hidden>",
    "repeated 'curl -d @'": "curl -d @",
    "zero-width every other char": "a\u200b",
    "full-width letters": "ｉｇｎｏｒｅ　",
}

# Runs inside the Hermes interpreter: reads {"texts": [...], "scope": ..., "repeat": n}
# on stdin, answers {"ids": [[...], ...], "seconds": [[...], ...]} on stdout.
HERMES_HARNESS = r"""
import json, sys, time
from tools.threat_patterns import scan_for_threats
req = json.load(sys.stdin)
ids, seconds = [], []
for text in req["texts"]:
    runs = []
    for _ in range(req["repeat"]):
        t0 = time.perf_counter()
        found = scan_for_threats(text, scope=req["scope"])
        runs.append(time.perf_counter() - t0)
    ids.append(list(found))
    seconds.append(runs)
json.dump({"ids": ids, "seconds": seconds}, sys.stdout)
"""


def load(name: str) -> list[dict[str, Any]]:
    with (DATA / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_input(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def rates(found: list[list[str]], attacks: int) -> tuple[float, float]:
    """Detection rate over the first ``attacks`` rows and FP rate over the rest."""
    hits = sum(1 for ids in found[:attacks] if ids)
    fps = sum(1 for ids in found[attacks:] if ids)
    return hits / attacks, fps / max(1, len(found) - attacks)


def run_hermes(python: str, texts: list[str], scope: str, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HERMES_HOME": home}
        proc = subprocess.run(
            [python, "-c", HERMES_HARNESS],
            input=json.dumps({"texts": texts, "scope": scope, "repeat": repeat}),
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=3600,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"Hermes harness failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hermes-python",
        default=os.environ.get("MEMSTRATA_HERMES_PYTHON"),
        help="interpreter of a venv with hermes-agent==0.19.0 (env MEMSTRATA_HERMES_PYTHON)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timing runs per input (median)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown results file")
    args = parser.parse_args()

    attacks, benign = load("scanner_attacks.jsonl"), load("scanner_benign.jsonl")
    corpus = [a["text"] for a in attacks] + [b["text"] for b in benign]
    lines: list[str] = []

    def out(line: str = "") -> None:
        print(line)
        lines.append(line)

    out("# Threat scanner benchmark")
    out()
    command = "python benchmarks/scanner.py"
    if args.hermes_python:
        command += " --hermes-python PATH"
    out(f"- command: `{command} --repeat {args.repeat}`")
    out(f"- machine: {platform.machine()}, {os.cpu_count()} CPUs")
    out(f"- Python {platform.python_version()}")
    out(f"- load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    out(f"- corpora: {len(attacks)} attacks, {len(benign)} benign entries (tests/data)")
    out(f"- memstrata patterns: {len(PATTERNS)}; timing: median of {args.repeat} runs")
    out()

    # --- rates -----------------------------------------------------------------------
    hermes_rates: dict[str, tuple[float, float]] = {}
    hermes_found: dict[str, list[list[str]]] = {}
    if args.hermes_python:
        for scope in SCOPES:
            res = run_hermes(args.hermes_python, corpus, scope, 1)
            hermes_found[scope] = res["ids"]
            hermes_rates[scope] = rates(res["ids"], len(attacks))

    out("## Detection and false positives")
    out()
    header = "| scope | memstrata detection | memstrata FP |"
    rule = "|---|---|---|"
    if hermes_rates:
        header += " Hermes 0.19.0 detection | Hermes 0.19.0 FP |"
        rule += "---|---|"
    out(header)
    out(rule)
    ours_found: dict[str, list[list[str]]] = {}
    for scope in SCOPES:
        ours_found[scope] = [[f.pattern_id for f in scan_for_threats(t, scope)] for t in corpus]
        det, fp = rates(ours_found[scope], len(attacks))
        row = f"| {scope} | {det:.1%} | {fp:.1%} |"
        if scope in hermes_rates:
            hdet, hfp = hermes_rates[scope]
            row += f" {hdet:.1%} | {hfp:.1%} |"
        out(row)
    out()

    out("### Per attack category (strict scope)")
    out()
    cats: dict[str, list[int]] = {}
    for i, a in enumerate(attacks):
        c = cats.setdefault(a["category"], [0, 0, 0])
        c[0] += 1
        c[1] += bool(ours_found["strict"][i])
        if hermes_found:
            c[2] += bool(hermes_found["strict"][i])
    out(
        "| category | samples | memstrata | Hermes |"
        if hermes_found
        else "| category | samples | memstrata |"
    )
    out("|---|---|---|---|" if hermes_found else "|---|---|---|")
    for name, (n, ours, theirs) in sorted(cats.items()):
        row = f"| {name} | {n} | {ours}/{n} |"
        out(row + (f" {theirs}/{n} |" if hermes_found else ""))
    out()

    def listing(title: str, rows: list[tuple[str, list[str]]]) -> None:
        out(f"{title} ({len(rows)}):")
        out()
        for text, ids in rows:
            short = text if len(text) <= 110 else text[:107] + "..."
            out(f"- `{json.dumps(short, ensure_ascii=True)[1:-1]}` -> {', '.join(ids) or '(none)'}")
        out()

    n = len(attacks)
    listing(
        "memstrata misses at strict",
        [(corpus[i], []) for i in range(n) if not ours_found["strict"][i]],
    )
    listing(
        "memstrata false positives at strict",
        [
            (corpus[i], ours_found["strict"][i])
            for i in range(n, len(corpus))
            if ours_found["strict"][i]
        ],
    )
    if hermes_found:
        listing(
            "Hermes false positives at strict",
            [
                (corpus[i], hermes_found["strict"][i])
                for i in range(n, len(corpus))
                if hermes_found["strict"][i]
            ],
        )

    # --- time vs size ------------------------------------------------------------------
    out("## Scan time against input size (strict scope)")
    out()
    head = "| input | " + " | ".join(f"{s // KB} KB" for s in SIZES) + " | 1 MB / 256 KB |"
    if args.hermes_python:
        head += " Hermes 64 KB | Hermes 1 MB |"
    out(head)
    out("|---" * (head.count("|") - 1) + "|")
    for name, unit in SHAPES.items():
        # The "+ 'instructions'" shape ends with the object word, so the anchor prefilter
        # cannot skip the patterns and every "ignore" is a full failed attempt.
        suffix = " instructions" if "+ 'instructions'" in name else ""
        texts = [make_input(unit, size - len(suffix)) + suffix for size in SIZES]
        secs = [median_seconds(lambda t=t: scan_for_threats(t), args.repeat) for t in texts]
        row = f"| {name} | " + " | ".join(f"{s * 1000:.0f} ms" for s in secs)
        row += f" | {secs[2] / secs[1]:.2f} |"
        if args.hermes_python:
            res = run_hermes(args.hermes_python, [texts[0], texts[2]], "strict", args.repeat)
            h64, h1m = (statistics.median(r) for r in res["seconds"])
            row += f" {h64 * 1000:.0f} ms | {h1m * 1000:.0f} ms |"
        out(row)
    out()
    out(
        "A ratio near 4 is linear growth. memstrata scans the whole text (in overlapping "
        "64K windows); Hermes scans the first 64K characters only, so its 1 MB time covers "
        "64K of text and a payload placed after them is not seen."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
