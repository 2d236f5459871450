"""Health of the three full-text indexes: cheap checks on open, full checks, rebuilds.

The indexes are kept by triggers inside the same transaction as the message rows, so a
crash cannot split them. They can still drift when the file is edited by other tools
(a dropped trigger, a ``DELETE`` run with triggers missing); the cheap check below runs
on every open and costs a handful of index lookups, whatever the size of the store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from memstrata.query.cjk import cjk_terms
from memstrata.store.sqlite import migrations

# progress(stage, done, total): stage is the index being rebuilt.
Progress = Callable[[str, int, int], None]
REINDEX_HINT = "Rebuild it with `memstrata sessions reindex` (or SessionStore.reindex())."
_CJK_BATCH = 5000
_INDEX_TABLES = (*migrations.EXTERNAL_CONTENT_TABLES, migrations.CJK_TABLE)


def _names(conn: sqlite3.Connection, kind: str) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall()
    return {str(r[0]) for r in rows}


def _max_id(conn: sqlite3.Connection, table: str) -> int:
    row = conn.execute(f"SELECT max(id) FROM {table}").fetchone()
    return int(row[0] or 0)


def quick_check(conn: sqlite3.Connection) -> list[str]:
    """Problems found by a constant-cost look at the index objects; empty when healthy.

    Checks that every table and trigger exists and that the newest message is in each
    index it belongs to (a missing trigger or a partial rebuild shows there first).
    """
    problems: list[str] = []
    tables = _names(conn, "table")
    missing = [t for t in _INDEX_TABLES if t not in tables]
    problems += [f"full-text table {t} is missing" for t in missing]
    triggers = _names(conn, "trigger")
    problems += [
        f"index trigger {t} is missing" for t in migrations.index_trigger_sql() if t not in triggers
    ]
    if missing:
        return problems
    last = conn.execute(
        "SELECT id, content, tool_name, tool_calls FROM messages ORDER BY id DESC LIMIT 1"
    ).fetchone()
    last_id = int(last[0]) if last else 0
    for table in migrations.EXTERNAL_CONTENT_TABLES:
        indexed = _max_id(conn, f"{table}_docsize")
        if indexed != last_id:
            problems.append(
                f"{table} ends at message {indexed} but the newest message is {last_id}"
            )
    cjk_last = _max_id(conn, f"{migrations.CJK_TABLE}_docsize")
    if cjk_last > last_id:
        problems.append(f"{migrations.CJK_TABLE} holds message {cjk_last}, which does not exist")
    elif last is not None and cjk_terms(last[1], last[2], last[3]) is not None:
        hit = conn.execute(
            f"SELECT 1 FROM {migrations.CJK_TABLE}_docsize WHERE id = ?", (last_id,)
        ).fetchone()
        if hit is None:
            problems.append(f"{migrations.CJK_TABLE} lacks the newest message {last_id}")
    return problems


def full_check(conn: sqlite3.Connection) -> list[str]:
    """Quick check plus FTS5 ``integrity-check`` of every index against the messages.

    Run inside a write transaction: FTS5 commands are ``INSERT`` statements.
    """
    problems = quick_check(conn)
    tables = _names(conn, "table")
    for table in migrations.EXTERNAL_CONTENT_TABLES:
        if table not in tables:
            continue
        try:
            # rank=1 also compares the index with the external content table.
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            problems.append(f"{table} does not match the messages ({exc})")
    cjk = migrations.CJK_TABLE
    if cjk in tables:
        try:
            conn.execute(f"INSERT INTO {cjk}({cjk}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            problems.append(f"{cjk} is damaged ({exc})")
        fn = migrations.CJK_FUNCTION
        expected = f"SELECT id FROM messages WHERE {fn}(content, tool_name, tool_calls) IS NOT NULL"
        actual = f"SELECT id FROM {cjk}_docsize"
        lacking = conn.execute(f"SELECT count(*) FROM ({expected} EXCEPT {actual})").fetchone()
        extra = conn.execute(f"SELECT count(*) FROM ({actual} EXCEPT {expected})").fetchone()
        if lacking[0]:
            problems.append(f"{cjk} lacks {lacking[0]} message(s) holding CJK text")
        if extra[0]:
            problems.append(f"{cjk} holds {extra[0]} row(s) with no matching CJK message")
    return problems


def reindex(conn: sqlite3.Connection, progress: Progress | None = None) -> dict[str, int]:
    """Recreate missing index objects and rebuild all three indexes from ``messages``.

    Run inside a write transaction. Returns the number of rows each index now holds.
    """
    report = progress or (lambda stage, done, total: None)
    total = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    migrations.create_fts_tables(conn)
    migrations.create_index_triggers(conn)
    counts: dict[str, int] = {}
    for table in migrations.EXTERNAL_CONTENT_TABLES:
        report(table, 0, total)
        try:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        except sqlite3.DatabaseError:
            # Shadow tables too damaged to rebuild in place: start the index afresh.
            conn.execute(f"DROP TABLE {table}")
            conn.execute(migrations.FTS_TABLES[table])
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        counts[table] = int(conn.execute(f"SELECT count(*) FROM {table}_docsize").fetchone()[0])
        report(table, total, total)
    cjk, fn = migrations.CJK_TABLE, migrations.CJK_FUNCTION
    report(cjk, 0, total)
    try:
        conn.execute(f"INSERT INTO {cjk}({cjk}) VALUES ('delete-all')")
    except sqlite3.DatabaseError:
        conn.execute(f"DROP TABLE {cjk}")
        conn.execute(migrations.FTS_TABLES[cjk])
    done, last_id = 0, 0
    while True:
        bounds = conn.execute(
            "SELECT max(id), count(*) FROM (SELECT id FROM messages WHERE id > ? "
            "ORDER BY id LIMIT ?)",
            (last_id, _CJK_BATCH),
        ).fetchone()
        if not bounds[1]:
            break
        conn.execute(
            f"INSERT INTO {cjk}(rowid, terms) SELECT id, terms FROM (SELECT id, "
            f"{fn}(content, tool_name, tool_calls) AS terms FROM messages "
            "WHERE id > ? AND id <= ?) WHERE terms IS NOT NULL",
            (last_id, bounds[0]),
        )
        last_id = int(bounds[0])
        done += int(bounds[1])
        if done < total:
            report(cjk, done, total)
    counts[cjk] = int(conn.execute(f"SELECT count(*) FROM {cjk}_docsize").fetchone()[0])
    report(cjk, total, total)
    return counts


def optimize(conn: sqlite3.Connection) -> None:
    """Merge each index's segments into one (faster queries); run in a write transaction."""
    for table in _INDEX_TABLES:
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


