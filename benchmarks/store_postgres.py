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
import threading
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
    try:
        from memstrata.store.postgres import PostgresSessionStore
    except ImportError:  # a version before the store's layout, run as an A/B baseline
        from memstrata.postgres import PostgresSessionStore  # type: ignore[no-redef]

    return PostgresSessionStore(target, namespace=namespace, durability="normal")


def public_extensions(conn: Any) -> None:
    """The extensions the store needs, in public: the store's first migration would
    otherwise install them into the schema first on its search_path (a benchmark's own),
    where the stores of every other schema of the database cannot see them."""
    from memstrata.store.postgres.schema import EXTENSIONS

    for name in EXTENSIONS:
        conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name} SCHEMA public")


@contextmanager
def kept_schema(dsn: str, schema: str) -> Iterator[str]:
    """A schema kept between runs (created when missing, never dropped); yields its DSN.

    With :func:`loaded`, a re-run searches the tenants an earlier run loaded instead of
    rebuilding them.
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        public_extensions(conn)
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.bench_loads "
            "(namespace text PRIMARY KEY, messages bigint NOT NULL, load jsonb NOT NULL)"
        )
        # When a run vacuumed the kept tables: its next runs are not "after bulk write".
        conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.bench_vacuums (at timestamptz)")
    yield psycopg.conninfo.make_conninfo(dsn, options=f"-csearch_path={schema},public")


def loaded(dsn: str, namespace: str, n: int) -> dict[str, Any] | None:
    """The load an earlier run recorded for ``namespace`` in a kept schema, when the
    tenant still holds its ``n`` messages (None: load it)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT load FROM bench_loads WHERE namespace = %s AND messages = %s",
            (namespace, n),
        ).fetchone()
        if row is None:
            return None
        held = conn.execute(
            "SELECT COALESCE(sum(message_count), 0) FROM sessions WHERE namespace = %s",
            (namespace,),
        ).fetchone()
    if held is None or int(held[0]) != n:
        return None
    return {**row[0], "reused": True}


def load_tenant(
    dsn: str, namespace: str, parts: list[Path], n: int, *, keep: bool
) -> dict[str, Any]:
    """Load ``namespace`` through the public API, or reuse it (``keep``: a kept schema
    where an earlier run loaded it whole)."""
    import psycopg
    from psycopg.types.json import Jsonb

    if keep:
        earlier = loaded(dsn, namespace, n)
        if earlier is not None:
            log(f"postgres: tenant {namespace} ({n:,} messages) reused from an earlier run")
            return earlier
        with psycopg.connect(dsn) as conn:
            made = conn.execute("SELECT to_regclass('sessions') AS t").fetchone()
            if (
                made
                and made[0]
                and conn.execute(
                    "SELECT 1 FROM sessions WHERE namespace = %s LIMIT 1", (namespace,)
                ).fetchone()
            ):
                raise RuntimeError(
                    f"tenant {namespace} of the kept schema is partly loaded: drop the schema"
                )
    log(f"postgres: loading tenant {namespace} ({n:,} messages) ...")
    load = run_clients("postgres", dsn, namespace, parts=parts, mode="session", prefix="s")
    if keep:
        with psycopg.connect(dsn) as conn:
            conn.execute("INSERT INTO bench_loads VALUES (%s, %s, %s)", (namespace, n, Jsonb(load)))
    return load


def load_at_once(
    dsn: str, namespaces: list[str], parts: list[Path], n: int, *, keep: bool
) -> list[dict[str, Any]]:
    """:func:`load_tenant` for every one of ``namespaces`` at the same time (a thread
    each), so that their ids interleave; their loads in order."""
    loads: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def one(namespace: str) -> None:
        try:
            loads[namespace] = load_tenant(dsn, namespace, parts, n, keep=keep)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(ns,)) for ns in namespaces]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [loads[ns] for ns in namespaces]


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
        public_extensions(conn)
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
    tenants: int = 10,
    tenant_size: int = 100_000,
    keep_schema: str | None = None,
    db_dir: Path | None = None,
    interleave: bool = False,
) -> dict[str, Any]:
    """Both backends: multi-client appends, then many tenants in one database
    (:func:`run_scale`, the largest of ``sizes`` as the big tenant; ``keep_schema``,
    ``db_dir`` and ``interleave``: see there)."""
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
    out["scale"] = run_scale(
        work,
        dsn=dsn,
        big=max(sizes),
        tenants=tenants,
        tenant_size=tenant_size,
        clients=clients,
        repeats=repeats,
        time_queries=time_queries,
        summarize_classes=summarize_classes,
        keep_schema=keep_schema,
        db_dir=db_dir,
        interleave=interleave,
    )
    return out


