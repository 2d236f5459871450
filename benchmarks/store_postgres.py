"""The PostgreSQL half of ``benchmarks/store.py`` (``--backend postgres|both``).

Measures, on the same corpus and in the same run, for the SQLite store (one file) and
the PostgreSQL store (one namespace):

* append throughput with ``--clients`` processes (default 8) appending at once, one
  ``append_messages`` call per turn, each client into its own sessions; the processes
  start together at an agreed instant and the rate is all messages over the span from
  the first start to the last end; afterwards every message is counted (nothing lost);
* search latency p50/p95 per query class at each size, ``search_messages(query,
  limit=20)`` from one client, as the SQLite benchmark times it.

Run through ``benchmarks/store.py``; ``python benchmarks/store_postgres.py worker ...``
is the client process it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path

HERE = Path(__file__).resolve().parent
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
# Seconds between starting the clients and the agreed start: imports and session
# creation happen before it, so they are not timed.
START_DELAY = 4.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def open_store(backend: str, target: str, namespace: str) -> Any:
    """A store of ``backend`` on ``target`` (a file path or a DSN)."""
    if backend == "sqlite":
        from memstrata.store.sqlite.store import SessionStore

        return SessionStore(Path(target), durability="normal")
    from memstrata.store.postgres import PostgresSessionStore

    return PostgresSessionStore(target, namespace=namespace, durability="normal")


@contextmanager
def own_schema(dsn: str, label: str) -> Iterator[str]:
    """A fresh schema for one phase of a run, dropped afterwards; yields a DSN using it.

    Each phase starts from empty tables: rows deleted by an earlier phase (or by anyone
    else's work in the database) stay in the indexes until a VACUUM, and would be
    measured as part of the search. Nothing outside the schema is read or changed.
    """
    import psycopg

    schema = f"memstrata_bench_{label}_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        # public stays on the path for the extensions (pg_trgm, btree_gin) installed there.
        yield psycopg.conninfo.make_conninfo(dsn, options=f"-csearch_path={schema},public")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


# ------------------------------------------------------------------------------ client
def write_parts(work: Path, n: int, seed: int, parts: int) -> list[Path]:
    """Generate the ``n``-message corpus once and deal its sessions into ``parts`` files.

    The clients read their own file instead of each generating the whole corpus (which
    cost every loader the full generation time, on CPUs the databases need).
    """
    paths = [work / f"corpus-{n}-{seed}-{i}of{parts}.json" for i in range(parts)]
    shares: list[list[dict[str, Any]]] = [[] for _ in range(parts)]
    for i, s in enumerate(corpus.generate(n, seed=seed)):
        shares[i % parts].append({"id": s.id, "source": s.source, "turns": s.turns})
    for path, share in zip(paths, shares, strict=True):
        path.write_text(json.dumps(share), encoding="utf-8")
    return paths


def worker(args: argparse.Namespace) -> int:
    """One client: its share of the corpus, appended turn by turn from ``start_at``."""
    sessions = [
        corpus.Session(d["id"], d["source"], 0.0, False, d["turns"])
        for d in json.loads(Path(args.part_file).read_text(encoding="utf-8"))
    ]
    store = open_store(args.backend, args.target, args.namespace)
    try:
        for s in sessions:
            store.create_session(f"{args.prefix}{s.id}", source=s.source)
        if args.start_at:
            time.sleep(max(0.0, args.start_at - time.time()))
        started = time.time()
        count = 0
        if args.mode == "turn":
            for s in sessions:
                for turn in s.turns:
                    store.append_messages(f"{args.prefix}{s.id}", turn)
                    count += len(turn)
        else:  # a bulk load: one call per session
            for s in sessions:
                store.append_messages(f"{args.prefix}{s.id}", s.messages)
                count += len(s.messages)
        ended = time.time()
    finally:
        store.close()
    print(json.dumps({"messages": count, "started": started, "ended": ended}))
    return 0


def run_clients(
    backend: str,
    target: str,
    namespace: str,
    *,
    parts: list[Path],
    mode: str,
    prefix: str,
) -> dict[str, Any]:
    """Start one process per corpus part file (see :func:`write_parts`); return the totals."""
    start_at = time.time() + START_DELAY if mode == "turn" else 0.0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "worker",
                "--backend", backend,
                "--target", target,
                "--namespace", namespace,
                "--part-file", str(part),
                "--mode", mode,
                "--prefix", f"{prefix}{i}-",
                "--start-at", str(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, part in enumerate(parts)
    ]  # fmt: skip
    reports = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{backend} client failed ({proc.returncode}): {err[-2000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    first = min(r["started"] for r in reports)
    last = max(r["ended"] for r in reports)
    total = sum(r["messages"] for r in reports)
    return {"messages": total, "seconds": last - first, "rate": total / (last - first)}


def count_messages(backend: str, target: str, namespace: str, prefix: str) -> int:
    """Messages stored in sessions whose id starts with ``prefix``."""
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(target)
        try:
            row = conn.execute(
                "SELECT count(*) FROM messages WHERE session_id LIKE ?", (prefix + "%",)
            ).fetchone()
        finally:
            conn.close()
        return int(row[0])
    import psycopg

    with psycopg.connect(target) as pg_conn:
        found = pg_conn.execute(
            "SELECT count(*) FROM messages WHERE namespace = %s AND session_id LIKE %s",
            (namespace, prefix + "%"),
        ).fetchone()
    return int(found[0]) if found else 0


# ------------------------------------------------------------------------------ runner
def run(
    work: Path,
    *,
    dsn: str,
    sizes: list[int],
    clients: int,
    append_n: int,
    repeats: int,
    time_queries: Any,
    summarize_classes: Any,
) -> dict[str, Any]:
    """Both backends: multi-client appends, then a corpus per size and its search times.

    PostgreSQL's search is timed twice per size: alone in its tables, then after a
    second tenant of the same size has loaded the same corpus (newer rows holding the
    same words), which is what a shared multi-tenant database looks like.
    """
    namespace = "bench"
    out: dict[str, Any] = {"dsn_host": dsn.split("@")[-1], "clients": clients, "sizes": []}
    append_parts = [write_parts(work, append_n, corpus.SEED + r, clients) for r in range(repeats)]
    append: list[dict[str, Any]] = []
    with own_schema(dsn, "append") as append_dsn:
        targets = {"sqlite": str(work / "multi-client.db"), "postgres": append_dsn}
        for backend, target in targets.items():
            runs = []
            for r in range(repeats):
                prefix = f"mc{r}-"
                res = run_clients(
                    backend, target, namespace, parts=append_parts[r], mode="turn",
                    prefix=prefix,
                )  # fmt: skip
                res["stored"] = count_messages(backend, target, namespace, prefix)
                runs.append(res)
                log(
                    f"append {backend}, {clients} clients: {res['rate']:,.0f} msg/s "
                    f"({res['stored']:,}/{res['messages']:,} stored)"
                )
            rates = [r["rate"] for r in runs]
            append.append(
                {
                    "backend": backend,
                    "rates": rates,
                    "rate": statistics.median(rates),
                    "messages": runs[0]["messages"],
                    "lost": sum(r["messages"] - r["stored"] for r in runs),
                }
            )
    out["append"] = append
    queries = corpus.queries()

    def timed_search(backend: str, target: str) -> dict[str, Any]:
        store = open_store(backend, target, namespace)
        try:
            if backend == "postgres":
                # What autovacuum does after a bulk load (it is off on some servers):
                # planner statistics and the visibility map for the fresh rows.
                store.vacuum()
                store.optimize()  # and the GIN pending lists flushed
            store.search_messages("warmup", limit=20)
            timed = time_queries(
                lambda q, s=store: len(s.search_messages(q, limit=20)), queries, repeats, slow_s=2.0
            )
        finally:
            store.close()
        return dict(summarize_classes(timed))

    for n in sizes:
        size: dict[str, Any] = {"size": n}
        db = work / f"search-{n}.db"
        parts = write_parts(work, n, corpus.SEED, clients)
        with own_schema(dsn, f"search{n}") as pg_dsn:
            for backend, target in (("sqlite", str(db)), ("postgres", pg_dsn)):
                log(f"size {n}: loading {backend} with {clients} loaders ...")
                load = run_clients(
                    backend, target, namespace, parts=parts, mode="session", prefix="s",
                )  # fmt: skip
                size[f"{backend}_load"] = load
                log(f"size {n}: {backend} loaded in {load['seconds']:.0f} s; search ...")
                size[f"{backend}_summary"] = timed_search(backend, target)
            log(f"size {n}: loading a second PostgreSQL tenant of {n:,} messages ...")
            run_clients(
                "postgres", pg_dsn, "bench-neighbour", parts=parts, mode="session", prefix="s"
            )
            log(f"size {n}: search beside the second tenant ...")
            size["postgres_shared_summary"] = timed_search("postgres", pg_dsn)
        out["sizes"].append(size)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        for part in parts:
            part.unlink(missing_ok=True)
    return out


# ------------------------------------------------------------------------------ report
def render(pg: dict[str, Any], class_labels: dict[str, str], fmt_ms: Any) -> list[str]:
    """The Markdown section of the PostgreSQL figures (lines)."""
    lines: list[str] = []
    w = lines.append
    w("## PostgreSQL beside SQLite (same run)\n")
    w(
        f'PostgreSQL at `{pg["dsn_host"]}` (the same machine), `durability="normal"` on both '
        "(SQLite: WAL with synchronous=NORMAL; PostgreSQL: synchronous_commit=off, which "
        "never corrupts and may lose the last commits on a server crash). Medians; the machine "
        "is shared, so the figures carry its noise.\n"
    )
    w(f"### Append throughput, {pg['clients']} client processes at once\n")
    w(
        "Each client appends its own sessions, one `append_messages` call (one transaction) "
        "per turn; rate = all messages / (last client end − first client start). "
        "*lost* = messages sent minus messages counted in the database afterwards.\n"
    )
    w("| backend | messages | msg/s (median) | runs (msg/s) | lost |")
    w("|---|---:|---:|---|---:|")
    for row in pg["append"]:
        runs = ", ".join(f"{r:,.0f}" for r in row["rates"])
        w(
            f"| {row['backend']} | {row['messages']:,} | {row['rate']:,.0f} | {runs} | "
            f"{row['lost']} |"
        )
    rates = {r["backend"]: r["rate"] for r in pg["append"]}
    if rates.get("sqlite"):
        w(f"\nRatio PostgreSQL / SQLite: **{rates['postgres'] / rates['sqlite']:.2f}×**.\n")
    for size in pg["sizes"]:
        n = size["size"]
        w(f"### Search latency at {n:,} messages\n")
        w(
            "`search_messages(query, limit=20)` from one client, per-query medians, p50/p95 "
            f"over the queries of each class. Loads: SQLite {size['sqlite_load']['seconds']:.0f} "
            f"s, PostgreSQL {size['postgres_load']['seconds']:.0f} s "
            "(both with the same number of loader processes, one call per session).\n"
        )
        w(
            "*PostgreSQL, 2 tenants*: the same tenant timed again after a second tenant "
            f"loaded the same {n:,}-message corpus into the same tables (newer rows, the "
            "same words), as in a database shared by many users.\n"
        )
        w(
            "| class | SQLite p50 ms | p95 ms | hits | PostgreSQL p50 ms | p95 ms | hits "
            "| PostgreSQL, 2 tenants p50 ms | p95 ms |"
        )
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for cls, label in class_labels.items():
            s, p = size["sqlite_summary"][cls], size["postgres_summary"][cls]
            t = size["postgres_shared_summary"][cls]
            w(
                f"| {label} | {fmt_ms(s['p50_ms'])} | {fmt_ms(s['p95_ms'])} | "
                f"{s['with_hits']}/{s['queries']} | {fmt_ms(p['p50_ms'])} | "
                f"{fmt_ms(p['p95_ms'])} | {p['with_hits']}/{p['queries']} | "
                f"{fmt_ms(t['p50_ms'])} | {fmt_ms(t['p95_ms'])} |"
            )
        w("\nSlowest PostgreSQL query per class (alone / 2 tenants):\n")
        for cls, label in class_labels.items():
            p, t = size["postgres_summary"][cls], size["postgres_shared_summary"][cls]
            w(
                f"- {label}: `{p['slowest_query']}` {fmt_ms(p['max_ms'])} ms / "
                f"`{t['slowest_query']}` {fmt_ms(t['max_ms'])} ms"
            )
        w("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Client process of the store benchmark.")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--backend", choices=("sqlite", "postgres"), required=True)
    w.add_argument("--target", required=True)
    w.add_argument("--namespace", default="default")
    w.add_argument("--part-file", required=True, help="this client's sessions (JSON)")
    w.add_argument("--mode", choices=("turn", "session"), default="turn")
    w.add_argument("--prefix", default="")
    w.add_argument("--start-at", type=float, default=0.0)
    args = parser.parse_args(argv)
    return worker(args)


if __name__ == "__main__":
    sys.exit(main())
