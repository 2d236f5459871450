"""PostgreSQL search, two versions of memstrata on one tenant: same answers, time, statements.

Usage::

    git worktree add PATH BEFORE_COMMIT
    python benchmarks/store_postgres_ab.py --dsn postgresql://127.0.0.1:5432/test \\
        --messages 100000 --before-src PATH/src [--schema memstrata_ab] [--rounds 9] \\
        [--out benchmarks/results/store_postgres_ab.md]

With ``--tenants T``, T tenants of N messages are written at the same time (their ids
interleave, as those of the users of one database do) and the first is measured.

The tenant (``ab<N>``, N messages of ``benchmarks/corpus.py``, loaded through the public
API by ``--clients`` processes as ``benchmarks/store.py --backend postgres`` loads them)
lives in a kept schema (``--schema``): a later run with the same N reuses it instead of
loading it again.

Two processes search it: memstrata from ``--before-src`` (*before*) and from
``--after-src`` (*after*, this checkout's ``src`` by default), each with its ``src``
first on ``PYTHONPATH``. Every query of each class (the eight of ``corpus.queries()``
and ``identifiers``: code-like names, whole and cut inside, so the substring path is
asked) runs ``--rounds`` times on each side, interleaved query by query and the side
that goes first alternating, so that other work on a shared machine weighs on both.
Each search is ``search_messages(query, limit=20)``, timed in its own process; the
statements it sends to the server are counted there (every one, ``BEGIN`` and
``COMMIT`` included), and the probe statement (the one that tells common terms from rare
ones) is timed alone. Before the timed rounds both sides answer every query once (a
warm-up, not timed); in every round the two pages (ids, scores, snippets, context) must
be identical, and the report says how many were.

Figures are p50/p95 per class over all its timed searches (queries times rounds), with
the ratio after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from store import log, percentile  # noqa: E402  (the benchmarks' own helpers, by path)
from store_ab import commit_of  # noqa: E402

SRC = HERE.parent / "src"
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
DEFAULT_SCHEMA = "memstrata_ab"
LIMIT = 20
CLASSES = (
    "word",
    "question",
    "phrase",
    "prefix",
    "boolean",
    "cjk3",
    "cjk2",
    "glued",
    "identifiers",
    "zhq",
)
CLASS_LABELS = {
    "word": "word",
    "question": "question",
    "phrase": "phrase",
    "prefix": "prefix",
    "boolean": "boolean",
    "cjk3": "CJK 3+",
    "cjk2": "CJK 2",
    "glued": "glued",
    "identifiers": "identifiers",
    "zhq": "Chinese question",
}
# The probe statement of memstrata.store.postgres.search (both versions start it so).
# The probe statement: with the sample of the tenant's newest rows, or through the
# indexes alone (terms in none of the ranking sample's rows, since 2026-12).
PROBE_PREFIX = ("WITH s AS MATERIALIZED", "WITH p AS MATERIALIZED (SELECT ARRAY(")


def queries(classes: tuple[str, ...] = CLASSES) -> dict[str, list[str]]:
    """The queries per class: the corpus's eight classes and ``identifiers``."""
    sys.path.insert(0, str(HERE))
    import corpus

    out = corpus.queries()
    # identifiers: the coined helper names the prefix class plants ("venrixo_sync" in
    # "Renamed the helper to venrixo_sync in lib/venrixo.py."), asked whole (the word
    # index finds them) and without their first two letters (only a substring scan
    # does), so both sides of the substring fallback are measured.
    idents = [p.needle for p in corpus.PLANTS if p.query_class == "prefix" and "_" in p.needle]
    out["identifiers"] = [*idents, *(i[2:] for i in idents)]
    # Chinese questions as users type them, half with a homophone slip of a word.
    out["zhq"] = corpus.zh_questions()
    return {c: out[c] for c in classes}