BIG, SMALL = "big", "t0"


def run_scale(
    work: Path,
    *,
    dsn: str,
    big: int,
    tenants: int,
    tenant_size: int,
    clients: int,
    repeats: int,
    time_queries: Any,
    summarize_classes: Any,
    keep_schema: str | None = None,
    db_dir: Path | None = None,
    interleave: bool = False,
) -> dict[str, Any]:
    """Many tenants in one database: ``tenants`` of ``tenant_size`` messages and one of
    ``big``, loaded through the public API by ``clients`` processes each.

    ``interleave``: the small tenants are written at the same time, one process each (so
    their ids interleave, as those of the users of one database do), instead of one
    tenant after another.

    ``keep_schema``: load into this schema and keep it; a tenant an earlier run loaded
    whole is reused, not loaded again (its tables then hold what that run's VACUUM left,
    which the report says). ``db_dir``: the same for the SQLite files.

    Searched first right after the loads, with no VACUUM or ANALYZE but the store's own
    (the server here runs with autovacuum off), then after a manual VACUUM (ANALYZE) as a
    server with autovacuum would leave the tables; SQLite files of the same two sizes are
    the baseline of the same run.
    """
    queries = corpus.queries()
    out: dict[str, Any] = {
        "big": big,
        "tenants": tenants,
        "tenant_size": tenant_size,
        "clients": clients,
        "kept_schema": keep_schema,
    }
    small_parts = write_parts(work, tenant_size, corpus.SEED, clients)
    big_parts = write_parts(work, big, corpus.SEED, clients)
    one_part = write_parts(work, tenant_size, corpus.SEED, 1) if interleave else []

    def timed_search(backend: str, target: str, namespace: str) -> dict[str, Any]:
        store = open_store(backend, target, namespace)
        try:
            store.search_messages("warmup", limit=20)
            timed = time_queries(
                lambda q, s=store: len(s.search_messages(q, limit=20)), queries, repeats, slow_s=2.0
            )
        finally:
            store.close()
        return dict(summarize_classes(timed))

    for label, parts, n in (("small", small_parts, tenant_size), ("big", big_parts, big)):
        db = (db_dir or work) / f"scale-{n}.db"
        record = db.with_suffix(".load.json")
        if db_dir is not None and db.exists() and record.exists():
            log(f"sqlite {n:,}: reusing {db}")
            out[f"sqlite_{label}_load"] = {**json.loads(record.read_text()), "reused": True}
        else:
            log(f"sqlite {n:,}: loading with {clients} loaders ...")
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            out[f"sqlite_{label}_load"] = run_clients(
                "sqlite", str(db), "bench", parts=parts, mode="session", prefix="s"
            )
            if db_dir is not None:
                record.write_text(json.dumps(out[f"sqlite_{label}_load"]))
        out[f"sqlite_{label}"] = timed_search("sqlite", str(db), "bench")
        out[f"sqlite_{label}_attacks"] = attacks("sqlite", str(db), "bench", repeats)
        if db_dir is None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
    schema = kept_schema(dsn, keep_schema) if keep_schema else own_schema(dsn, "scale")
    with schema as pg_dsn:
        keep = keep_schema is not None
        if keep:
            out["kept_vacuumed"] = vacuumed_before(pg_dsn)
        if interleave:
            out["interleaved"] = True
            out["pg_small_loads"] = load_at_once(
                pg_dsn, [f"t{i}" for i in range(tenants)], one_part, tenant_size, keep=keep
            )
        else:
            out["pg_small_loads"] = [
                load_tenant(pg_dsn, f"t{i}", small_parts, tenant_size, keep=keep)
                for i in range(tenants)
            ]
        out["pg_big_load"] = load_tenant(pg_dsn, BIG, big_parts, big, keep=keep)
        out["pg_tables_after_load"] = table_state(pg_dsn)
        for phase in ("bulk", "vacuumed"):
            if phase == "vacuumed":
                log("postgres: VACUUM (ANALYZE) and GIN pending lists flushed ...")
                store = open_store("postgres", pg_dsn, BIG)
                try:
                    started = time.time()
                    store.vacuum()
                    store.optimize()
                    out["pg_vacuum_seconds"] = time.time() - started
                    if keep:
                        with store.connection() as conn:
                            conn.execute("INSERT INTO bench_vacuums VALUES (now())")
                finally:
                    store.close()
            for label, namespace in (("small", SMALL), ("big", BIG)):
                log(f"postgres {phase}: search tenant {namespace} ...")
                out[f"pg_{phase}_{label}"] = timed_search("postgres", pg_dsn, namespace)
                out[f"pg_{phase}_{label}_attacks"] = attacks("postgres", pg_dsn, namespace, repeats)
                if phase == "bulk":
                    out[f"pg_plans_{label}"] = plans(pg_dsn, namespace, queries)
    for part in [*small_parts, *big_parts]:
        part.unlink(missing_ok=True)
    return out


