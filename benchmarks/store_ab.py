"""Search latency of two versions of memstrata on the same kept databases, beside Hermes.

Usage::

    python benchmarks/store_ab.py --db-dir PATH --baseline-src PATH/src
        [--baseline-label COMMIT] [--size 1000000] [--classes phrase,word]
        [--rounds 3] [--repeats 3]
        [--hermes-python PATH] [--recall-before MD --recall-after MD]
        [--note TEXT] --out benchmarks/results/store_1m_phrase.md

The databases are the ones ``benchmarks/store.py --build bulk --db-dir PATH --build-only``
(with ``--hermes-python``) kept: ``memstrata-<size>-bulk.db`` and ``hermes-<size>.db``.
For each round and class, three fresh processes search one after the other: memstrata
with ``--baseline-src`` first on ``PYTHONPATH`` (*before*), memstrata with this
checkout's ``src`` (*after*), Hermes 0.19.0. A burst of other work on a shared machine
then weighs on all three sides of each ratio. Each query runs ``--repeats`` times per
round; a query's figure is the median of all its runs, a class's p50/p95 are over its
queries (as in ``store.py``). Both memstrata versions also return the ids and scores of
every query's page (``limit=20``), which must be equal: the change may move time, not
results.

``--recall-before`` / ``--recall-after`` name the Markdown reports of
``benchmarks/recall.py`` run with each version (the keyword rows are copied into the
report).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path
import store  # Hermes driver, percentiles, load average

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
LIMIT = 20


def job(request: dict[str, Any]) -> dict[str, Any]:
    """The body of ``--job``: time every query of ``request["queries"]`` on one store, in
    this interpreter (whose memstrata is the one on its ``PYTHONPATH``)."""
    import memstrata

    with store.open_store(Path(request["db"]), "normal") as s:
        s.search_messages("warmup", limit=LIMIT)
        out: dict[str, list[dict[str, Any]]] = {}
        for cls, queries in request["queries"].items():
            rows = []
            for q in queries:
                times: list[float] = []
                cpu: list[float] = []
                page: list[tuple[int, float]] = []
                for i in range(int(request["repeats"])):
                    c0, t0 = time.process_time(), time.perf_counter()
                    hits = s.search_messages(q, limit=LIMIT)
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                    if i == 0:
                        page = [(int(h["id"]), float(h["score"])) for h in hits]
                rows.append(
                    {"query": q, "times": times, "cpu": cpu, "hits": len(page), "page": page}
                )
            out[cls] = rows
    return {"classes": out, "memstrata": memstrata.__file__}


def run_side(src: Path, request: dict[str, Any]) -> dict[str, Any]:
    """``job(request)`` in a fresh interpreter with ``src`` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--job"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"search process failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def commit_of(src: Path) -> str:
    """The git commit of the checkout holding ``src`` (or "unknown" outside git)."""
    try:
        return subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    medians = [statistics.median(r["times"]) * 1000 for r in rows]
    cpu = [statistics.median(r["cpu"]) * 1000 for r in rows if r.get("cpu")]
    return {
        "cpu_p50_ms": store.percentile(cpu, 50) if cpu else None,
        "cpu_p95_ms": store.percentile(cpu, 95) if cpu else None,
        "queries": len(rows),
        "with_hits": sum(1 for r in rows if r["hits"] > 0),
        "p50_ms": store.percentile(medians, 50),
        "p95_ms": store.percentile(medians, 95),
        "max_ms": max(medians),
    }


# Pasted pages of text (benchmarks/pg_query_bounds.py's two shapes), ten of each: a
# query of hundreds of terms, where the corpus classes have a few.
PASTED = ("pasted_cjk", "pasted_code")


