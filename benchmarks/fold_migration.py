"""What the folding migrations cost a store written before them, on both backends.

Usage::

    python benchmarks/fold_migration.py [--messages 100000] [--pg-dsn DSN] [--out FILE]

A store of ``--messages`` messages of ``benchmarks/corpus.py`` is written as an earlier
version wrote it (its CJK index unfolded), then opened by this version, which re-indexes
the rows that folding changes (SQLite ``m005_folded_cjk_index``, PostgreSQL
``m009_folded_cjk_vectors``). Two corpora: the benchmark corpus as it is (a fifth of its
sessions in simplified Chinese: nothing to fold but a few full-width characters), and the
same corpus with every simplified character that has a traditional form written in it
(every Chinese message changes: the worst case). The baseline, in the same run, is the
time it took to write the store; the figure is the migration's share of it.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path
from memstrata.query.cjk import unfolded_cjk_terms
from memstrata.query.zh_variants import SIMPLIFIED, TRADITIONAL
from memstrata.store.sqlite import SessionStore
from memstrata.store.sqlite import migrations as sqlite_migrations
from store import load_average, publish, source_version

# One traditional form per simplified character (the first the table lists).
_TO_TRADITIONAL = str.maketrans(
    {s: t for t, s in reversed(list(zip(TRADITIONAL, SIMPLIFIED, strict=True)))}
)


@contextmanager
def unfolded(module: ModuleType) -> Iterator[None]:
    """Rows written inside are indexed as before folding (``module``'s cjk_terms)."""
    original = getattr(module, "cjk_terms")  # noqa: B009 - patched by name
    setattr(module, "cjk_terms", unfolded_cjk_terms)  # noqa: B010
    try:
        yield
    finally:
        setattr(module, "cjk_terms", original)  # noqa: B010


def sessions(n: int, traditional: bool) -> Iterator[corpus.Session]:
    for s in corpus.generate(n):
        if traditional:
            for turn in s.turns:
                for m in turn:
                    if isinstance(m.get("content"), str):
                        m["content"] = m["content"].translate(_TO_TRADITIONAL)
        yield s


def write(store: Any, n: int, traditional: bool) -> float:
    start = time.perf_counter()
    for s in sessions(n, traditional):
        store.create_session(s.id, source=s.source)
        store.append_messages(s.id, [m for turn in s.turns for m in turn])
    return time.perf_counter() - start


def sqlite_case(folder: Path, n: int, traditional: bool) -> tuple[float, float, float, int]:
    path = folder / f"{'tw' if traditional else 'cn'}.db"
    with unfolded(sqlite_migrations), SessionStore(path) as store:
        wrote = write(store, n, traditional)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM _migrations WHERE name = 'm005_folded_cjk_index'")
    start = time.perf_counter()
    with SessionStore(path) as store:
        migrated = time.perf_counter() - start
        assert store.check_indexes() == []
    start = time.perf_counter()
    with SessionStore(path):
        plain = time.perf_counter() - start
    return wrote, migrated, plain, count_changed(n, traditional)


def postgres_case(dsn: str, n: int, traditional: bool) -> tuple[float, float, float, int]:
    import psycopg

    from memstrata.store.postgres import PostgresSessionStore
    from memstrata.store.postgres import messages as pg_messages

    schema = f"fold_bench_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in dsn else "?"
    scoped = f"{dsn}{sep}options=-csearch_path%3D{schema},public"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        with unfolded(pg_messages), PostgresSessionStore(scoped, namespace="bench") as store:
            wrote = write(store, n, traditional)
        with psycopg.connect(scoped, autocommit=True) as conn:
            conn.execute("DELETE FROM _migrations WHERE name = 'm009_folded_cjk_vectors'")
        start = time.perf_counter()
        with PostgresSessionStore(scoped, namespace="bench"):
            migrated = time.perf_counter() - start
        start = time.perf_counter()
        with PostgresSessionStore(scoped, namespace="bench"):
            plain = time.perf_counter() - start
        return wrote, migrated, plain, count_changed(n, traditional)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def count_changed(n: int, traditional: bool) -> int:
    from memstrata.query.fold import folds

    return sum(
        1
        for s in sessions(n, traditional)
        for turn in s.turns
        for m in turn
        if any(folds(v) for v in (m.get("content"), m.get("tool_name")) if isinstance(v, str))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--pg-dsn", help="also measure PostgreSQL (a schema is made and dropped)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    version = source_version()  # the code measured, before the run
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for traditional in (False, True):
            rows.append(
                ("SQLite", traditional, *sqlite_case(Path(tmp), args.messages, traditional))
            )
            print(rows[-1], flush=True)
    if args.pg_dsn:
        for traditional in (False, True):
            rows.append(
                ("PostgreSQL", traditional, *postgres_case(args.pg_dsn, args.messages, traditional))
            )
            print(rows[-1], flush=True)
    lines = [
        "# The folding migrations on a store written before them",
        "",
        f"`python benchmarks/fold_migration.py --messages {args.messages}"
        + (" --pg-dsn DSN" if args.pg_dsn else "")
        + "`",
        "",
        f"{args.messages:,} messages of `benchmarks/corpus.py` written as an earlier version "
        "wrote them (CJK index unfolded), then opened by this version, which re-indexes the "
        "rows folding changes. Baseline: the time the store took to write, in the same run "
        f"(one `append_messages` per session). memstrata {version}, "
        f"{platform.system()} {platform.machine()}, load average {load_average()} after the "
        "run; one run each (a shared machine: read the ratio).",
        "",
        "| backend | corpus | rows re-indexed | writing the store (s) "
        "| open with the migration (s) | open without (s) | migration / writing |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for backend, traditional, wrote, migrated, plain, changed in rows:
        kind = "every Chinese message traditional" if traditional else "as generated (simplified)"
        lines.append(
            f"| {backend} | {kind} | {changed:,} | {wrote:.1f} | {migrated:.2f} | {plain:.2f} | "
            f"{(migrated - plain) / wrote:.3f} |"
        )
    return publish("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    raise SystemExit(main())