# ------------------------------------------------------------------------------ worker
class Counter:
    """Statements one process sends to the server, counted in psycopg (so the same for
    any version of memstrata): each query a cursor sends, each command a connection
    sends (``BEGIN``, ``COMMIT``), and the time of the probe statements."""

    def __init__(self) -> None:
        self.statements = 0
        self.probe_ms = 0.0
        self.texts: list[str] = []
        self.keep_texts = False

    def install(self) -> None:
        import psycopg
        from psycopg._connection_base import BaseConnection
        from psycopg._cursor_base import BaseCursor

        send, prepared, command = (
            BaseCursor._execute_send,
            BaseCursor._send_query_prepared,
            BaseConnection._exec_command,
        )
        execute = psycopg.Cursor.execute
        counter = self

        def seen(text: bytes | str) -> None:
            counter.statements += 1
            if counter.keep_texts:
                counter.texts.append(text.decode() if isinstance(text, bytes) else text)

        def counted_send(self: Any, query: Any, **kw: Any) -> Any:
            seen(query.query)
            return send(self, query, **kw)

        def counted_prepared(self: Any, name: Any, query: Any, **kw: Any) -> Any:
            seen(query.query)
            return prepared(self, name, query, **kw)

        def counted_command(self: Any, cmd: Any, *args: Any, **kw: Any) -> Any:
            seen(cmd if isinstance(cmd, (bytes, str)) else str(cmd))
            return (yield from command(self, cmd, *args, **kw))

        def timed_execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return execute(self, query, *args, **kw)
            finally:
                if isinstance(query, str) and query.startswith(PROBE_PREFIX):
                    counter.probe_ms += (time.perf_counter() - started) * 1000

        setattr(BaseCursor, "_execute_send", counted_send)  # noqa: B010
        setattr(BaseCursor, "_send_query_prepared", counted_prepared)  # noqa: B010
        setattr(BaseConnection, "_exec_command", counted_command)  # noqa: B010
        setattr(psycopg.Cursor, "execute", timed_execute)  # noqa: B010


def serve(dsn: str, namespace: str, stdin: IO[str], stdout: IO[str]) -> int:
    """The worker: one store; a JSON request per line in, a JSON answer per line out."""
    counter = Counter()
    counter.install()
    import memstrata
    from memstrata.store.postgres import PostgresSessionStore

    store = PostgresSessionStore(dsn, namespace=namespace, durability="normal")
    try:
        store.search_messages("warmup", limit=LIMIT)
        hello = {"memstrata": str(Path(memstrata.__file__).resolve().parent.parent)}
        stdout.write(json.dumps(hello) + "\n")
        stdout.flush()
        for line in stdin:
            request = json.loads(line)
            counter.statements, counter.probe_ms = 0, 0.0
            counter.texts, counter.keep_texts = [], bool(request.get("texts"))
            started = time.perf_counter()
            hits = store.search_messages(request["query"], limit=LIMIT)
            ms = (time.perf_counter() - started) * 1000
            answer = {
                "ms": ms,
                "statements": counter.statements,
                "probe_ms": counter.probe_ms,
                "hits": hits,
                "texts": counter.texts,
            }
            stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
            stdout.flush()
    finally:
        store.close()
    return 0


