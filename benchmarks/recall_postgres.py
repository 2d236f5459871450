"""Session recall on LoCoMo-format conversations with the PostgreSQL store.

Usage:
    python benchmarks/recall_postgres.py PATH/locomo.json [--dsn DSN] [--limit-questions N]
        [--output benchmarks/results/recall_postgres.md]

The PostgreSQL twin of ``benchmarks/recall.py``, reusing its loading and scoring: each
conversation goes into its own tenant (namespace) of one PostgreSQL database, one store
session per LoCoMo session and one message per turn, and every question (category 5
left out) is asked verbatim through the public ``PostgresSessionStore.search_sessions``.
A MADial-Bench folder (``*-memory.jsonl``, ``*-dialogue.jsonl``) is read as
``recall.py`` reads it. The SQLite store answers the same questions in the same run
(``SessionStore.search_sessions``), each
backend with its date evidence, as shipped, and without it, so the figures sit beside a
baseline measured on the same machine and code.

The run works in a schema of its own (``memstrata_recall_<pid>``, dropped at the end),
so it never reads or deletes anyone else's rows in the database.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall  # the SQLite benchmark: loading, filling, scoring
from memstrata.store.postgres import PostgresSessionStore
from memstrata.store.sqlite.store import SessionStore

DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def schema_dsn(dsn: str, schema: str) -> str:
    """``dsn`` with its search_path set to ``schema`` (then public, for pg_trgm)."""
    options = quote(f"-csearch_path={schema},public")
    return f"{dsn}{'&' if '?' in dsn else '?'}options={options}"


@contextmanager
def own_schema(dsn: str) -> Iterator[str]:
    """A fresh schema for this run, dropped afterwards; yields a DSN that uses it."""
    import psycopg

    schema = f"memstrata_recall_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_dsn(dsn, schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def run(path: Path, dsn: str, limit_questions: int | None) -> dict[str, Any]:
    """Scores and per-question latencies of PostgreSQL and the two SQLite baselines."""
    convs = (
        recall.load_madial(path, limit_questions)
        if path.is_dir()
        else recall.load(path, limit_questions)
    )
    systems = ("postgres", "postgres (no dates)", "sqlite (shipped)", "sqlite (no dates)")
    scores = {name: recall.Scores() for name in systems}
    times: dict[str, list[float]] = {name: [] for name in systems}
    with own_schema(dsn) as run_dsn, tempfile.TemporaryDirectory() as tmp:
        for i, conv in enumerate(convs):
            log(f"{conv.name}: {len(conv.sessions)} sessions, {len(conv.questions)} questions")
            pg = PostgresSessionStore(run_dsn, namespace=f"locomo-{i}", pool_size=2)
            lite = SessionStore(Path(tmp) / f"{i}.db")
            try:
                recall.fill(pg, conv)  # type: ignore[arg-type]  # the same public methods
                recall.fill(lite, conv)
                pg.optimize()
                askers: dict[str, Callable[[str], list[dict[str, Any]]]] = {
                    "postgres": partial(pg.search_sessions, limit=10),
                    "postgres (no dates)": partial(pg.search_sessions, limit=10, dates=False),
                    "sqlite (shipped)": partial(lite.search_sessions, limit=10),
                    "sqlite (no dates)": partial(lite.search_sessions, limit=10, dates=False),
                }
                for question, category, gold in conv.questions:
                    for name, ask in askers.items():
                        start = time.perf_counter()
                        hits = ask(question)
                        times[name].append((time.perf_counter() - start) * 1000)
                        scores[name].add(category, [h["session_id"] for h in hits], gold)
            finally:
                pg.close()
                lite.close()
    return {"scores": scores, "times": times, "conversations": len(convs)}


def shown_output(path: Path) -> str:
    """``path`` as the report quotes it: relative to the repository, never a home folder."""
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return path.name


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The Markdown result page."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    times = result["times"]
    lines = [
        f"# Session recall on PostgreSQL ({'MADial-Bench' if args.path.is_dir() else 'LoCoMo'})\n",
        f"Produced by `python benchmarks/recall_postgres.py {args.path.name}"
        f"{' --limit-questions ' + str(args.limit_questions) if args.limit_questions else ''}"
        f"{' --output ' + shown_output(args.output) if args.output else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n",
        f"Data: `{args.path.name}`, {result['conversations']} conversations, each in its own "
        "tenant (namespace) of one PostgreSQL database and in its own SQLite file; "
        "questions asked verbatim, category 5 (adversarial) left out. "
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"memstrata commit {commit or 'unknown'} (with local changes); the machine is "
        "shared with other jobs, so latencies are medians and carry that noise.\n",
        "Systems: `postgres` is `PostgresSessionStore.search_sessions` as shipped (with "
        "date evidence); `sqlite (shipped)` is `SessionStore.search_sessions` as shipped; the "
        "`(no dates)` rows turn date evidence off (`dates=False`). Speaker and embedding "
        "evidence are off by default on both backends.\n",
        recall.table(result["scores"]),
        "",
        "Per-question latency (ms), small stores (one conversation each, 19-32 sessions):\n",
        "| system | median | p95 |",
        "|---|---:|---:|",
    ]
    for name, ms in times.items():
        ordered = sorted(ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        lines.append(f"| {name} | {statistics.median(ordered):.1f} | {p95:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables and optionally write them to --output."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="LoCoMo-format JSON file or MADial-Bench folder")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("MEMSTRATA_BENCH_PG_DSN", DEFAULT_DSN),
        help="PostgreSQL database to work in (a schema of its own is created and dropped)",
    )
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    args = parser.parse_args(argv)
    result = run(args.path, args.dsn, args.limit_questions)
    text = report(result, args)
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
