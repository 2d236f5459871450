"""Session recall on LoCoMo-format conversations with the PostgreSQL store.

Usage:
    python benchmarks/recall_postgres.py PATH/locomo.json [--dsn DSN] [--limit-questions N]
        [--hybrid e5|minilm] [--expansion] [--pgvector-dsn DSN]
        [--output benchmarks/results/recall_postgres.md]

The PostgreSQL twin of ``benchmarks/recall.py``, reusing its loading and scoring: each
conversation goes into its own tenant (namespace) of one PostgreSQL database, one store
session per LoCoMo session and one message per turn, and every question (category 5
left out) is asked verbatim through the public ``PostgresSessionStore.search_sessions``.
A MADial-Bench folder (``*-memory.jsonl``, ``*-dialogue.jsonl``) is read as
``recall.py`` reads it. The SQLite store answers the same questions in the same run
(``SessionStore.search_sessions``), so every figure sits beside its baseline measured on
the same machine and code. Each recall option is measured on both backends: the shipped
default (dates on), dates off, speaker awareness, hybrid vectors (``--hybrid``: each text
is embedded once and the same vectors are stored in both backends through
``index_pending``) and query expansion (``--expansion``: a deterministic fake summary
model over HTTP, each backend with its own expansion cache).

``--pgvector-dsn`` names a second database, on a server with pgvector: the hybrid
options are then also asked of a third backend, ``[pgvector]``, whose store compares
the vectors in the server (``vector_search == "server"``), beside ``[postgres]`` which
compares them in the client.

The run works in a schema of its own (``memstrata_recall_<pid>_<random>``, dropped at
the end, also when the run fails or is interrupted), so it never reads or deletes
anyone else's rows in the database, and a schema left by a killed run never stands in
the way of the next.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall  # the SQLite benchmark: loading, filling, scoring
from memstrata.store.postgres import PostgresSessionStore
from memstrata.store.sqlite.store import SessionStore
from store import source_version  # the benchmarks' own helper, by path

DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def schema_dsn(dsn: str, schema: str) -> str:
    """``dsn`` with its search_path set to ``schema`` (then public, for pg_trgm)."""
    options = quote(f"-csearch_path={schema},public")
    return f"{dsn}{'&' if '?' in dsn else '?'}options={options}"


@contextmanager
def own_schema(dsn: str, *, pgvector: bool = False) -> Iterator[str]:
    """A fresh schema for this run, dropped afterwards; yields a DSN that uses it.

    With ``pgvector`` the extension is created in ``public`` first (if it is not there),
    so that it outlives the schema and stays visible to every run's search_path.
    """
    import psycopg

    schema = f"memstrata_recall_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        if pgvector:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public")
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_dsn(dsn, schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def options(
    embedders: dict[str, Any], expander: Callable[[Any, str], list[str]] | None
) -> dict[str, Callable[[Any, str], list[dict[str, Any]]]]:
    """Each recall option as a search of any store."""
    out: dict[str, Callable[[Any, str], list[dict[str, Any]]]] = {
        "default (dates on)": lambda st, q: st.search_sessions(q, limit=10),
        "dates off": lambda st, q: st.search_sessions(q, limit=10, dates=False),
        "speaker awareness": lambda st, q: st.search_sessions(q, limit=10, speakers=True),
    }
    for label, embedder in embedders.items():
        out[f"hybrid {label}"] = partial(_hybrid, embedder)
    if expander is not None:
        exp = expander
        out["query expansion (fake rewrites)"] = lambda st, q: st.search_sessions(
            q, limit=10, subqueries=exp(st, q)
        )
    return out


def _hybrid(embedder: Any, store: Any, question: str) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = store.search_sessions(question, limit=10, embedder=embedder)
    return hits


def run(
    path: Path,
    dsn: str,
    limit_questions: int | None,
    embedders: dict[str, Any] | None = None,
    expander: Callable[[Any, str], list[str]] | None = None,
    half: str | None = None,
    pgvector_dsn: str | None = None,
) -> dict[str, Any]:
    """Scores and per-question latencies of every option on both backends (``half``: one
    half of the data, as ``recall.py --half`` splits it); with ``pgvector_dsn`` the
    hybrid options on a third, ``[pgvector]``."""
    from memstrata.search.embedders import index_pending

    convs = (
        recall.load_madial(path, limit_questions, half)
        if path.is_dir()
        else recall.load(path, limit_questions, half)
    )
    embedders = embedders or {}
    askers = options(embedders, expander)
    hybrid = [f"hybrid {label}" for label in embedders]

    def backends_of(name: str) -> tuple[str, ...]:
        if pgvector_dsn and name in hybrid:
            return ("sqlite", "postgres", "pgvector")
        return ("sqlite", "postgres")

    systems = [f"{name} [{backend}]" for name in askers for backend in backends_of(name)]
    scores = {name: recall.Scores() for name in systems}
    times: dict[str, list[float]] = {name: [] for name in systems}
    with ExitStack() as stack:
        run_dsn = stack.enter_context(own_schema(dsn))
        vector_dsn = (
            stack.enter_context(own_schema(pgvector_dsn, pgvector=True)) if pgvector_dsn else None
        )
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        for i, conv in enumerate(convs):
            log(f"{conv.name}: {len(conv.sessions)} sessions, {len(conv.questions)} questions")
            stores: dict[str, Any] = {
                "sqlite": SessionStore(Path(tmp) / f"{i}.db"),
                "postgres": PostgresSessionStore(run_dsn, namespace=f"locomo-{i}", pool_size=2),
            }
            try:
                if vector_dsn is not None:
                    stores["pgvector"] = PostgresSessionStore(
                        vector_dsn, namespace=f"locomo-{i}", pool_size=2
                    )
                    if stores["pgvector"].vector_search != "server":
                        raise SystemExit(
                            f"--pgvector-dsn: {pgvector_dsn} compares vectors in the client "
                            f"({stores['pgvector']._vectors.reason})"
                        )
                for store in stores.values():
                    recall.fill(store, conv)  # type: ignore[arg-type]  # the same public methods
                    for embedder in embedders.values():
                        index_pending(store, embedder)
                for backend in stores:
                    if backend != "sqlite":
                        stores[backend].optimize()
                for question, category, gold in conv.questions:
                    for name, ask in askers.items():
                        for backend in backends_of(name):
                            store = stores[backend]
                            start = time.perf_counter()
                            hits = ask(store, question)
                            times[f"{name} [{backend}]"].append(
                                (time.perf_counter() - start) * 1000
                            )
                            scores[f"{name} [{backend}]"].add(
                                category, [h["session_id"] for h in hits], gold
                            )
            finally:
                for store in stores.values():
                    store.close()
    return {
        "scores": scores,
        "times": times,
        "conversations": len(convs),
        "options": list(askers),
        "pgvector": hybrid if pgvector_dsn else [],
    }


def gaps(result: dict[str, Any]) -> list[str]:
    """Per option: each metric on SQLite and PostgreSQL, and the largest difference."""
    return _gap_table(result, result["options"], ("sqlite", "SQLite"), ("postgres", "PostgreSQL"))


def server_gaps(result: dict[str, Any]) -> list[str]:
    """Per hybrid option: each metric with vectors compared in the client and in the
    server (pgvector), and the difference."""
    return _gap_table(
        result,
        result["pgvector"],
        ("postgres", "client (bytea)"),
        ("pgvector", "server (pgvector)"),
    )


def _gap_table(
    result: dict[str, Any], options: Iterable[str], base: tuple[str, str], other: tuple[str, str]
) -> list[str]:
    """Each option's metrics on two systems (``(tag, column title)``) and their difference."""
    lines = [
        f"| option | metric | {base[1]} | {other[1]} | difference |",
        "|---|---|---:|---:|---:|",
    ]
    for name in options:
        first = result["scores"][f"{name} [{base[0]}]"].mean()
        second = result["scores"][f"{name} [{other[0]}]"].mean()
        for metric in ("R@5", "R@10", "any@1", "any@5", "NDCG@5"):
            diff = second[metric] - first[metric]
            lines.append(
                f"| {name} | {metric} | {first[metric]:.3f} | {second[metric]:.3f} | {diff:+.3f} |"
            )
    return lines


