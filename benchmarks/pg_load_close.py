"""PostgreSQL: what the writers of one bulk load leave behind when they close together
(rows in the GIN pending lists, pages not marked all-visible), and what a search pays
for it, for one or two versions of memstrata.

Usage::

    git worktree add PATH BEFORE_COMMIT
    python benchmarks/pg_load_close.py --dsn postgresql://127.0.0.1:5432/test \\
        [--messages 100000] [--clients 4] [--beside 0] [--src PATH/src ...] [--out FILE]

For each ``--src`` (default: this checkout), in a fresh schema of its own whose tables
have autovacuum off (the store then keeps them itself): with ``--beside N``, first a
tenant of N messages loaded by this checkout and vacuumed, so that the tenant measured
is small beside its table; then one tenant of ``--messages`` corpus messages written
through the public API by ``--clients`` processes of that version at once, each closing
its store when its part is written, as ``benchmarks/store.py --backend postgres`` loads
its tenants. Then, with this checkout's search (the versions differ in what their
writers do on close, not in how they search): the heap visits an index-only read of
the tenant's ids makes (one per row on a page not marked all-visible), the corpus
queries of every class timed (per-query median of 3, p50/p95 per class) as the load
left the table, the pending lists merged (``gin_clean_pending_list``, which says how
many pages each list held) and the pages marked (``VACUUM (INDEX_CLEANUP OFF)``), and
the queries timed again. A version whose writers leave nothing behind times the same
twice.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402  (the benchmarks' own modules, by path)
from pg_pending_lists import REPEATS, timed, timings_table  # noqa: E402
from store_ab import commit_of  # noqa: E402
from store_postgres import own_schema, run_clients, write_parts  # noqa: E402

SRC = HERE.parent / "src"
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
# The GIN indexes in the order the report names them (word, trigram, CJK).
PENDING_ORDER = ("idx_messages_ns_tsv", "idx_messages_ns_trgm", "idx_messages_ns_cjk")
# The tenant pg_pending_lists.timed searches.
NAMESPACE = "t"


def heap_fetches(dsn: str) -> int:
    """The heap visits an index-only read of the tenant's ids makes."""
    import psycopg

    from memstrata.store.postgres import maintenance

    with psycopg.connect(dsn, autocommit=True) as conn:
        return maintenance.unmarked_rows(conn, NAMESPACE)


def measure(dsn: str, src: Path, messages: int, clients: int, beside: int) -> dict[str, Any]:
    """Load the tenant with ``clients`` writers of ``src``, then time, tidy, time."""
    import psycopg

    from memstrata.store.postgres import PostgresSessionStore, maintenance

    with PostgresSessionStore(dsn, namespace="setup") as store, store.connection() as conn:
        for table in maintenance.KEPT_TABLES:
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    if beside:
        with tempfile.TemporaryDirectory(prefix="memstrata-pg-close-") as work:
            parts = write_parts(Path(work), beside, corpus.SEED, clients)
            run_clients("postgres", dsn, "big", parts=parts, mode="session", prefix="b")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE) messages, sessions")
    with tempfile.TemporaryDirectory(prefix="memstrata-pg-close-") as work:
        parts = write_parts(Path(work), messages, corpus.SEED, clients)
        previous = os.environ.get("PYTHONPATH")
        # The writers are processes of the version under test (its src first on the path).
        os.environ["PYTHONPATH"] = str(src.resolve())
        try:
            load = run_clients("postgres", dsn, NAMESPACE, parts=parts, mode="session", prefix="s")
        finally:
            if previous is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = previous
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM messages WHERE namespace = %s", (NAMESPACE,))
        stored = int(row.fetchone()[0])  # type: ignore[index]
    fetches = heap_fetches(dsn)
    as_left = timed(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pages = maintenance.merge_pending(conn)
        conn.execute(maintenance.MARK_VISIBLE)
    return {
        "load": load,
        "stored": stored,
        "heap_fetches": fetches,
        "pending_pages": pages,
        "as_left": as_left,
        "merged": timed(dsn),
    }


def render(args: argparse.Namespace, results: list[tuple[str, dict[str, Any]]], load: str) -> str:
    lines = [
        "# PostgreSQL: what the writers of a bulk load leave behind when they close together",
        "",
        f"`python benchmarks/pg_load_close.py --messages {args.messages} --clients "
        f"{args.clients}"
        + (f" --beside {args.beside}" if args.beside else "")
        + "".join(" --src PATH" for _ in results)
        + "`",
        "",
        (
            f"A tenant of {args.beside:,} messages loaded and vacuumed first; then one tenant "
            if args.beside
            else "One tenant "
        )
        + f"of {args.messages:,} corpus messages written through the public API by "
        f"{args.clients} processes at once, each closing its store when its part is written, "
        "tables with autovacuum off; then every class of corpus queries timed *as left* by "
        "the load, the GIN pending lists merged and the pages marked all-visible, and timed "
        f"again (*merged*). Per-query median of {REPEATS}, p50/p95 per class (ms); searched "
        f"by the same code both times. {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs; load average {load} (a shared machine).",
        "",
        "| version | messages stored | load msg/s | pending pages left (word, trigram, CJK) "
        "| heap visits of an index-only read of the tenant's ids |",
        "|---|---:|---:|---|---:|",
    ]
    for commit, r in results:
        pages = ", ".join(str(r["pending_pages"].get(n, 0)) for n in PENDING_ORDER)
        fetches = r.get("heap_fetches", "not measured")
        lines.append(
            f"| {commit} | {r['stored']:,} | {r['load']['rate']:,.0f} | {pages} | {fetches} |"
        )
    lines.append("")
    lines += timings_table(results, ("as_left", "as left"), ("merged", "merged"))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--beside", type=int, default=0, help="messages of a tenant loaded first")
    parser.add_argument("--src", type=Path, action="append")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = []
    for i, src in enumerate(args.src or [SRC]):
        with own_schema(args.dsn, f"close{i}") as dsn:
            measured = measure(dsn, src, args.messages, args.clients, args.beside)
            results.append((commit_of(src), measured))
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(args, results, f"{before} before, {after} after")
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(
            json.dumps([{"commit": c, **r} for c, r in results], indent=1), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
