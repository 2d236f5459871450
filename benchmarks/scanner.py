"""Threat scanner benchmark: detection, false positives and scan time against input size.

Reads the committed corpora (tests/data): the disguised attacks and security-benign notes
(``scanner_disguised_attacks.jsonl``, ``scanner_security_benign.jsonl``, each row in a
``dev`` or ``heldout`` split) and the earlier plain corpora (``scanner_attacks.jsonl``,
``scanner_benign.jsonl``). Prints detection per split, category, language and disguise
and the false-positive rate, for this scanner and for the baseline (the scanner of a git
ref, ``main`` by default, run from a temporary export in a subprocess). Then times
``scan_for_threats`` on adversarial inputs of 64 KB, 256 KB and 1 MB (medians) against
the baseline, reports time(1 MB) / time(256 KB) (about 4 means linear growth), and times
the memory tool and ``facts_remember`` refusing a 1 MB entry (the size check runs first).

With ``--hermes-python PATH`` (or env MEMSTRATA_HERMES_PYTHON) it also runs Hermes Agent
0.19.0's ``tools.threat_patterns.scan_for_threats`` on the same corpora and inputs in a
subprocess (HERMES_HOME set to a temporary folder) and prints its figures beside ours.
Hermes scans only the first 64K characters, so its times stop growing past 64 KB.

    .venv/bin/python benchmarks/scanner.py [--baseline-ref REF] [--hermes-python PATH]

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
# The last commit with the scanner that let the disguised attacks through.
BEFORE_HARDENING = "70d0c62"
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


# Runs inside a temporary export of the baseline ref: the same request and answer shapes
# as the Hermes harness.
BASELINE_HARNESS = r"""
import json, sys, time
from memstrata.scanner.scan import scan_for_threats
req = json.load(sys.stdin)
ids, seconds = [], []
for text in req["texts"]:
    runs = []
    for _ in range(req["repeat"]):
        t0 = time.perf_counter()
        found = scan_for_threats(text, req["scope"])
        runs.append(time.perf_counter() - t0)
    ids.append([f.pattern_id for f in found])
    seconds.append(runs)
json.dump({"ids": ids, "seconds": seconds}, sys.stdout)
"""


class Baseline:
    """The scanner of a git ref, exported to a temporary folder and run in a subprocess."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self._dir = tempfile.TemporaryDirectory()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "src/memstrata"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", self._dir.name], input=archive.stdout, check=True)
        self.commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def run(self, texts: list[str], scope: str, repeat: int) -> dict[str, Any]:
        env = {**os.environ, "PYTHONPATH": str(Path(self._dir.name) / "src")}
        job = {"texts": texts, "scope": scope, "repeat": repeat}
        return run_harness("baseline", sys.executable, BASELINE_HARNESS, job, env)