def class_queries(cls: str) -> list[str]:
    """The queries of one class: the corpus's, ``zhq`` (Chinese questions, half with a
    homophone slip: corpus.zh_questions), or ten pasted pages for a PASTED class."""
    if cls == "zhq":
        return corpus.zh_questions()
    if cls not in PASTED:
        return corpus.queries()[cls]
    import pg_query_bounds  # only these classes need it

    make = pg_query_bounds.cjk_query if cls == "pasted_cjk" else pg_query_bounds.code_query
    return [make(corpus.SEED + i) for i in range(10)]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    queries = {c: class_queries(c) for c in args.classes.split(",")}
    ours_db = args.db_dir / f"memstrata-{args.size}-bulk.db"
    hermes_db = args.db_dir / f"hermes-{args.size}.db"
    for db in (ours_db, *([hermes_db] if args.hermes_python else [])):
        if not db.exists():
            raise SystemExit(f"{db} is missing: build it with benchmarks/store.py --db-dir.")
    hermes = (
        store.Hermes(args.hermes_python, args.db_dir / "hermes-home")
        if args.hermes_python
        else None
    )
    sides: dict[str, dict[str, list[dict[str, Any]]]] = {"before": {}, "after": {}, "hermes": {}}
    pages: dict[str, dict[str, list[Any]]] = {"before": {}, "after": {}}

    def add(side: str, cls: str, rows: list[dict[str, Any]]) -> None:
        kept = sides[side].setdefault(
            cls, [{"query": r["query"], "times": [], "cpu": [], "hits": r["hits"]} for r in rows]
        )
        for row, new in zip(kept, rows, strict=True):
            row["times"] += new["times"]
            row["cpu"] += new.get("cpu", [])
        if side in pages:
            pages[side].setdefault(cls, [r["page"] for r in rows])

    for rnd in range(args.rounds):
        for cls, qs in queries.items():
            one = {cls: qs}
            store.log(f"round {rnd + 1}/{args.rounds}: {cls}")
            for side, src in (("before", args.baseline_src), ("after", SRC)):
                request = {"db": str(ours_db), "queries": one, "repeats": args.repeats}
                add(side, cls, run_side(src, request)["classes"][cls])
            if hermes is not None:
                theirs = hermes.run(
                    {
                        "op": "search",
                        "db_path": str(hermes_db),
                        "queries": one,
                        "repeats": args.repeats,
                    }
                )["classes"][cls]
                add("hermes", cls, theirs)
    same = {
        cls: sum(
            1 for b, a in zip(pages["before"][cls], pages["after"][cls], strict=True) if b == a
        )
        for cls in queries
    }
    return {
        "classes": list(queries),
        "searches": sides,
        "summary": {
            side: {cls: summary(rows) for cls, rows in by_cls.items()}
            for side, by_cls in sides.items()
            if by_cls
        },
        "same_pages": same,
    }


