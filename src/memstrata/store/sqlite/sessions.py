"""Rows of the ``sessions`` table: upsert, lookup, prefix resolution, deletion, pruning.

Every function takes a connection; the write functions run inside the caller's
``BEGIN IMMEDIATE`` transaction, where checks and writes cannot race.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from memstrata.errors import AmbiguousSessionError, SessionNotFoundError
from memstrata.store.sqlite import lineage as store_lineage
from memstrata.store.sqlite import messages as store_messages
from memstrata.store.sqlite import titles

# Upsert columns: on conflict the first writer's non-null value wins.
_COALESCED = (
    "user_id",
    "model",
    "model_config",
    "system_prompt",
    "parent_session_id",
    "lineage_kind",
    "title",
)
_CHUNK = 500


def chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (SQLite caps bound parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def marks(n: int) -> str:
    """``?,?,...`` for ``n`` parameters."""
    return ",".join("?" * n)


def not_found(session_id: str) -> SessionNotFoundError:
    """The error for an unknown id, saying how to get a valid one."""
    return SessionNotFoundError(
        f"No session {session_id!r}. Create it with create_session() first, or find the id "
        "with `memstrata sessions list`."
    )


def exists(conn: sqlite3.Connection, session_id: str) -> bool:
    """True when a session has this exact id."""
    row = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row is not None


def require(conn: sqlite3.Connection, session_id: str) -> None:
    """Raise :class:`SessionNotFoundError` unless the session exists."""
    if not exists(conn, session_id):
        raise not_found(session_id)


def title_of(conn: sqlite3.Connection, session_id: str) -> str | None:
    """The session's title, or None."""
    row = conn.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row["title"] if row else None


def upsert(conn: sqlite3.Connection, values: Mapping[str, Any], title: str | None) -> None:
    """Insert a session or fill its empty columns; then give it ``title`` if it has none."""
    parent = values.get("parent_session_id")
    if parent is not None and not exists(conn, parent):
        raise SessionNotFoundError(f"Parent session {parent!r} does not exist: create it first.")
    updates = ", ".join(f"{c} = COALESCE(sessions.{c}, excluded.{c})" for c in _COALESCED)
    conn.execute(
        f"INSERT INTO sessions ({', '.join(values)}) VALUES ({marks(len(values))}) "
        f"ON CONFLICT(id) DO UPDATE SET {updates}",
        list(values.values()),
    )
    if title is not None and title_of(conn, values["id"]) is None:
        titles.set_title(conn, values["id"], title)


# Prefixes longer than this are not searched with LIKE (exact ids of any length still are).
MAX_ID_CHARS = 1_000


def resolve_prefix(conn: sqlite3.Connection, prefix: str) -> str:
    """An exact id, or the one id starting with ``prefix`` (LIKE wildcards are literal)."""
    if not prefix:
        raise SessionNotFoundError("Give a session id or a prefix of one.")
    if exists(conn, prefix):
        return prefix
    if len(prefix) > MAX_ID_CHARS:
        # SQLite refuses LIKE patterns past 50,000 bytes; a prefix this long is a mistake.
        raise SessionNotFoundError(
            f"No session id starts with this {len(prefix):,}-character text: give an id "
            "from `memstrata sessions list`."
        )
    rows = conn.execute(
        "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\' ORDER BY started_at DESC LIMIT 6",
        (titles.escape_like(prefix) + "%",),
    ).fetchall()
    if not rows:
        raise SessionNotFoundError(
            f"No session id starts with {prefix!r}: `memstrata sessions list` shows the ids."
        )
    if len(rows) > 1:
        shown = ", ".join(r["id"] for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise AmbiguousSessionError(
            f"{prefix!r} matches several sessions ({shown}): type more characters of the id."
        )
    return str(rows[0]["id"])


def delete(conn: sqlite3.Connection, session_ids: Sequence[str]) -> list[str]:
    """Delete sessions, their delegates and all their messages; return the ids deleted.

    Other children are orphaned by the foreign key (``ON DELETE SET NULL``).
    """
    doomed = [*session_ids, *store_lineage.delegate_descendants(conn, session_ids)]
    key = vector_key(conn)
    for part in chunks(doomed):
        if key is not None:
            conn.execute(
                f"DELETE FROM {VECTOR_TABLE} WHERE {key} IN "
                f"(SELECT id FROM messages WHERE session_id IN ({marks(len(part))}))",
                part,
            )
        # Deleted explicitly (not by cascade) so the index triggers visibly run.
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks(len(part))})", part)
        conn.execute(f"DELETE FROM sessions WHERE id IN ({marks(len(part))})", part)
    return list(doomed)


def prune_candidates(conn: sqlite3.Connection, cutoff: float, source: str | None) -> list[str]:
    """Sessions that ended before ``cutoff`` and whose conversation ended too.

    A compressed session whose conversation goes on is kept until its tip is old as
    well: pruning it would cut the start off a live conversation.
    """
    sql = "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND ended_at < ?"
    params: list[Any] = [cutoff]
    if source is not None:
        sql += " AND source = ?"
        params.append(source)
    ids = [r["id"] for r in conn.execute(sql + " ORDER BY ended_at", params).fetchall()]
    candidates = set(ids)
    return [i for i in ids if store_lineage.compression_chain(conn, i)[-1] in candidates]


# Embedding rows of messages, when semantic search is set up: keyed by message id.
VECTOR_TABLE = "message_vectors"


def vector_key(conn: sqlite3.Connection) -> str | None:
    """The message-id column of the vector table, or None when there is no such table.

    The table is optional (created by the embedding migration); a delete removes its
    rows explicitly so that no vector of a deleted message survives, trigger or not.
    """
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({VECTOR_TABLE})").fetchall()]
    if not columns:
        return None
    for name in ("message_id", "id"):
        if name in columns:
            return name
    return "rowid"


def delete_messages(conn: sqlite3.Connection, message_ids: Sequence[int]) -> tuple[int, list[str]]:
    """Delete messages (from every index and the vector table) and recount their sessions.

    Returns how many rows went and the sessions they belonged to.
    """
    ids = sorted({int(i) for i in message_ids})
    sessions: set[str] = set()
    deleted = 0
    key = vector_key(conn)
    for part in chunks(ids):
        where = f"id IN ({marks(len(part))})"
        sessions.update(
            str(r[0])
            for r in conn.execute(f"SELECT DISTINCT session_id FROM messages WHERE {where}", part)
        )
        if key is not None:
            conn.execute(f"DELETE FROM {VECTOR_TABLE} WHERE {key} IN ({marks(len(part))})", part)
        deleted += conn.execute(f"DELETE FROM messages WHERE {where}", part).rowcount
    for session_id in sorted(sessions):
        store_messages.recount(conn, session_id)
    return deleted, sorted(sessions)