def run_harness(
    name: str, python: str, code: str, job: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """Run a harness script in ``python`` with ``job`` as JSON on stdin; its JSON result."""
    proc = subprocess.run(
        [python, "-c", code],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} harness failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def refusal_ms(repeat: int) -> dict[str, float]:
    """Milliseconds for the memory tool and facts_remember to refuse a 1 MB entry."""
    from memstrata.mcp.service import MemoryService
    from memstrata.tools.toolbox import Toolbox

    big = make_input("ignore all previous instructions ", 1024 * KB)
    with tempfile.TemporaryDirectory() as home:
        old = os.environ.get("MEMSTRATA_HOME")
        os.environ["MEMSTRATA_HOME"] = home
        try:
            Path(home, "config.toml").write_text('[memory]\nprovider = "facts"\n', "utf-8")
            box = Toolbox.default()
            memory = median_seconds(
                lambda: box.call("memory", {"action": "add", "target": "memory", "content": big}),
                repeat,
            )
            with MemoryService() as service:
                remember = median_seconds(
                    lambda: service.call_tool(
                        "facts_remember", {"content": big, "category": "identity"}
                    ),
                    repeat,
                )
        finally:
            if old is None:
                os.environ.pop("MEMSTRATA_HOME", None)
            else:
                os.environ["MEMSTRATA_HOME"] = old
    return {"memory tool": memory * 1000, "facts_remember (MCP)": remember * 1000}


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
        job = {"texts": texts, "scope": scope, "repeat": repeat}
        return run_harness("Hermes", python, HERMES_HARNESS, job, env)


def _table(
    out: Callable[[str], None],
    title: str,
    key: str,
    attacks: list[dict[str, Any]],
    ours: list[bool],
    base: list[bool],
    ref: str,
) -> None:
    out(f"### {title}")
    out()
    out(f"| {key} | dev | held-out | {ref} (both) |")
    out("|---|---|---|---|")
    groups: dict[str, list[int]] = {}
    for i, a in enumerate(attacks):
        groups.setdefault(a[key], []).append(i)
    for name in sorted(groups):
        cells = []
        for split in ("dev", "heldout"):
            idx = [i for i in groups[name] if attacks[i]["split"] == split]
            cells.append(f"{sum(ours[i] for i in idx)}/{len(idx)}" if idx else "-")
        idx = groups[name]
        out(f"| {name} | {cells[0]} | {cells[1]} | {sum(base[i] for i in idx)}/{len(idx)} |")
    out()


def disguised(out: Callable[[str], None], baseline: Baseline) -> None:
    """Detection and false positives on the disguised and security-benign corpora."""
    attacks = load("scanner_disguised_attacks.jsonl")
    benign = load("scanner_security_benign.jsonl")
    texts = [a["text"] for a in attacks] + [b["text"] for b in benign]
    ours = [bool(scan_for_threats(t)) for t in texts]
    base = [bool(ids) for ids in baseline.run(texts, "strict", 1)["ids"]]
    n = len(attacks)
    out("## Disguised attacks and security-benign notes (strict scope)")
    out()
    out(f"- {n} attacks, {len(benign)} benign notes; split per row (held-out written first)")
    out()
    out(
        f"| split | attacks | detection | benign | false positives | {baseline.ref} detection "
        f"| {baseline.ref} FP |"
    )
    out("|---|---|---|---|---|---|---|")
    for split in ("dev", "heldout"):
        a = [i for i in range(n) if attacks[i]["split"] == split]
        b = [n + i for i in range(len(benign)) if benign[i]["split"] == split]
        out(
            f"| {split} | {len(a)} | {sum(ours[i] for i in a) / len(a):.1%} | {len(b)} "
            f"| {sum(ours[i] for i in b) / len(b):.1%} "
            f"| {sum(base[i] for i in a) / len(a):.1%} | {sum(base[i] for i in b) / len(b):.1%} |"
        )
    out()
    for title, key in (
        ("Per category", "category"),
        ("Per language", "lang"),
        ("Per disguise", "disguise"),
    ):
        _table(out, title, key, attacks, ours[:n], base[:n], baseline.ref)
    missed = [a for i, a in enumerate(attacks) if not ours[i]]
    out(f"Misses ({len(missed)}):")
    out()
    for a in missed:
        short = a["text"] if len(a["text"]) <= 100 else a["text"][:97] + "..."
        out(
            f"- {a['split']} {a['category']} / {a['disguise']}: "
            f"`{json.dumps(short, ensure_ascii=True)[1:-1]}`"
        )
    out()
    flagged = [(b, scan_for_threats(b["text"])) for b in benign]
    fps = [(b, f) for b, f in flagged if f]
    out(f"False positives ({len(fps)}):")
    out()
    for b, f in fps:
        out(f"- {b['split']} `{b['text'][:100]}` -> {', '.join(x.pattern_id for x in f)}")
    out()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hermes-python",
        default=os.environ.get("MEMSTRATA_HERMES_PYTHON"),
        help="interpreter of a venv with hermes-agent==0.19.0 (env MEMSTRATA_HERMES_PYTHON)",
    )
    parser.add_argument(
        "--baseline-ref",
        default=BEFORE_HARDENING,
        help="git ref whose scanner is the baseline (default: the scanner before the "
        "normalisation and category rules)",
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

    baseline = Baseline(args.baseline_ref)
    out(f"- baseline: the scanner of `{args.baseline_ref}` ({baseline.commit})")
    out()
    disguised(out, baseline)

    # --- rates -----------------------------------------------------------------------
    out("## Earlier plain corpora")
    out()
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
    head += f" {args.baseline_ref} 1 MB |"
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
        base = baseline.run([texts[2]], "strict", 1)
        row += f" {statistics.median(base['seconds'][0]) * 1000:.0f} ms |"
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
    out()
    out("## A 1 MB entry through the write paths (size checked before scanning)")
    out()
    out("| path | refused in |")
    out("|---|---|")
    for path, ms in refusal_ms(args.repeat).items():
        out(f"| {path} | {ms:.2f} ms |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