def recall_rows(path: Path) -> list[str]:
    """The table rows of the keyword system (``memstrata``) in a recall.py report, with
    the heading of the dataset each belongs to."""
    out: list[str] = []
    heading = ""
    header = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        elif line.startswith("| system"):
            header = line
        elif line.startswith("| memstrata"):
            out.append(f"{heading}\t{header}\t{line}")
    return out


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"# Search at {results['size']:,} messages ({', '.join(results['classes'])}): "
        "before and after"
        + (", beside Hermes Agent 0.19.0" if results["summary"].get("hermes") else ""),
        "",
        f"Produced by `{meta['command']}` on {meta['date']}.",
        "",
    ]
    if meta.get("note"):
        lines += [meta["note"], ""]
    lines += [
        f"Machine: {meta['cpus']} CPUs, Python {meta['python']}, SQLite {meta['sqlite']}, "
        f"{meta['platform']}. The machine is **shared with other jobs**: load average "
        f"{meta['load_before']} before and {meta['load_after']} after the run. "
        f"{results['rounds']} rounds; in each, per class, memstrata *before* "
        f"(commit {meta['before']}), memstrata *after* (commit {meta['after']}) and Hermes "
        "search one after the other, each in a fresh process, on the same database files "
        f"({results['size']:,} messages, built by `benchmarks/store.py --build bulk`). "
        f"Each query ran {results['repeats']} times per round; its figure is the median of "
        "all its runs; p50/p95 are over the class's queries (40 of each corpus class, "
        "10 pasted pages of each pasted class), in milliseconds "
        f"(`search_messages(query, limit={LIMIT})`).",
        "",
        "| class | before p50 | before p95 | after p50 | after p95 | after/before p95 "
        "| Hermes p50 | Hermes p95 | after/Hermes p95 | same pages |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summ = results["summary"]
    for cls in results["classes"]:
        b, a = summ["before"][cls], summ["after"][cls]
        h = summ.get("hermes", {}).get(cls)
        her = (
            f"{h['p50_ms']:.2f} | {h['p95_ms']:.2f} | {a['p95_ms'] / h['p95_ms']:.2f}×"
            if h
            else "– | – | –"
        )
        lines.append(
            f"| {cls} | {b['p50_ms']:.2f} | {b['p95_ms']:.2f} | {a['p50_ms']:.2f} | "
            f"{a['p95_ms']:.2f} | {a['p95_ms'] / b['p95_ms']:.2f}× | {her} | "
            f"{results['same_pages'][cls]}/{a['queries']} |"
        )
    lines += [
        "",
        "*same pages*: queries whose page of 20 (ids and scores, in order) is identical "
        "before and after.",
        "",
        "The same runs in CPU time of the searching process (`time.process_time`, ms): on a "
        "loaded machine it moves far less than wall time (Hermes' harness reports wall "
        "time only).",
        "",
        "| class | before p50 | before p95 | after p50 | after p95 | after/before p95 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cls in results["classes"]:
        b, a = summ["before"][cls], summ["after"][cls]
        if b.get("cpu_p95_ms") is None or a.get("cpu_p95_ms") is None:
            continue
        lines.append(
            f"| {cls} | {b['cpu_p50_ms']:.2f} | {b['cpu_p95_ms']:.2f} | {a['cpu_p50_ms']:.2f} | "
            f"{a['cpu_p95_ms']:.2f} | {a['cpu_p95_ms'] / b['cpu_p95_ms']:.2f}× |"
        )
    lines.append("")
    recall = results.get("recall")
    if recall:
        lines += [
            "## Recall before and after (keyword search, `benchmarks/recall.py`)",
            "",
        ]
        # One table per recall table kind: its rows before and after, side by side.
        tables: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for side in ("before", "after"):
            for row in recall[side]:
                heading, header, line = row.split("\t")
                tables.setdefault((heading, header), []).append((side, line))
        for (heading, header), rows in tables.items():
            lines += [
                f"{heading}:",
                "",
                "| version " + header,
                "|---" + "|---" * (header.count("|") - 1) + "|",
                *(f"| {side} {line}" for side, line in rows),
                "",
            ]
    if results.get("findings"):
        lines += ["## Where the time goes", "", results["findings"], ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db-dir", type=Path, help="the databases kept by store.py --db-dir")
    parser.add_argument("--baseline-src", type=Path, help="src folder of the version before")
    parser.add_argument(
        "--baseline-label", help="its commit, when --baseline-src is not in a git checkout"
    )
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument(
        "--classes",
        default="phrase",
        help=f"query classes, comma-separated (corpus classes, zhq, or {', '.join(PASTED)})",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hermes-python", default=os.environ.get("MEMSTRATA_HERMES_PYTHON"))
    parser.add_argument("--recall-before", type=Path)
    parser.add_argument("--recall-after", type=Path)
    parser.add_argument("--findings", type=Path, help="a Markdown paragraph file to include")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, required=False)
    parser.add_argument("--render", type=Path, help="only re-render --out from this JSON")
    args = parser.parse_args(argv)
    if args.job:
        print(json.dumps(job(json.loads(sys.stdin.readline()))))
        return 0
    if args.render:
        results = json.loads(args.render.read_text(encoding="utf-8"))
        if args.findings:
            results["findings"] = args.findings.read_text(encoding="utf-8").strip()
        args.render.write_text(json.dumps(results, indent=1, ensure_ascii=False), "utf-8")
        args.out.write_text(render(results), encoding="utf-8")
        return 0
    if args.db_dir is None or args.baseline_src is None or args.out is None:
        parser.error("--db-dir, --baseline-src and --out are required")
    paths = ("--db-dir", "--baseline-src", "--hermes-python", "--recall-before")
    paths += ("--recall-after", "--findings")
    shown = [
        "PATH" if prev in paths else shlex.quote(arg)
        for prev, arg in zip(["", *sys.argv[1:]], sys.argv[1:], strict=False)
    ]
    meta = {
        "command": " ".join(["python benchmarks/store_ab.py", *shown]),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "note": args.note,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "before": args.baseline_label or commit_of(args.baseline_src),
        "after": commit_of(SRC),
        "load_before": store.load_average(),
    }
    results: dict[str, Any] = {
        "meta": meta,
        "size": args.size,
        "rounds": args.rounds,
        "repeats": args.repeats,
    }
    results.update(measure(args))
    meta["load_after"] = store.load_average()
    if args.recall_before and args.recall_after:
        results["recall"] = {
            "before": recall_rows(args.recall_before),
            "after": recall_rows(args.recall_after),
        }
    if args.findings:
        results["findings"] = args.findings.read_text(encoding="utf-8").strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8"
    )
    report = render(results)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