def vacuumed_before(dsn: str) -> bool:
    """Whether an earlier run vacuumed the kept schema's tables."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM bench_vacuums LIMIT 1").fetchone() is not None


def table_state(dsn: str) -> list[dict[str, Any]]:
    """What the store's own maintenance left: per table, its last ANALYZE and VACUUM and
    the rows changed since, with the planner's row count."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT c.relname AS table, c.reltuples::bigint AS planner_rows, "
            "s.n_live_tup AS live_rows, s.n_mod_since_analyze AS changed_since_analyze, "
            "s.n_ins_since_vacuum AS inserted_since_vacuum, s.analyze_count, "
            "s.vacuum_count, s.autoanalyze_count, s.autovacuum_count "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
            "WHERE s.relid = ANY(ARRAY['messages'::regclass, 'sessions'::regclass])"
        ).fetchall()
    return [dict(r) for r in rows]


def attacks(backend: str, target: str, namespace: str, repeats: int) -> dict[str, Any]:
    """The two pathological session_search queries of pg_query_bounds.py on this store."""
    import pg_query_bounds

    store = open_store(backend, target, namespace)
    try:
        return {
            name: pg_query_bounds.timed(store, query, repeats)
            for name, query in (
                ("cjk_1999", pg_query_bounds.cjk_query(corpus.SEED)),
                ("code_200", pg_query_bounds.code_query(corpus.SEED)),
            )
        }
    finally:
        store.close()