def counts(conn: sqlite3.Connection) -> dict[str, Any]:
    """Session and message counts for :meth:`SessionStore.stats`."""
    sessions = conn.execute(
        "SELECT count(*), sum(ended_at IS NULL), sum(archived) FROM sessions"
    ).fetchone()
    messages = conn.execute("SELECT count(*), sum(active = 0) FROM messages").fetchone()
    by_source = conn.execute(
        "SELECT source, count(*) FROM sessions GROUP BY source ORDER BY 2 DESC, 1"
    ).fetchall()
    cjk_rows = conn.execute(f"SELECT count(*) FROM {migrations.CJK_TABLE}_docsize").fetchone()
    return {
        "sessions": int(sessions[0]),
        "live_sessions": int(sessions[1] or 0),
        "archived_sessions": int(sessions[2] or 0),
        "messages": int(messages[0]),
        "archived_messages": int(messages[1] or 0),
        "cjk_indexed_messages": int(cjk_rows[0]),
        "sessions_by_source": {str(r[0]): int(r[1]) for r in by_source},
    }


def integrity_report(sqlite_lines: list[str], index_problems: list[str]) -> dict[str, Any]:
    """The report :meth:`SessionStore.integrity_check` returns."""
    sqlite_ok = sqlite_lines == ["ok"]
    return {
        "ok": sqlite_ok and not index_problems,
        "sqlite": sqlite_lines,
        "indexes": index_problems,
        "fix": None
        if sqlite_ok and not index_problems
        else (
            REINDEX_HINT
            if sqlite_ok
            else "The file itself is damaged: restore a backup, or `sqlite3 state.db .recover`."
        ),
    }