class Side:
    """A worker process running one version of memstrata."""

    def __init__(self, label: str, src: Path, dsn: str, namespace: str) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve"]
        cmd += ["--dsn", dsn, "--namespace", namespace]
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        hello = self._read()
        found = Path(hello["memstrata"]).resolve()
        if found != src.resolve():
            self.close()
            raise RuntimeError(f"{label}: memstrata imported from {found}, not {src}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the worker stopped ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def search(self, query: str, *, texts: bool = False) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"query": query, "texts": texts}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ------------------------------------------------------------------------------ runner
def interleaved(
    sides: list[Side], qs: dict[str, list[str]], rounds: int
) -> Iterator[tuple[str, str, int, dict[str, dict[str, Any]]]]:
    """Every query of every class asked of each side, ``rounds`` times, the side going
    first alternating query by query (so that other work on a shared machine weighs on
    both): yields the class, the query, the round and the answers by side."""
    for r in range(rounds):
        log(f"round {r + 1}/{rounds}")
        i = 0
        for cls, items in qs.items():
            for q in items:
                order = sides if (r + i) % 2 == 0 else sides[::-1]
                i += 1
                yield cls, q, r, {s.label: s.search(q) for s in order}


def tenant_name(n: int, tenants: int = 1, k: int = 0) -> str:
    """The ``k``-th tenant of ``n`` messages: ``ab<N>``, or of ``tenants`` loaded at once
    ``ab<N>x<T>_<k>`` (the 0th is the one measured)."""
    return f"ab{n}" if tenants <= 1 else f"ab{n}x{tenants}_{k}"


def load(
    dsn: str, schema: str, n: int, clients: int, tenants: int = 1
) -> tuple[str, dict[str, Any]]:
    """The tenant of ``n`` messages in the kept ``schema`` (loaded when missing).

    ``tenants`` > 1: that many tenants of ``n`` messages written at the same time (each
    by ``clients`` processes), so that their ids interleave as those of users of one
    database do; the first is the one measured."""
    sys.path.insert(0, str(HERE))
    import corpus
    import store_postgres

    names = [tenant_name(n, tenants, k) for k in range(max(tenants, 1))]
    with store_postgres.kept_schema(dsn, schema) as schema_dsn:
        records = {name: store_postgres.loaded(schema_dsn, name, n) for name in names}
        if all(r is not None for r in records.values()):
            log(f"tenant {names[0]} ({n:,} messages) reused from an earlier run")
            return schema_dsn, records[names[0]] or {}
        if any(r is not None for r in records.values()):
            raise RuntimeError(f"the tenants {names} of {schema} are partly loaded: drop it")
        with tempfile.TemporaryDirectory(prefix="memstrata-pg-ab-") as work:
            parts = store_postgres.write_parts(Path(work), n, corpus.SEED, clients)
            loads = store_postgres.load_at_once(schema_dsn, names, parts, n, keep=True)
        return schema_dsn, loads[0]


def run(
    dsn: str,
    namespace: str,
    before_src: Path,
    after_src: Path,
    rounds: int,
    classes: tuple[str, ...] = CLASSES,
) -> dict[str, Any]:
    qs = queries(classes)
    sides = [
        Side("before", before_src, dsn, namespace),
        Side("after", after_src, dsn, namespace),
    ]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s.label: {c: [] for c in qs} for s in sides}
    identical = dict.fromkeys(qs, 0)
    compared = dict.fromkeys(qs, 0)
    differing: list[dict[str, Any]] = []
    try:
        log("warm-up: every query once on each side")
        for cls, items in qs.items():
            for q in items:
                pair = [s.search(q) for s in sides]
                if pair[0]["hits"] != pair[1]["hits"] and len(differing) < 20:
                    differing.append({"class": cls, "query": q, "round": "warm-up"})
        for cls, q, r, answers in interleaved(sides, qs, rounds):
            for s in sides:
                a = answers[s.label]
                runs[s.label][cls].append(
                    {
                        "query": q,
                        "ms": a["ms"],
                        "statements": a["statements"],
                        "probe_ms": a["probe_ms"],
                        "hits": len(a["hits"]),
                    }
                )
            compared[cls] += 1
            if answers["before"]["hits"] == answers["after"]["hits"]:
                identical[cls] += 1
            elif len(differing) < 20:
                differing.append({"class": cls, "query": q, "round": r + 1})
    finally:
        for s in sides:
            s.close()
    return {"runs": runs, "identical": identical, "compared": compared, "differing": differing}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per class and side: p50/p95 ms, statements per search, probe ms."""
    out: dict[str, Any] = {}
    classes = list(result["compared"])
    for cls in classes:
        row: dict[str, Any] = {
            "identical": result["identical"][cls],
            "compared": result["compared"][cls],
        }
        for side in ("before", "after"):
            items = result["runs"][side][cls]
            ms = [x["ms"] for x in items]
            statements = [x["statements"] for x in items]
            probes = [x["probe_ms"] for x in items if x["probe_ms"] > 0]
            row[side] = {
                "p50": percentile(ms, 50),
                "p95": percentile(ms, 95),
                "statements_mean": sum(statements) / len(statements) if statements else 0.0,
                "statements_min": min(statements, default=0),
                "statements_max": max(statements, default=0),
                "probe_p50": percentile(probes, 50),
            }
        out[cls] = row
    every = {
        side: [x["probe_ms"] for c in classes for x in result["runs"][side][c] if x["probe_ms"]]
        for side in ("before", "after")
    }
    out["probe"] = {
        side: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for side, v in every.items()
    }
    return out


def compact(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """The timed searches for the JSON: per side, class and query, its rounds' times
    (ms, rounded to 0.01), statements and probe times, and its page's length."""
    out: dict[str, Any] = {}
    for side, classes in runs.items():
        out[side] = {}
        for cls, items in classes.items():
            per: dict[str, dict[str, Any]] = {}
            for x in items:
                q = per.setdefault(
                    x["query"], {"ms": [], "statements": [], "probe_ms": [], "hits": x["hits"]}
                )
                q["ms"].append(round(x["ms"], 2))
                q["statements"].append(x["statements"])
                q["probe_ms"].append(round(x["probe_ms"], 2))
            out[side][cls] = per
    return out


