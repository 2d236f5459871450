"""PostgreSQL search on a tenant marked all-visible, against the same tenant unmarked.

Usage::

    python benchmarks/pg_visibility.py --dsn postgresql://127.0.0.1:5432/test \\
        [--big 1000000] [--messages 100000] [--rounds 5] \\
        [--out benchmarks/results/pg_visibility.md]

A tenant much smaller than its table stays under the table's VACUUM threshold (which
counts the table's rows), so its pages are not marked all-visible and every index-only
read of its newest ids (a walk's window bounds, the probe's sample) visits the heap for
each id. Would a store that marked its own tenant's pages after a bulk write search it
faster? In a fresh schema (``--schema``, dropped afterwards unless ``--keep``) this
loads a big tenant, then the corpus as tenant ``marked``, then runs ``VACUUM
(INDEX_CLEANUP OFF)`` (it only marks pages: no index is read), then loads the corpus
again as tenant ``unmarked``, which the table's rule leaves unvacuumed. One worker
process per tenant searches it, every query of each class ``--rounds`` times,
interleaved query by query with the side going first alternating. Figures are p50/p95
per class and the ratio marked/unmarked, with the table's share of all-visible pages and
the time of the marking pass. The two tenants hold the same text, loaded by parallel
clients, so their ids interleave differently: their pages of hits are compared by size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from store import log, percentile  # noqa: E402  (the benchmarks' own helpers, by path)
from store_ab import commit_of  # noqa: E402
from store_postgres_ab import (  # noqa: E402
    CLASSES,
    SRC,
    Side,
    fmt,
    interleaved,
    load_average,
    queries,
    server_version,
    shown_command,
)

DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
SIDES = ("marked", "unmarked")


def load(schema_dsn: str, namespace: str, n: int, clients: int) -> None:
    """Load ``n`` corpus messages as ``namespace`` through the public API."""
    import corpus
    import store_postgres

    with tempfile.TemporaryDirectory(prefix="memstrata-pg-vis-") as work:
        parts = store_postgres.write_parts(Path(work), n, corpus.SEED, clients)
        store_postgres.load_tenant(schema_dsn, namespace, parts, n, keep=False)


def mark_visible(schema_dsn: str) -> float:
    """Mark the table's pages all-visible; the seconds it took."""
    import psycopg

    with psycopg.connect(schema_dsn, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("VACUUM (INDEX_CLEANUP OFF, SKIP_LOCKED) messages")
        return time.perf_counter() - started


def visible_share(schema_dsn: str) -> float:
    """The share of the messages table's pages marked all-visible."""
    import psycopg

    with psycopg.connect(schema_dsn) as conn:
        row = conn.execute(
            "SELECT relallvisible::float / greatest(relpages, 1) FROM pg_class "
            "WHERE oid = 'messages'::regclass"
        ).fetchone()
    return float(row[0]) if row else 0.0


def search_both(schema_dsn: str, rounds: int, classes: tuple[str, ...]) -> dict[str, Any]:
    """Each tenant searched by a worker of its own, interleaved; ms per class."""
    qs = queries(classes)
    sides = [Side(label, SRC, schema_dsn, label) for label in SIDES]
    runs: dict[str, dict[str, list[float]]] = {s.label: {c: [] for c in qs} for s in sides}
    sizes = {"same": 0, "different": 0}
    try:
        for items in qs.values():
            for q in items:
                for s in sides:
                    s.search(q)  # warm-up
        for cls, _, _, answers in interleaved(sides, qs, rounds):
            for s in sides:
                runs[s.label][cls].append(answers[s.label]["ms"])
            pages = {len(a["hits"]) for a in answers.values()}
            sizes["same" if len(pages) == 1 else "different"] += 1
    finally:
        for s in sides:
            s.close()
    return {"runs": runs, "sizes": sizes}


def render(report: dict[str, Any]) -> str:
    runs = report["runs"]
    sizes = report["sizes"]
    lines = [
        "# PostgreSQL search on a tenant marked all-visible, against unmarked "
        f"({report['messages']:,} messages beside {report['big']:,})",
        "",
        f"`{report['command']}`",
        "",
        f"The same {report['messages']:,} corpus messages loaded twice into one table beside "
        f"a tenant of {report['big']:,}, by {report['commit']}: `marked`, whose pages `VACUUM "
        "(INDEX_CLEANUP OFF)` then marked all-visible, and `unmarked`, loaded after it and "
        "left as the table's VACUUM rule leaves it. All-visible pages of the table then: "
        f"{report['visible_before']:.0%}. One worker per tenant, {report['rounds']} timed "
        "rounds after a warm-up, interleaved query by query, the side going first "
        f"alternating; `search_messages(query, limit=20)`. {report['platform']}, "
        f"PostgreSQL {report['server']}; load average {report['load_before']} before, "
        f"{report['load_after']} after (a shared machine: compare the columns of one run).",
        "",
        f"Pages of hits of the same size: {sizes['same']:,}/"
        f"{sizes['same'] + sizes['different']:,}.",
        "",
        "| class | p50 unmarked → marked (ms) | p95 unmarked → marked (ms) | p95 marked/unmarked |",
        "|---|---:|---:|---:|",
    ]
    for cls in runs["marked"]:
        a, b = runs["unmarked"][cls], runs["marked"][cls]
        p95a, p95b = percentile(a, 95), percentile(b, 95)
        lines.append(
            f"| {cls} | {fmt(percentile(a, 50))} → {fmt(percentile(b, 50))} | "
            f"{fmt(p95a)} → {fmt(p95b)} | {p95b / p95a:.2f} |"
        )
    lines += [
        "",
        f"Marking the pages after the `marked` load took {report['pass_seconds']:.2f} s; "
        f"after the `unmarked` one {report['second_pass_seconds']:.2f} s (all-visible "
        f"pages then {report['visible_after']:.0%}).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import psycopg

    import store_postgres

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--schema", default="memstrata_visibility")
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    classes = tuple(c for c in args.classes.split(",") if c)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": shown_command(
            sys.argv[1:] if argv is None else argv, "benchmarks/pg_visibility.py"
        ),
        "commit": commit_of(SRC),
        "messages": args.messages,
        "big": args.big,
        "rounds": args.rounds,
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "server": server_version(args.dsn),
        "load_before": load_average(),
    }
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {args.schema} CASCADE")
    try:
        with store_postgres.kept_schema(args.dsn, args.schema) as schema_dsn:
            log(f"loading the big tenant ({args.big:,})")
            load(schema_dsn, "big", args.big, args.clients)
            load(schema_dsn, "marked", args.messages, args.clients)
            report["pass_seconds"] = mark_visible(schema_dsn)
            load(schema_dsn, "unmarked", args.messages, args.clients)
            report["visible_before"] = visible_share(schema_dsn)
            report.update(search_both(schema_dsn, args.rounds, classes))
            report["second_pass_seconds"] = mark_visible(schema_dsn)
            report["visible_after"] = visible_share(schema_dsn)
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {args.schema} CASCADE")
    report["load_after"] = load_average()
    report["seconds"] = round(time.perf_counter() - started, 1)
    text = render(report)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
