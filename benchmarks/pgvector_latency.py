"""Hybrid search latency on PostgreSQL: vectors compared in the server (pgvector) or in
the client, on one tenant of the benchmark corpus.

Usage:
    python benchmarks/pgvector_latency.py --dsn DSN [--messages 100000] [--per-class 40]
        [--output benchmarks/results/pgvector_latency.md]

``DSN`` names a database on a server with pgvector. The corpus of ``benchmarks/corpus.py``
(``--messages`` messages) is written into one tenant through the public API
(``append_messages``, one call per session) and embedded by ``index_pending`` with a
deterministic 384-dimension embedder (each word a fixed random direction, a text the sum
of its words: texts sharing words point alike, as with a sentence model, at no model
cost). Two stores then open that same tenant: ``pgvector=True`` (the server compares:
one statement, the keyword candidates and the HNSW index's nearest messages) and
``pgvector=False`` (the client reads the vectors it compares as ``bytea``). Each query of
the corpus's ``word`` and ``question`` classes is asked through ``search_sessions`` with
the embedder, by both stores in alternating order, and without the embedder (the
keyword part alone, for scale). The same data, server and run for both paths, so the
figures differ only by where the cosines are computed.

The run works in a schema of its own (a fresh random name, dropped at the end, also when
the run fails or is interrupted); the extension is created in ``public`` if missing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

import corpus  # the benchmark's own generator, importable by path
from memstrata.search.embedders import index_pending
from memstrata.store.postgres import PostgresSessionStore
from store import source_version  # the benchmarks' own helper, by path

DIMS = 384
_WORD = re.compile(r"\w+")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class HashedWords:
    """A deterministic stand-in for a sentence model: each word a fixed random unit
    direction (seeded by its hash), a text the normalised sum of its words'."""

    name = "hashed-words-384"
    dims = DIMS

    def __init__(self) -> None:
        self._words: dict[str, Any] = {}

    def _word(self, word: str) -> Any:
        vec = self._words.get(word)
        if vec is None:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            vec = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
            self._words[word] = vec
        return vec

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            words = _WORD.findall(text.lower())[:256]
            total = np.zeros(DIMS, dtype=np.float32)
            for word in words:
                total += self._word(word)
            norm = float(np.linalg.norm(total))
            out.append((total / norm if norm > 0 else total + 1.0 / DIMS).tolist())
        return out


@contextmanager
def own_schema(dsn: str) -> Iterator[str]:
    """A schema of a fresh name for this run, dropped afterwards; yields a DSN using it."""
    import psycopg

    schema = f"memstrata_pgvector_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        options = quote(f"-csearch_path={schema},public")
        yield f"{dsn}{'&' if '?' in dsn else '?'}options={options}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(dsn: str, messages: int, per_class: int) -> dict[str, Any]:
    """Load, embed and time both paths; return the figures."""
    embedder = HashedWords()
    figures: dict[str, Any] = {"messages": messages}
    with (
        own_schema(dsn) as run_dsn,
        PostgresSessionStore(run_dsn, namespace="bench", pool_size=2) as server,
    ):
        if server.vector_search != "server":
            raise SystemExit(f"{dsn} compares vectors in the client: {server._vectors.reason}")
        start = time.perf_counter()
        sessions = 0
        for s in corpus.generate(messages):
            server.create_session(s.id, source=s.source)
            server.append_messages(s.id, s.messages)
            sessions += 1
        figures["sessions"] = sessions
        figures["load_s"] = time.perf_counter() - start
        log(f"loaded {messages} messages in {sessions} sessions ({figures['load_s']:.0f} s)")
        start = time.perf_counter()
        figures["vectors"] = index_pending(server, embedder, batch=256)
        figures["index_s"] = time.perf_counter() - start
        log(f"embedded and stored {figures['vectors']} ({figures['index_s']:.0f} s)")
        server.optimize()
        figures["versions"] = versions(dsn)
        figures["sizes"] = sizes(run_dsn)
        with PostgresSessionStore(
            run_dsn, namespace="bench", pool_size=2, pgvector=False
        ) as client:
            figures.update(measure(server, client, embedder, per_class))
        figures["plan"] = explain(server, embedder, corpus.queries()["question"][0])
    return figures


def measure(
    server: PostgresSessionStore, client: PostgresSessionStore, embedder: Any, per_class: int
) -> dict[str, Any]:
    """Per-query latency (ms) of each path, in alternating order, and the keyword part."""
    classes = corpus.queries()
    questions = [q for cls in ("word", "question") for q in classes[cls][:per_class]]
    for q in questions[:5]:  # warm both pools and caches
        server.search_sessions(q, limit=10, embedder=embedder)
        client.search_sessions(q, limit=10, embedder=embedder)
    times: dict[str, list[float]] = {"server": [], "client": [], "keywords": []}
    same_top = 0
    overlap = 0.0
    for i, q in enumerate(questions):
        order = [("server", server), ("client", client)]
        if i % 2:
            order.reverse()
        hits: dict[str, list[str]] = {}
        for label, store in order:
            start = time.perf_counter()
            found = store.search_sessions(q, limit=10, embedder=embedder)
            times[label].append((time.perf_counter() - start) * 1000)
            hits[label] = [h["session_id"] for h in found]
        start = time.perf_counter()
        client.search_sessions(q, limit=10)
        times["keywords"].append((time.perf_counter() - start) * 1000)
        same_top += bool(hits["server"][:1] == hits["client"][:1])
        both = set(hits["server"]) | set(hits["client"])
        overlap += len(set(hits["server"]) & set(hits["client"])) / len(both) if both else 1.0
    return {
        "queries": len(questions),
        "times": times,
        "same_top": same_top,
        "overlap": overlap / len(questions),
    }


