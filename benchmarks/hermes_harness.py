"""Drive Hermes Agent's ``SessionDB`` for the store benchmark, in Hermes' own interpreter.

Run as ``<hermes-python> hermes_harness.py < job.json`` with ``HERMES_HOME`` pointing at a
scratch folder. The job is one JSON object; the result is one JSON object printed as the
last line of stdout. Hermes is imported, never copied: every figure comes from calling its
public ``SessionDB`` methods, except the bulk load (``op: build``), which writes through
Hermes' own connection with the INSERT its ``append_message`` performs (same columns, so
its triggers maintain its two FTS tables) in large transactions, because building a
million-message database one commit at a time would take far too long.

Operations (``op``):

* ``info``: Hermes version, SQLite version, the ``journal_mode`` and ``synchronous`` that
  a freshly opened ``SessionDB`` connection reports.
* ``append``: append the first ``n`` messages of the corpus with ``append_message``, one
  call (one commit) per message, timing the calls only; ``synchronous`` optionally
  overrides the PRAGMA on Hermes' connection (for a like-for-like comparison).
* ``build``: bulk-load the corpus of ``n`` messages (see above) and run Hermes'
  ``optimize_fts``.
* ``search``: time ``search_messages(query, limit=...)`` for every query, ``repeats`` times
  each (once when the first run exceeds ``slow_s`` seconds), and count the results.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus  # the benchmark's own generator, importable by path

_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _open(db_path: str) -> Any:
    from hermes_state import SessionDB  # type: ignore[import-not-found]

    return SessionDB(db_path=Path(db_path))


def _pragmas(db: Any) -> dict[str, str]:
    conn = db._conn  # Hermes' only connection: report what it really uses.
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return {"synchronous": _SYNC_NAMES.get(sync, str(sync)), "journal_mode": journal}


def op_info(job: dict[str, Any]) -> dict[str, Any]:
    db = _open(job["db_path"])
    try:
        return {
            "hermes_version": metadata.version("hermes-agent"),
            "sqlite_version": sqlite3.sqlite_version,
            "python": sys.version.split()[0],
            "platform": sys.platform,
            **_pragmas(db),
        }
    finally:
        db.close()


def op_append(job: dict[str, Any]) -> dict[str, Any]:
    db = _open(job["db_path"])
    try:
        if job.get("synchronous"):
            db._conn.execute(f"PRAGMA synchronous={job['synchronous']}")
        pragmas = _pragmas(db)
        sessions = list(corpus.generate(job["n"], seed=job.get("seed", corpus.SEED)))
        prefix = job.get("id_prefix", "")
        for s in sessions:
            db.create_session(prefix + s.id, source=s.source)
        count = 0
        cpu = time.process_time()
        start = time.perf_counter()
        for s in sessions:
            sid = prefix + s.id
            for m in s.messages:
                db.append_message(
                    sid,
                    m["role"],
                    content=m["content"],
                    tool_name=m["tool_name"],
                    tool_calls=m["tool_calls"],
                    timestamp=m["timestamp"],
                )
                count += 1
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        return {"messages": count, "seconds": seconds, "cpu_seconds": cpu, **pragmas}
    finally:
        db.close()


def op_build(job: dict[str, Any]) -> dict[str, Any]:
    db = _open(job["db_path"])
    batch = int(job.get("batch", 5000))
    sql = (
        "INSERT INTO messages (session_id, role, content, tool_calls, tool_name, "
        "timestamp, observed, active) VALUES (?, ?, ?, ?, ?, ?, 0, 1)"
    )
    try:
        conn = db._conn
        start = time.perf_counter()
        rows: list[tuple[Any, ...]] = []
        counts: list[tuple[int, int, str]] = []
        total = sessions = 0

        def flush() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, rows)
            conn.executemany(
                "UPDATE sessions SET message_count = message_count + ?, "
                "tool_call_count = tool_call_count + ? WHERE id = ?",
                counts,
            )
            conn.execute("COMMIT")
            rows.clear()
            counts.clear()

        for s in corpus.generate(job["n"], seed=job.get("seed", corpus.SEED)):
            db.create_session(s.id, source=s.source)
            sessions += 1
            calls = 0
            for m in s.messages:
                tool_calls = json.dumps(m["tool_calls"]) if m["tool_calls"] else None
                calls += len(m["tool_calls"] or ())
                rows.append(
                    (s.id, m["role"], m["content"], tool_calls, m["tool_name"], m["timestamp"])
                )
            counts.append((len(s.messages), calls, s.id))
            total += len(s.messages)
            if len(rows) >= batch:
                flush()
        if rows:
            flush()
        load_seconds = time.perf_counter() - start
        db.optimize_fts()
        return {
            "messages": total,
            "sessions": sessions,
            "seconds": time.perf_counter() - start,
            "load_seconds": load_seconds,
            **_pragmas(db),
        }
    finally:
        db.close()


def op_search(job: dict[str, Any]) -> dict[str, Any]:
    db = _open(job["db_path"])
    repeats = int(job.get("repeats", 3))
    slow_s = float(job.get("slow_s", 0.5))
    limit = int(job.get("limit", 20))
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for cls, queries in job["queries"].items():
            rows = []
            for q in queries:
                times: list[float] = []
                hits = 0
                for i in range(repeats):
                    t0 = time.perf_counter()
                    res = db.search_messages(q, limit=limit)
                    times.append(time.perf_counter() - t0)
                    hits = len(res)
                    if i == 0 and times[0] > slow_s:
                        break
                rows.append({"query": q, "times": times, "hits": hits})
            out[cls] = rows
        return {"classes": out}
    finally:
        db.close()


OPS = {"info": op_info, "append": op_append, "build": op_build, "search": op_search}


def main() -> int:
    job = json.loads(sys.stdin.read())
    if "HERMES_HOME" not in os.environ:
        print(json.dumps({"error": "set HERMES_HOME to a scratch folder"}))
        return 2
    result = OPS[job["op"]](job)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
