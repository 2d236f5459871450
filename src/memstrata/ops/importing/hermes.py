"""Import a Hermes Agent home: ``state.db`` (sessions and messages) and ``memories/``.

The database is opened read-only and read with plain SQL, column by column, so a newer
or older Hermes schema (columns added or missing) still imports what both know. Session
ids become ``hermes-<id>``; ``parent_session_id`` links are kept (mapped the same way)
without a recorded lineage kind, so memstrata's fallback rules for imported data decide
whether a child is a continuation, a delegate or a branch. Archived (compacted or
rewound) rows keep their flags, and the token counters are carried over.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from memstrata.errors import ImportDataError
from memstrata.ops.importing.records import (
    BadRecord,
    Item,
    ParsedSource,
    SessionRecord,
    count,
    epoch,
    guarded,
    json_value,
    message,
    opt_text,
    parents_first,
    session_counters,
    session_id,
    title_text,
)
from memstrata.store.codec import JSON_SENTINEL

FORMAT = "hermes"
PREFIX = "hermes"
DB_NAME = "state.db"


def read(path: Path) -> ParsedSource:
    """Open a Hermes home folder (or its ``state.db``) for import."""
    folder = path if path.is_dir() else path.parent
    db_path = path / DB_NAME if path.is_dir() else path
    memory_dirs = [folder / "memories"] if (folder / "memories").is_dir() else []
    if path.is_dir() and any((path / name).exists() for name in ("MEMORY.md", "USER.md")):
        memory_dirs.append(path)  # the memories folder itself
    if not db_path.exists():
        if memory_dirs:
            return ParsedSource(FORMAT, str(path), 0, [], memory_dirs)
        raise ImportDataError(
            f"{path} holds neither {DB_NAME} nor memories/: point to a Hermes home "
            "(usually ~/.hermes), its state.db or its memories folder."
        )
    conn = _connect(db_path)
    try:
        ids = _session_order(conn, db_path)
    except BaseException:
        conn.close()
        raise
    return ParsedSource(FORMAT, str(db_path), len(ids), _records(conn, db_path, ids), memory_dirs)


def _connect(db_path: Path) -> sqlite3.Connection:
    try:
        # mode=ro: an import never changes the source, and works on a copy Hermes holds.
        conn = sqlite3.connect(f"{db_path.absolute().as_uri()}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        # A damaged page can hold bytes that are not UTF-8: decode them as U+FFFD so one
        # bad record is reported and skipped instead of stopping the whole import.
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise ImportDataError(
            f"{db_path} cannot be opened as a SQLite database ({exc}). Check that it is "
            "Hermes' state.db and that it is not truncated (Hermes' own `hermes doctor` "
            "can repair it)."
        ) from exc
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}


def _session_order(conn: sqlite3.Connection, db_path: Path) -> list[str]:
    """Session ids, parents before their children (then by start time)."""
    try:
        columns = _columns(conn, "sessions")
        if not {"id", "started_at"} <= columns or "role" not in _columns(conn, "messages"):
            raise ImportDataError(
                f"{db_path} is a SQLite file but not a Hermes state.db (no sessions/messages "
                "tables): point to the state.db of a Hermes home."
            )
        parent = "parent_session_id" if "parent_session_id" in columns else "NULL"
        rows = conn.execute(
            f"SELECT id, {parent} AS parent FROM sessions ORDER BY started_at, id"
        ).fetchall()
    except (sqlite3.Error, UnicodeDecodeError) as exc:
        raise ImportDataError(f"{db_path} cannot be read ({exc}).") from exc
    return parents_first((str(row["id"]), row["parent"]) for row in rows)


def _records(conn: sqlite3.Connection, db_path: Path, ids: list[str]) -> Iterator[Item]:
    try:
        for sid in ids:
            location = f"{db_path.name} sessions id={sid!r}"
            try:
                row = conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
                rows = conn.execute(
                    "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (sid,)
                ).fetchall()
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                # A damaged page can make one session unreadable and leave the rest fine.
                yield BadRecord(location, f"cannot be read ({exc})")
                continue
            if row is None:
                continue
            session = dict(row)
            yield guarded(location, partial(session_record, session, rows, location, db_path.name))
    finally:
        conn.close()


def session_record(
    session: dict[str, Any],
    rows: list[sqlite3.Row] | list[dict[str, Any]],
    location: str,
    db_name: str = DB_NAME,
) -> SessionRecord:
    """Convert one Hermes ``sessions`` row and its ``messages`` rows.

    ``location`` names the session row in reports; a skipped message is reported as
    ``<db_name> messages id=<id>``.
    """
    started = epoch(session.get("started_at"))
    parent = session.get("parent_session_id")
    record = SessionRecord(
        id=session_id(PREFIX, session.get("id")),
        location=location,
        source=opt_text(session.get("source")) or "hermes",
        title=title_text(session.get("title")),
        started_at=started,
        ended_at=epoch(session.get("ended_at")),
        end_reason=opt_text(session.get("end_reason")),
        parent_id=session_id(PREFIX, parent) if parent not in (None, "") else None,
        model=opt_text(session.get("model")),
        model_config=opt_text(session.get("model_config")),
        system_prompt=opt_text(session.get("system_prompt")),
        user_id=opt_text(session.get("user_id")),
        archived=bool(count(session.get("archived"))),
        counters=session_counters(session),
    )
    cost = session.get("estimated_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        record.estimated_cost_usd = float(cost)
    if record.parent_id == record.id:
        record.parent_id = None
    fallback = started
    for raw in rows:
        data = dict(raw)
        where = f"{db_name} messages id={data.get('id')!r}"
        converted = guarded(where, partial(_message, data, fallback))
        if isinstance(converted, BadRecord):
            record.problems.append(converted)
            continue
        fallback = converted["timestamp"]
        if count(data.get("active", 1)) == 0 and "active" in data:
            record.inactive[len(record.messages)] = bool(count(data.get("compacted")))
        record.messages.append(converted)
    return record


def _content(value: object) -> object:
    # Hermes stores structured content as "\x00json:" + JSON, as memstrata does.
    if isinstance(value, str) and value.startswith(JSON_SENTINEL):
        decoded = json_value(value[len(JSON_SENTINEL) :])
        return decoded if isinstance(decoded, list | dict) else value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _message(data: dict[str, Any], fallback: float | None) -> dict[str, Any]:
    calls = data.get("tool_calls")
    decoded_calls = json_value(calls) if isinstance(calls, str) else None
    return message(
        data.get("role"),
        _content(data.get("content")),
        timestamp=epoch(data.get("timestamp")) or fallback,
        tool_calls=decoded_calls,
        tool_call_id=data.get("tool_call_id"),
        tool_name=data.get("tool_name"),
        token_count=data.get("token_count"),
        finish_reason=data.get("finish_reason"),
        reasoning=data.get("reasoning") or data.get("reasoning_content"),
        api_content=_content(data.get("api_content")),
    )