def explain(store: PostgresSessionStore, embedder: Any, question: str) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the server's statement for ``question``, with the
    keyword candidates its search compared."""
    from memstrata.store.postgres.pgvector import NEAREST, cosines_sql, nearest_settings

    ids = [int(i) for h in store.search_sessions(question, limit=30) for i in h["message_ids"]]
    vector = embedder.embed([question])[0]
    with store.connection() as conn, nearest_settings(conn):
        rows = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS) " + cosines_sql(len(vector)),
            {
                "q": "[" + ",".join(repr(x) for x in vector) + "]",
                "ns": store.namespace,
                "model": embedder.name,
                "nearest": NEAREST,
                "ids": ids,
            },
        ).fetchall()
    return "\n".join(str(next(iter(r.values()))) for r in rows)


def versions(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector')"
        ).fetchone()
    return f"PostgreSQL {row[0]}, pgvector {row[1]}" if row else "unknown"


def sizes(dsn: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
            "WHERE (c.relname LIKE 'idx_message_vectors_hnsw_%%' "
            "OR c.relname = 'message_vectors') "
            "AND c.relnamespace = to_regnamespace(current_schema())"
        ).fetchall()
    return {str(name): int(size) for name, size in rows}


def report(figures: dict[str, Any], args: argparse.Namespace) -> str:
    commit = figures.get("commit", "")
    times = figures["times"]
    lines = [
        f"# Hybrid search latency on PostgreSQL: pgvector against the client path "
        f"({figures['messages']:,} messages)\n",
        f"Produced by `python benchmarks/pgvector_latency.py --messages {figures['messages']} "
        f"--per-class {args.per_class}"
        f"{' --output benchmarks/results/' + args.output.name if args.output else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, memstrata "
        f"{commit or 'unknown'}; {figures['versions']}. Machine: {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, shared with other jobs (load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end): figures are medians "
        "and percentiles of one run, both paths measured in alternation on the same data.\n",
        f"One tenant: {figures['messages']:,} messages in {figures['sessions']:,} sessions "
        f"(`benchmarks/corpus.py`), written through `append_messages` in "
        f"{figures['load_s']:.0f} s; {figures['vectors']:,} vectors of 384 dimensions "
        f"(deterministic hashed-words embedder) stored by `index_pending` in "
        f"{figures['index_s']:.0f} s, the HNSW index kept up to date as they were written. "
        f"Relation sizes: "
        + ", ".join(f"`{k}` {v / 1e6:.0f} MB" for k, v in sorted(figures["sizes"].items()))
        + ".\n",
        f"Queries: {figures['queries']} (the corpus's `word` and `question` classes), each "
        "through `search_sessions(q, limit=10, embedder=...)` on both stores of the tenant "
        "(`pgvector=True`: the server compares; `pgvector=False`: the client reads the "
        "vectors and compares), and without the embedder for the keyword part alone.\n",
        "| path | median ms | p95 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    labels = {
        "server": "hybrid, vectors compared in the server (pgvector)",
        "client": "hybrid, vectors compared in the client (bytea)",
        "keywords": "keywords only (no embedder)",
    }
    for key, label in labels.items():
        ms = times[key]
        lines.append(
            f"| {label} | {statistics.median(ms):.1f} | {percentile(ms, 0.95):.1f} | "
            f"{max(ms):.1f} |"
        )
    ratio50 = statistics.median(times["server"]) / statistics.median(times["client"])
    ratio95 = percentile(times["server"], 0.95) / percentile(times["client"], 0.95)
    lines += [
        "",
        f"Server over client: median {ratio50:.2f}, p95 {ratio95:.2f}. Same best session on "
        f"both paths for {figures['same_top']} of {figures['queries']} queries; mean overlap "
        f"of the two top-10 lists {figures['overlap']:.2f} (the paths compare different "
        "vector-only candidates: the client the candidate sessions' and the newest messages, "
        "the server the tenant's nearest by the index).",
    ]
    lines += [
        "",
        "The server's statement for the first `question` query (`EXPLAIN (ANALYZE, BUFFERS)`,"
        " with that query's keyword candidates):",
        "",
        "```",
        figures["plan"],
        "```",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("MEMSTRATA_BENCH_PGVECTOR_DSN", ""),
        help="a database on a server with pgvector (a schema of its own is created and dropped)",
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    args = parser.parse_args(argv)
    # A run stopped with SIGTERM (kill, a CI timeout) unwinds as an exception does, so
    # its schema is dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if not args.dsn:
        parser.error("--dsn (or MEMSTRATA_BENCH_PGVECTOR_DSN) is required")
    commit = source_version()  # the code the run starts with, whatever changes meanwhile
    figures = run(args.dsn, args.messages, args.per_class)
    figures["commit"] = commit
    text = report(figures, args)
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