def plans(dsn: str, namespace: str, queries: dict[str, list[str]]) -> dict[str, Any]:
    """Per class, the first query's costliest statement with its EXPLAIN (ANALYZE,
    BUFFERS), taken inside the search's own transaction (so with its planner settings)."""
    import psycopg

    original = psycopg.Connection.execute
    seen: list[tuple[float, str, str]] = []

    def explained(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sql = str(query)
        if sql.lstrip().upper().startswith(("SELECT", "WITH")) and "set_config(" not in sql:
            started = time.perf_counter()
            cur = original(conn, "EXPLAIN (ANALYZE, BUFFERS) " + sql, params, **kw)
            lines = [next(iter(r.values())) if isinstance(r, dict) else r[0] for r in cur]
            seen.append((time.perf_counter() - started, sql, "\n".join(lines)))
        return original(conn, query, params, **kw)

    out: dict[str, Any] = {}
    store = open_store("postgres", dsn, namespace)
    try:
        store.search_messages("warmup", limit=20)
        psycopg.Connection.execute = explained  # type: ignore[method-assign,assignment]
        try:
            for cls, qs in queries.items():
                seen.clear()
                started = time.perf_counter()
                store.search_messages(qs[0], limit=20)
                total = time.perf_counter() - started
                slowest = max(seen, key=lambda x: x[0])
                out[cls] = {
                    "query": qs[0],
                    "statements": len(seen),
                    "search_ms_with_explain": total * 1000,
                    "costliest_ms": slowest[0] * 1000,
                    "sql": slowest[1],
                    "plan": slowest[2],
                }
        finally:
            psycopg.Connection.execute = original  # type: ignore[method-assign]
    finally:
        store.close()
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
    if "scale" in pg:
        lines += render_scale(pg["scale"], class_labels, fmt_ms)
    return lines


def _short(n: int) -> str:
    """1000000 -> "1M", 100000 -> "100k"."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


def render_scale(sc: dict[str, Any], class_labels: dict[str, str], fmt_ms: Any) -> list[str]:
    """The many-tenant section: p95 per class, attacks, what the store kept, the plans."""
    lines: list[str] = []
    w = lines.append
    small, big, tenants = sc["tenant_size"], sc["big"], sc["tenants"]
    loads = sc["pg_small_loads"]
    w(f"### {tenants} tenants of {small:,} messages and one of {big:,} in one database\n")
    w(
        "All loaded through the public API (`append_messages`, one call per session, "
        + (
            f"the {tenants} small tenants written at the same time, one loader process each, "
            f"so that their ids interleave; the big one by {sc['clients']} loader processes"
            if sc.get("interleaved")
            else f"{sc['clients']} loader processes per tenant"
        )
        + f") into one schema: {tenants} tenants "
        f"of {small:,} messages each "
        f"({statistics.median(x['rate'] for x in loads):,.0f} msg/s median per tenant load), "
        f"then the tenant of {big:,} ({sc['pg_big_load']['rate']:,.0f} msg/s). "
        "The server runs with **autovacuum off**. *After bulk write*: searched right "
        "after the loads, with no VACUUM or ANALYZE but what the store ran itself. "
        "*Vacuumed*: after a manual `VACUUM (ANALYZE)` and the GIN pending lists flushed "
        f"({sc.get('pg_vacuum_seconds', 0):.0f} s), as autovacuum would leave the tables. "
        + (
            f"The small tenant timed is `{SMALL}`, one of the {tenants} written together. "
            if sc.get("interleaved")
            else f"The small tenant timed is `{SMALL}`, the first loaded (its rows the oldest). "
        )
        + (
            "**Tenants reused from an earlier run** (`--pg-keep-schema`, loaded the same "
            "way; their load rates are that run's): "
            + (
                "that run vacuumed the tables, so *after bulk write* means after its VACUUM. "
                if sc.get("kept_vacuumed")
                else "never vacuumed or analyzed by hand since their loads. "
            )
            if any(x.get("reused") for x in [*loads, sc["pg_big_load"]])
            else ""
        )
        + "SQLite: one file per size, same corpus, same run. "
        "`search_messages(query, limit=20)` from one client, per-query medians, p50/p95 "
        "over the 40 queries of each class (ms).\n"
    )
    s_, b_, o_ = _short(small), _short(big), tenants - 1
    w(
        f"| class | SQLite {s_} p50 | p95 | PG {s_} beside {o_}, after bulk write p50 | p95 | "
        f"vacuumed p95 | SQLite {b_} p50 | p95 | PG {b_} after bulk write p50 | p95 | "
        "vacuumed p95 |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cls, label in class_labels.items():
        a, b = sc["sqlite_small"][cls], sc["pg_bulk_small"][cls]
        c, d = sc["pg_vacuumed_small"][cls], sc["sqlite_big"][cls]
        e, f = sc["pg_bulk_big"][cls], sc["pg_vacuumed_big"][cls]
        w(
            f"| {label} | {fmt_ms(a['p50_ms'])} | {fmt_ms(a['p95_ms'])} | "
            f"{fmt_ms(b['p50_ms'])} | **{fmt_ms(b['p95_ms'])}** | {fmt_ms(c['p95_ms'])} | "
            f"{fmt_ms(d['p50_ms'])} | {fmt_ms(d['p95_ms'])} | {fmt_ms(e['p50_ms'])} | "
            f"**{fmt_ms(e['p95_ms'])}** | {fmt_ms(f['p95_ms'])} |"
        )
    w(f"\nHits (queries of 40 with any hit), PostgreSQL after bulk write, {s_} / {b_}: ")
    w(
        ", ".join(
            f"{label} {sc['pg_bulk_small'][cls]['with_hits']}/{sc['pg_bulk_big'][cls]['with_hits']}"
            for cls, label in class_labels.items()
        )
        + ".\n"
    )
    w(f"Slowest PostgreSQL query per class after bulk write ({s_} / {b_}):\n")
    for cls, label in class_labels.items():
        b, e = sc["pg_bulk_small"][cls], sc["pg_bulk_big"][cls]
        w(
            f"- {label}: `{b['slowest_query']}` {fmt_ms(b['max_ms'])} ms / "
            f"`{e['slowest_query']}` {fmt_ms(e['max_ms'])} ms"
        )
    w("\n#### Pathological queries through `session_search`\n")
    w(
        "The two queries of `benchmarks/pg_query_bounds.py` (a 1,999-character CJK run; "
        "200 code-like terms), `session_search(..., summarize=False)`, median / max of the "
        "runs after a warm-up, ms. Target: ≤ 200 ms.\n"
    )
    w(
        f"| query | SQLite {s_} | PG {s_} after bulk write | PG {s_} vacuumed | SQLite {b_} "
        f"| PG {b_} after bulk write | PG {b_} vacuumed |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("cjk_1999", "code_200"):
        cells = [
            sc[key][name]
            for key in (
                "sqlite_small_attacks", "pg_bulk_small_attacks", "pg_vacuumed_small_attacks",
                "sqlite_big_attacks", "pg_bulk_big_attacks", "pg_vacuumed_big_attacks",
            )
        ]  # fmt: skip
        w(
            f"| {name} | "
            + " | ".join(f"{fmt_ms(c['median_ms'])} / {fmt_ms(c['max_ms'])}" for c in cells)
            + " |"
        )
    w("\n#### What the store's own maintenance left after the loads\n")
    w(
        "`pg_stat_user_tables` right after the last load (autovacuum off: every ANALYZE "
        "and VACUUM counted here was run by the store itself).\n"
    )
    w(
        "| table | planner rows | live rows | changed since ANALYZE | inserted since VACUUM "
        "| ANALYZEs | VACUUMs | autovacuum runs |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in sc["pg_tables_after_load"]:
        w(
            f"| {t['table']} | {t['planner_rows']:,} | {t['live_rows']:,} | "
            f"{t['changed_since_analyze']:,} | {t['inserted_since_vacuum']:,} | "
            f"{t['analyze_count']} | {t['vacuum_count']} | "
            f"{t['autoanalyze_count'] + t['autovacuum_count']} |"
        )
    for label, title in (("big", f"the {big:,}-message tenant"), ("small", f"tenant {SMALL}")):
        w(f"\n#### Plans after bulk write, {title}\n")
        w(
            "Per class, the first query's costliest statement, with `EXPLAIN (ANALYZE, "
            "BUFFERS)` taken inside the search's own transaction (its planner settings).\n"
        )
        for cls, label_text in class_labels.items():
            pl = sc[f"pg_plans_{label}"][cls]
            w(
                f"<details><summary>{label_text}: <code>{pl['query']}</code> — "
                f"{pl['statements']} statements, costliest {pl['costliest_ms']:.1f} ms "
                "(timed with EXPLAIN ANALYZE)</summary>\n"
            )
            w("```sql\n" + pl["sql"] + "\n```\n")
            w("```\n" + pl["plan"] + "\n```\n</details>\n")
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
