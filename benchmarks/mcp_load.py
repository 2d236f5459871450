"""Load the MCP HTTP server: many concurrent MCP clients writing memories and searching.

Usage::

    python benchmarks/mcp_load.py [--seconds 20] [--clients 16] [--servers 1 [2]]
                                  [--write-share 0.5] [--messages 20000] [--procs 4]
                                  [--dsn postgresql://...] [--json]
                                  [--output benchmarks/results/mcp_load.md]

What it does:

1. builds a fresh home: ``config.toml`` with a memory budget large enough that no write
   is refused for space, and a session store holding ``--messages`` messages of the
   deterministic corpus (``benchmarks/corpus.py``);
2. starts ``--servers`` ``memstrata mcp --transport http`` subprocesses on that one home
   (two processes exercise the cross-process file lock and SQLite WAL); each value of
   ``--servers`` is one run, and with ``--dsn`` every run is repeated on a fresh
   namespace of that PostgreSQL database (deleted afterwards);
3. runs ``--clients`` MCP clients (the official SDK's ``Client`` over streamable HTTP,
   spread over ``--procs`` worker processes and over the servers) for ``--seconds``:
   each call is a ``memory`` add of a unique token (share ``--write-share``) or a
   ``session_search`` with a corpus query (``summarize: false``, so no model is timed);
4. stops the servers and reads ``MEMORY.md`` (or the tenant's rows): every write a
   client saw acknowledged (``success: true``) must be there. Lost writes are counted,
   never retried.

Figures: p50/p95/p99 latency per operation, throughput, errors (tool errors and
protocol failures) and lost writes. The machine is shared and noisy: latencies are
percentiles of one run, and the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path
from memstrata.memory.files import FileMemory
from memstrata.store.sqlite.store import SessionStore

HERE = Path(__file__).resolve().parent
# No write may be refused for space: the run measures losses, not the budget.
MEMORY_CHAR_LIMIT = 50_000_000
OPS = ("memory_add", "session_search")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------- setup


def open_backend(home: Path, dsn: str | None, namespace: str) -> Any:
    """The session store the servers will use: the home's SQLite file or the DSN's tenant."""
    if dsn is None:
        return SessionStore(home / "state.db", verify_indexes=False)
    from memstrata.config import Config
    from memstrata.store.postgres import PostgresSessionStore

    return PostgresSessionStore(dsn, namespace=namespace, config=Config.load(home))


def build_home(home: Path, messages: int, dsn: str | None, namespace: str) -> list[str]:
    """Write config.toml and the corpus store; return the search queries to use."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[memory]\nmemory_char_limit = {MEMORY_CHAR_LIMIT}\n", encoding="utf-8"
    )
    store = open_backend(home, dsn, namespace)
    try:
        for session in corpus.generate(messages):
            store.create_session(session.id, source=session.source, started_at=session.started_at)
            store.append_messages(session.id, session.messages)
        store.optimize()
    finally:
        store.close()
    by_class = corpus.queries()
    return [q for cls in ("word", "question", "phrase", "cjk2") for q in by_class[cls][:10]]


def server_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_"))
    }
    env["MEMSTRATA_HOME"] = str(home)
    return env


