"""Where an append's time goes on PostgreSQL: client and server CPU per message.

Usage::

    python benchmarks/pg_append_cost.py --dsn postgresql://127.0.0.1:5432/test \\
        [--messages 12000] [--drop INDEX ...] [--set INDEX:OPTION=VALUE ...]

One client appends ``--messages`` corpus messages turn by turn (one ``append_messages``
per turn, as the agent does) into a fresh schema, after the optional changes to the
schema (``--drop idx_messages_ns_trgm``; ``--set
idx_messages_ns_trgm:gin_pending_list_limit=256``), and prints the rate and the CPU time
per message of this process and of every PostgreSQL process of the machine (read from
``/proc``: the server must run on this machine, and other work on it counts too).
Run it with ``PYTHONPATH=OTHER/src`` to measure another version.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402  (the benchmarks' own modules, by path)
from store_postgres import open_store  # noqa: E402

DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"


def server_cpu() -> float:
    """Seconds of CPU used so far by the machine's PostgreSQL processes, those that
    ended included (a backend ends with its connection: the postmaster's count of its
    reaped children holds its time)."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("postgres"):
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--messages", type=int, default=12_000)
    parser.add_argument("--drop", action="append", default=[], metavar="INDEX")
    parser.add_argument("--set", action="append", default=[], metavar="INDEX:OPTION=VALUE")
    parser.add_argument(
        "--merge-rows", type=int, help="the store's MERGE_ROWS instead of its default"
    )
    args = parser.parse_args()

    import psycopg

    if args.merge_rows is not None:
        from memstrata.store.postgres import maintenance

        maintenance.MERGE_ROWS = args.merge_rows
    sessions = list(corpus.generate(args.messages, seed=5))
    schema = f"memstrata_bench_append_{os.getpid()}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = psycopg.conninfo.make_conninfo(args.dsn, options=f"-csearch_path={schema},public")
    try:
        store = open_store("postgres", dsn, "append")  # durability "normal", any version
        for s in sessions:
            store.create_session(s.id, source=s.source)
        with store.connection() as conn:
            for name in args.drop:
                conn.execute(f"DROP INDEX {name}")
            for change in args.set:
                index, option = change.split(":", 1)
                conn.execute(f"ALTER INDEX {index} SET ({option})")
        count = calls = 0
        wall, cpu, server = time.perf_counter(), time.process_time(), server_cpu()
        for s in sessions:
            for turn in s.turns:
                store.append_messages(s.id, turn)
                count += len(turn)
                calls += 1
        store.close()  # the store's last maintenance pass counts too
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        server = server_cpu() - server
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    changes = " ".join(
        [
            *(f"--drop {d}" for d in args.drop),
            *(f"--set {c}" for c in args.set),
            *([f"--merge-rows {args.merge_rows}"] if args.merge_rows is not None else []),
        ]
    )
    print(
        f"{changes or 'as shipped'}: {count} messages in {calls} appends, "
        f"{count / wall:,.0f} msg/s; per message: client CPU {cpu / count * 1e6:.0f} us, "
        f"server CPU {server / count * 1e6:.0f} us, wall {wall / count * 1e6:.0f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