def shown_output(path: Path) -> str:
    """``path`` as the report quotes it: relative to the repository, never a home folder."""
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return path.name


def report(result: dict[str, Any], args: argparse.Namespace) -> str:
    """The Markdown result page."""
    commit = result.get("commit") or source_version()
    times = result["times"]
    lines = [
        f"# Session recall on PostgreSQL ({'MADial-Bench' if args.path.is_dir() else 'LoCoMo'})\n",
        f"Produced by `python benchmarks/recall_postgres.py {args.path.name}"
        f"{' --limit-questions ' + str(args.limit_questions) if args.limit_questions else ''}"
        f"{''.join(' --hybrid ' + h for h in args.hybrid)}"
        f"{' --expansion' if args.expansion else ''}"
        f"{' --pgvector-dsn DSN' if args.pgvector_dsn else ''}"
        f"{' --output ' + shown_output(args.output) if args.output else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n",
        f"Data: `{args.path.name}`, {result['conversations']} conversations, each in its own "
        "tenant (namespace) of one PostgreSQL database and in its own SQLite file; "
        "questions asked verbatim, category 5 (adversarial) left out. "
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"memstrata {commit}; the machine is "
        "shared with other jobs, so latencies are medians and carry that noise.\n",
        "Systems: each option of `search_sessions` (`default` is the shipped one, date "
        "evidence on; `dates off` is `dates=False`; `speaker awareness` is `speakers=True`; "
        "`hybrid` is `embedder=` after `index_pending` with the same vectors in both "
        "backends; `query expansion` is `subqueries=expand_query(store, fake model, q)`), "
        "`[sqlite]` on `SessionStore`, `[postgres]` on `PostgresSessionStore`. PostgreSQL "
        "reads vectors as `bytea` and computes the cosines in the client, as SQLite does.\n",
        *(
            [
                "`[pgvector]` is `PostgresSessionStore` on a server with pgvector "
                f"({pgvector_server(args.pgvector_dsn)}): one statement returns the cosines of "
                "the keyword candidates and of the nearest messages by the HNSW index; the "
                "same vectors as `[postgres]`, which compares them in the client.\n",
                "Vectors compared in the client against the server, per hybrid option:\n",
                *server_gaps(result),
                "",
            ]
            if result["pgvector"]
            else []
        ),
        "SQLite against PostgreSQL, per option:\n",
        *gaps(result),
        "",
        "Every system:\n",
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


def pgvector_server(dsn: str) -> str:
    """The server's and pgvector's versions, for the report."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version') AS pg, "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector') AS vector"
        ).fetchone()
    return f"PostgreSQL {row[0]}, pgvector {row[1]}" if row else "versions unknown"


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
    parser.add_argument(
        "--half",
        choices=("a", "b"),
        default=None,
        help="one half of the data, split as recall.py --half splits it",
    )
    parser.add_argument(
        "--hybrid",
        action="append",
        default=[],
        choices=["e5", "minilm"],
        help="measure hybrid recall with this offline embedder (repeatable)",
    )
    parser.add_argument(
        "--expansion",
        action="store_true",
        help="measure query expansion against a deterministic fake summary model",
    )
    parser.add_argument(
        "--pgvector-dsn",
        default=None,
        help="a database on a server with pgvector: also ask the hybrid options of a store "
        "that compares vectors in the server (a schema of its own is created and dropped)",
    )
    parser.add_argument("--output", type=Path, default=None, help="write a Markdown report")
    args = parser.parse_args(argv)
    # A run stopped with SIGTERM (kill, a CI timeout) unwinds as an exception does, so
    # its schema is dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    from memstrata.search.embedders import named_embedder

    embedders = {
        recall.EMBEDDER_LABELS[choice]: recall.CachedEmbedder(named_embedder(choice))
        for choice in dict.fromkeys(args.hybrid)
    }
    fake_server = client = None
    expander = None
    if args.expansion:
        from memstrata.llm import OpenAIClient
        from memstrata.search.expansion import expand_query
        from memstrata.testing import FakeLLMServer

        fake_server = FakeLLMServer()
        fake_server.start()
        fake_server.on(lambda body: True, recall.fake_rewrite)
        client = OpenAIClient("fake-summary", base_url=fake_server.base_url, max_retries=0)

        def expander(store: Any, question: str) -> list[str]:
            return expand_query(store, client, question)

    commit = source_version()  # the code the run starts with, whatever changes meanwhile
    try:
        result = run(
            args.path,
            args.dsn,
            args.limit_questions,
            embedders,
            expander,
            args.half,
            args.pgvector_dsn,
        )
    finally:
        if fake_server is not None:
            fake_server.stop()
    result["commit"] = commit
    text = report(result, args)
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