def start_server(home: Path, store_args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """One ``memstrata mcp --transport http`` process; returns it and its URL."""
    port = free_port()
    command = [sys.executable, "-m", "memstrata", "mcp", "--transport", "http"]
    proc = subprocess.Popen(
        [*command, "--port", str(port), *store_args],
        env=server_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start within 30 s")


def stop_server(proc: subprocess.Popen[str]) -> str:
    """SIGTERM (graceful), then its stderr."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    return err


# ----------------------------------------------------------------------------- clients


def run_worker(job: dict[str, Any]) -> dict[str, Any]:
    """One worker process: its MCP clients, timed from the moment every client of every
    worker is connected (a cross-process barrier), so all of them load the server at once."""
    import anyio

    return anyio.run(_worker, job)


async def _worker(job: dict[str, Any]) -> dict[str, Any]:
    import anyio
    import anyio.to_thread
    from mcp import Client

    latencies: dict[str, list[float]] = {op: [] for op in OPS}
    acknowledged: list[str] = []
    unacknowledged: list[str] = []
    errors: list[str] = []
    clients = list(zip(job["numbers"], job["urls"], strict=True))
    state = {"ready": 0, "deadline": 0.0}
    all_ready = anyio.Event()
    go = anyio.Event()

    def ready() -> None:
        state["ready"] += 1
        if state["ready"] == len(clients):
            all_ready.set()

    async def client_loop(number: int, url: str) -> None:
        rng = random.Random(f"{job['seed']}-{number}")
        try:
            async with Client(url) as client:
                ready()
                await go.wait()
                i = 0
                while time.time() < state["deadline"]:
                    i += 1
                    await one_call(client, number, i, rng)
        except Exception as exc:
            errors.append(f"client {number}: {type(exc).__name__}: {exc}"[:300])
            if not all_ready.is_set():
                ready()  # a client that cannot connect must not hold the others back

    async def one_call(client: Any, number: int, i: int, rng: random.Random) -> None:
        if rng.random() < job["write_share"]:
            op, token = "memory_add", f"load-{number}-{i}-{uuid.uuid4().hex[:8]}"
            name = "memory"
            args: dict[str, Any] = {
                "action": "add",
                "target": "memory",
                "content": f"Load test fact {token}",
            }
        else:
            op, token, name = "session_search", "", "session_search"
            args = {"query": rng.choice(job["queries"]), "summarize": False}
        start = time.perf_counter()
        try:
            result = await client.call_tool(name, args)
        except Exception as exc:  # a protocol failure: counted, the loop goes on
            errors.append(f"{op}: {type(exc).__name__}: {exc}"[:300])
            if token:
                unacknowledged.append(token)
            return
        latencies[op].append((time.perf_counter() - start) * 1000)
        text = result.content[0].text if result.content else ""
        ok = not result.is_error and json.loads(text).get("success") is True
        if not ok:
            errors.append(f"{op}: {text[:300]}")
        if token:
            (acknowledged if ok else unacknowledged).append(token)

    async with anyio.create_task_group() as tg:
        for number, url in clients:
            tg.start_soon(client_loop, number, url)
        await all_ready.wait()
        await anyio.to_thread.run_sync(job["barrier"].wait, 300)
        state["deadline"] = time.time() + float(job["seconds"])
        go.set()
    return {
        "latencies": latencies,
        "acknowledged": acknowledged,
        "unacknowledged": unacknowledged,
        "errors": errors,
    }


# ----------------------------------------------------------------------------- run


def bench(args: argparse.Namespace, home: Path, servers: int, dsn: str | None) -> dict[str, Any]:
    """One run: a fresh store, ``servers`` server processes, the clients, the check."""
    namespace = f"mcp_load_{uuid.uuid4().hex[:8]}"
    where = f"PostgreSQL namespace {namespace}" if dsn else str(home)
    log(f"building the store ({args.messages} messages) in {where}")
    queries = build_home(home, args.messages, dsn, namespace)
    store_args = ["--dsn", dsn, "--namespace", namespace] if dsn else []
    try:
        return run_load(args, home, queries, store_args, namespace, servers, dsn)
    finally:
        if dsn:
            store = open_backend(home, dsn, namespace)
            store.delete_namespace()
            store.close()


def stored_memory(home: Path, dsn: str | None, namespace: str) -> str:
    """Every entry of MEMORY.md (or of the tenant's memory rows), one per line."""
    if dsn is None:
        return "\n".join(FileMemory(home).entries("memory"))
    from memstrata.config import Config
    from memstrata.store.postgres import PostgresMemory

    memory = PostgresMemory(dsn, namespace=namespace, config=Config.load(home))
    try:
        return "\n".join(memory.entries("memory"))
    finally:
        memory.close()


def run_load(
    args: argparse.Namespace,
    home: Path,
    queries: list[str],
    store_args: list[str],
    namespace: str,
    server_count: int,
    dsn: str | None,
) -> dict[str, Any]:
    servers = [start_server(home, store_args) for _ in range(server_count)]
    urls = [url for _, url in servers]
    client_urls = [urls[i % len(urls)] for i in range(args.clients)]
    procs = max(1, min(args.procs, args.clients))
    jobs = []
    load_before = load_average()
    manager = multiprocessing.get_context("spawn").Manager()
    barrier = manager.Barrier(procs)
    for p in range(procs):
        mine = list(range(p, args.clients, procs))
        jobs.append(
            {
                "urls": [client_urls[i] for i in mine],
                "numbers": mine,
                "seconds": args.seconds,
                "barrier": barrier,
                "queries": queries,
                "write_share": args.write_share,
                "seed": args.seed,
            }
        )
    log(f"{args.clients} clients in {procs} processes on {len(urls)} server(s), {args.seconds} s")
    results: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(procs, mp_context=context) as pool:
        results = list(pool.map(run_worker, jobs))
    manager.shutdown()
    load_after = load_average()
    server_errors = [stop_server(proc) for proc, _ in servers]

    stored = stored_memory(home, dsn, namespace)
    acknowledged = [t for r in results for t in r["acknowledged"]]
    unacknowledged = [t for r in results for t in r["unacknowledged"]]
    lost = [t for t in acknowledged if t not in stored]
    landed_unacked = [t for t in unacknowledged if t in stored]
    latencies = {op: [v for r in results for v in r["latencies"][op]] for op in OPS}
    errors = [e for r in results for e in r["errors"]]
    seconds = float(args.seconds)
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": seconds,
        "clients": args.clients,
        "client_processes": procs,
        "servers": server_count,
        "messages": args.messages,
        "write_share": args.write_share,
        "backend": "PostgreSQL" if dsn else "SQLite",
        "durability": (
            "PostgreSQL commit"
            if dsn
            else "store.durability = normal (default); memory files always fsynced"
        ),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": load_after,
        "ops": {
            op: {
                "count": len(v),
                "per_second": len(v) / seconds,
                "p50_ms": percentile(v, 50),
                "p95_ms": percentile(v, 95),
                "p99_ms": percentile(v, 99),
            }
            for op, v in latencies.items()
        },
        "throughput": sum(len(v) for v in latencies.values()) / seconds,
        "acknowledged_writes": len(acknowledged),
        "lost_writes": len(lost),
        "lost_examples": lost[:5],
        "unacknowledged_writes": len(unacknowledged),
        "unacknowledged_but_stored": len(landed_unacked),
        "errors": len(errors),
        "error_examples": errors[:5],
        "server_tracebacks": sum("Traceback" in e for e in server_errors),
    }


def render(results: list[dict[str, Any]], command: str) -> str:
    """The Markdown result: one summary table, then each run's details."""
    first = results[0]
    lines = [
        "# MCP server under load",
        "",
        f"Run {first['date']}: `{command}` on {first['cpus']} CPUs shared with other work "
        "(load averages below). The machine is noisy: latencies are percentiles of one run "
        "each, so compare the runs of this table with each other, not with other machines.",
        "",
        f"{first['clients']} MCP SDK clients over streamable HTTP (in "
        f"{first['client_processes']} processes) against `memstrata mcp --transport http` "
        f"process(es) sharing one store, for {first['seconds']:g} s. "
        f"{first['write_share']:.0%} of calls are `memory` adds of unique tokens, the rest "
        f"`session_search` (verbatim, no model) over {first['messages']:,} stored messages. "
        "After the run every acknowledged token is looked up in the stored memory. SQLite "
        "runs use `store.durability = normal` (the default; memory files are always "
        "fsynced); PostgreSQL runs commit on the server.",
        "",
        "| store | servers | calls/s | add p50 / p95 / p99 ms | search p50 / p95 / p99 ms "
        "| acknowledged writes | lost | errors |",
        "|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in results:
        add, search = r["ops"]["memory_add"], r["ops"]["session_search"]
        lines.append(
            f"| {r['backend']} | {r['servers']} | {r['throughput']:.1f} | "
            f"{add['p50_ms']:.0f} / {add['p95_ms']:.0f} / {add['p99_ms']:.0f} | "
            f"{search['p50_ms']:.0f} / {search['p95_ms']:.0f} / {search['p99_ms']:.0f} | "
            f"{r['acknowledged_writes']:,} | **{r['lost_writes']}** | {r['errors']} |"
        )
    for r in results:
        lines += [
            "",
            f"## {r['backend']}, {r['servers']} server process(es)",
            "",
            f"- Load average {r['load_before']} before, {r['load_after']} after.",
            f"- `memory` add: {r['ops']['memory_add']['count']:,} calls "
            f"({r['ops']['memory_add']['per_second']:.1f}/s); `session_search`: "
            f"{r['ops']['session_search']['count']:,} calls "
            f"({r['ops']['session_search']['per_second']:.1f}/s).",
            f"- Writes without an acknowledgement: {r['unacknowledged_writes']} "
            f"({r['unacknowledged_but_stored']} of them stored anyway); tracebacks in the "
            f"servers' stderr: {r['server_tracebacks']}.",
        ]
        if r["error_examples"]:
            lines += ["- First errors:"] + [f"  - `{e}`" for e in r["error_examples"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the load")
    parser.add_argument("--clients", type=int, default=16, help="concurrent MCP clients")
    parser.add_argument(
        "--servers",
        type=int,
        nargs="+",
        choices=(1, 2),
        default=[1],
        help="server processes on the store; several values make several runs",
    )
    parser.add_argument("--procs", type=int, default=4, help="client worker processes")
    parser.add_argument("--write-share", type=float, default=0.5)
    parser.add_argument("--messages", type=int, default=20_000, help="stored corpus size")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--dsn",
        default=None,
        help="also run on this PostgreSQL DSN (a fresh namespace, deleted afterwards)",
    )
    parser.add_argument("--output", type=Path, default=None, help="write Markdown here")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.clients < 1 or args.seconds <= 0 or not 0 <= args.write_share <= 1:
        parser.error("--clients >= 1, --seconds > 0 and --write-share in 0..1")
    results = []
    for dsn in [None, args.dsn] if args.dsn else [None]:
        for servers in args.servers:
            with tempfile.TemporaryDirectory(prefix="memstrata-mcp-load-") as tmp:
                results.append(bench(args, Path(tmp) / "home", servers, dsn))
    command = "python benchmarks/mcp_load.py " + " ".join(
        "postgresql://..." if a == args.dsn else a for a in (argv or sys.argv[1:])
    )
    report = render(results, command.strip())
    print(json.dumps(results, indent=2) if args.json else report)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report, encoding="utf-8")
        log(f"wrote {args.output}")
    healthy = all(
        sum(op["count"] for op in r["ops"].values()) and r["lost_writes"] == 0 and not r["errors"]
        for r in results
    )
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main())