def to_json(raw: dict[str, Any]) -> str:
    """``raw`` as indented JSON, each query's timed searches on one line."""
    head = json.dumps({k: v for k, v in raw.items() if k != "runs"}, indent=1)
    sides = []
    for side, classes in raw["runs"].items():
        blocks = []
        for cls, per in classes.items():
            lines = ",\n".join(
                f"    {json.dumps(q, ensure_ascii=False)}: {json.dumps(v)}" for q, v in per.items()
            )
            blocks.append(f"   {json.dumps(cls)}: {{\n{lines}\n   }}")
        sides.append(f"  {json.dumps(side)}: {{\n" + ",\n".join(blocks) + "\n  }")
    return head[:-2] + ',\n "runs": {\n' + ",\n".join(sides) + "\n }\n}\n"


def _repo_path(path: str) -> str:
    """``path`` relative to the checkout when it is inside it, else PATH (a report never
    names a directory of the machine it ran on)."""
    try:
        return str(Path(path).resolve().relative_to(HERE.parent))
    except ValueError:
        return "PATH"


def shown_command(argv: list[str], script: str = "benchmarks/store_postgres_ab.py") -> str:
    """The command line for the report, with paths and the DSN's host left out."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append("PATH" if not arg.startswith("postgresql") else "DSN")
            hide_next = False
        elif arg in ("--before-src", "--after-src", "--dsn"):
            shown.append(arg)
            hide_next = True
        elif arg == "--out" or (shown and shown[-1] == "--out" and not arg.startswith("--")):
            shown.append(arg if arg == "--out" else _repo_path(arg))
        elif arg.startswith(("--before-src=", "--after-src=")):
            shown.append(arg.split("=", 1)[0] + "=PATH")
        elif arg.startswith("--dsn="):
            shown.append("--dsn=DSN")
        elif arg.startswith("--out="):
            shown.append("--out=" + _repo_path(arg.split("=", 1)[1]))
        else:
            shown.append(arg)
    return shlex.join(["python", script, *shown]).replace("'", "")


def dirty(src: Path) -> bool:
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    return bool(out.strip())


def fmt(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def render(report: dict[str, Any]) -> str:
    s = report["summary"]
    n = report["messages"]
    lines = [
        f"# PostgreSQL search A/B at {n:,} messages: before {report['before']} → "
        f"after {report['after']}",
        "",
        f"`{report['command']}`",
        "",
        f"One tenant of {n:,} messages ({report['tenant']}, `benchmarks/corpus.py`, loaded "
        f"through the public API{', reused from a kept schema' if report['reused'] else ''}"
        + (
            f", written at the same time as {report['tenants'] - 1} other tenants of as many "
            "messages, so that their ids interleave"
            if report.get("tenants", 1) > 1
            else ""
        )
        + f"). Both versions searched it in their own processes, interleaved query by query "
        f"(the side going first alternating), {report['rounds']} timed rounds after one "
        f"warm-up answer of every query; `search_messages(query, limit=20)`. "
        f"{report['platform']}, PostgreSQL {report['server']}; load average "
        f"{report['load_before']} before the run, {report['load_after']} after (a shared "
        f"machine: compare the two columns of one run, not runs).",
        "",
        f"**Answers: {report['identical']:,}/{report['compared']:,} search pairs identical** "
        "(ids, scores, snippets, context of every page).",
        "",
        f"Probe statement (common or rare terms, every rare term's ids), all classes: "
        f"p50 {fmt(s['probe']['before']['p50'])} → {fmt(s['probe']['after']['p50'])} ms, "
        f"p95 {fmt(s['probe']['before']['p95'])} → {fmt(s['probe']['after']['p95'])} ms.",
        "",
        "| class | queries | p50 before → after (ms) | p95 before → after (ms) | "
        "p95 after/before | statements per search before → after | identical |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cls in report["queries"]:
        row = s[cls]
        b, a = row["before"], row["after"]
        queries_n = report["queries"][cls]
        lines.append(
            f"| {CLASS_LABELS[cls]} | {queries_n} | {fmt(b['p50'])} → {fmt(a['p50'])} | "
            f"{fmt(b['p95'])} → {fmt(a['p95'])} | {a['p95'] / b['p95']:.2f} | "
            f"{_statements(b)} → {_statements(a)} | {row['identical']}/{row['compared']} |"
        )
    lines += [
        "",
        "Statements per search: every statement the search sent to the server, `BEGIN` "
        "and `COMMIT` included (the mean over the class; min-max when they vary).",
    ]
    if report["differing"]:
        lines += ["", "Pages that differed (first 20):", ""]
        for d in report["differing"]:
            lines.append(f"- {d['class']} `{d['query']}` (round {d['round']})")
    return "\n".join(lines) + "\n"


def _statements(side: dict[str, Any]) -> str:
    mean = side["statements_mean"]
    text = f"{mean:.0f}" if abs(mean - round(mean)) < 0.05 else f"{mean:.1f}"
    if side["statements_min"] != side["statements_max"]:
        text += f" ({side['statements_min']}-{side['statements_max']})"
    return text


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def server_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split(" ")[0] if row else "?"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--schema", default=DEFAULT_SCHEMA, help="kept schema of the tenant")
    parser.add_argument("--clients", type=int, default=2, help="loading processes")
    parser.add_argument(
        "--tenants",
        type=int,
        default=1,
        help="tenants of --messages written at once (ids interleaved); the first is measured",
    )
    parser.add_argument("--before-src", type=Path, help="the src of the version before")
    parser.add_argument("--after-src", type=Path, default=SRC)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--classes", default=",".join(CLASSES), help="comma-separated (default: all)"
    )
    parser.add_argument("--out", type=Path, help="write the report (.md) and its .json")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.dsn, args.namespace, sys.stdin, sys.stdout)
    if args.before_src is None:
        parser.error("--before-src is required")
    classes = tuple(c for c in args.classes.split(",") if c)
    if not classes or any(c not in CLASSES for c in classes):
        parser.error(f"--classes: choose among {', '.join(CLASSES)}")
    schema_dsn, record = load(args.dsn, args.schema, args.messages, args.clients, args.tenants)
    namespace = tenant_name(args.messages, args.tenants)
    load_before = load_average()
    started = time.time()
    result = run(schema_dsn, namespace, args.before_src, args.after_src, args.rounds, classes)
    summary = summarize(result)
    identical = sum(result["identical"].values())
    compared = sum(result["compared"].values())
    after = commit_of(args.after_src) + (" with local changes" if dirty(args.after_src) else "")
    report = {
        "command": shown_command(argv),
        "messages": args.messages,
        "tenant": namespace,
        "tenants": args.tenants,
        "reused": bool(record.get("reused")),
        "rounds": args.rounds,
        "before": commit_of(args.before_src),
        "after": after,
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "server": server_version(schema_dsn),
        "load_before": load_before,
        "load_after": load_average(),
        "seconds": time.time() - started,
        "queries": {c: len(v) for c, v in queries(classes).items()},
        "identical": identical,
        "compared": compared,
        "differing": result["differing"],
        "summary": summary,
    }
    text = render(report)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        raw = {**report, "runs": compact(result["runs"])}
        args.out.with_suffix(".json").write_text(to_json(raw), "utf-8")
        log(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0 if identical == compared and not result["differing"] else 1


if __name__ == "__main__":
    sys.exit(main())
