"""Rows of the ``sessions`` table on PostgreSQL: upsert, titles, prefixes, deletion, pruning.

The rules are those of :mod:`memstrata.store.sqlite.sessions` and
:mod:`memstrata.store.sqlite.titles`; every function takes the tenant's namespace and runs inside
the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from memstrata.errors import AmbiguousSessionError, SessionNotFoundError, TitleConflictError
from memstrata.store.postgres import lineage
from memstrata.store.sqlite.sessions import not_found
from memstrata.store.sqlite.titles import _NUMBERED, TITLE_MAX_CHARS, escape_like, sanitize_title

Conn = psycopg.Connection[Any]

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


def exists(conn: Conn, ns: str, session_id: str) -> bool:
    """True when the tenant has a session with this exact id."""
    row = conn.execute(
        "SELECT 1 AS one FROM sessions WHERE namespace = %s AND id = %s", (ns, session_id)
    ).fetchone()
    return row is not None


def require(conn: Conn, ns: str, session_id: str, *, lock: bool = False) -> None:
    """Raise :class:`SessionNotFoundError` unless the session exists.

    ``lock`` takes the row lock, which serialises writers of one session (counters,
    compaction) the way SQLite's single writer does.
    """
    sql = "SELECT 1 AS one FROM sessions WHERE namespace = %s AND id = %s"
    if conn.execute(sql + (" FOR UPDATE" if lock else ""), (ns, session_id)).fetchone() is None:
        raise not_found(session_id)


def title_of(conn: Conn, ns: str, session_id: str) -> str | None:
    """The session's title, or None."""
    row = conn.execute(
        "SELECT title FROM sessions WHERE namespace = %s AND id = %s", (ns, session_id)
    ).fetchone()
    return row["title"] if row else None


def upsert(conn: Conn, ns: str, values: Mapping[str, Any], title: str | None) -> None:
    """Insert a session or fill its empty columns; then give it ``title`` if it has none."""
    parent = values.get("parent_session_id")
    if parent is not None and not exists(conn, ns, parent):
        raise SessionNotFoundError(f"Parent session {parent!r} does not exist: create it first.")
    columns = ["namespace", *values]
    updates = ", ".join(f"{c} = COALESCE(sessions.{c}, EXCLUDED.{c})" for c in _COALESCED)
    conn.execute(
        f"INSERT INTO sessions ({', '.join(columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT (namespace, id) DO UPDATE SET {updates}",
        [ns, *values.values()],
    )
    if title is not None and title_of(conn, ns, values["id"]) is None:
        set_title(conn, ns, values["id"], title)


def resolve_prefix(conn: Conn, ns: str, prefix: str) -> str:
    """An exact id, or the one id starting with ``prefix`` (LIKE wildcards are literal)."""
    if not prefix:
        raise SessionNotFoundError("Give a session id or a prefix of one.")
    if exists(conn, ns, prefix):
        return prefix
    rows = conn.execute(
        "SELECT id FROM sessions WHERE namespace = %s AND id LIKE %s "
        "ORDER BY started_at DESC LIMIT 6",
        (ns, escape_like(prefix) + "%"),
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


def delete(conn: Conn, ns: str, session_ids: Sequence[str]) -> list[str]:
    """Delete sessions, their delegates and all their messages; return the ids deleted."""
    doomed = [*session_ids, *lineage.delegate_descendants(conn, ns, session_ids)]
    conn.execute("DELETE FROM messages WHERE namespace = %s AND session_id = ANY(%s)", (ns, doomed))
    conn.execute("DELETE FROM sessions WHERE namespace = %s AND id = ANY(%s)", (ns, doomed))
    return list(doomed)


def prune_candidates(conn: Conn, ns: str, cutoff: float, source: str | None) -> list[str]:
    """Sessions that ended before ``cutoff`` and whose conversation ended too."""
    sql = "SELECT id FROM sessions WHERE namespace = %s AND ended_at IS NOT NULL AND ended_at < %s"
    params: list[Any] = [ns, cutoff]
    if source is not None:
        sql += " AND source = %s"
        params.append(source)
    ids = [r["id"] for r in conn.execute(sql + " ORDER BY ended_at", params).fetchall()]
    candidates = set(ids)
    return [i for i in ids if lineage.compression_chain(conn, ns, i)[-1] in candidates]


# -- titles ----------------------------------------------------------------------------


def _numbered_variants(conn: Conn, ns: str, base: str) -> list[tuple[int, str, float]]:
    rows = conn.execute(
        "SELECT id, title, started_at FROM sessions WHERE namespace = %s "
        "AND (title = %s OR title LIKE %s)",
        (ns, base, escape_like(base) + " #%"),
    ).fetchall()
    out: list[tuple[int, str, float]] = []
    for row in rows:
        if row["title"] == base:
            out.append((1, row["id"], row["started_at"]))
            continue
        match = _NUMBERED.match(row["title"])
        if match and match.group("base") == base:
            out.append((int(match.group("n")), row["id"], row["started_at"]))
    return out


def next_title_in_lineage(conn: Conn, ns: str, title: str) -> str:
    """``"X"`` → ``"X #2"``: one above the highest number already used for ``X``."""
    clean = sanitize_title(title) or ""
    match = _NUMBERED.match(clean)
    base = match.group("base") if match else clean
    numbers = [n for n, _, _ in _numbered_variants(conn, ns, base)] if base else []
    suffix = f" #{max([1, *numbers]) + 1}"
    return base[: TITLE_MAX_CHARS - len(suffix)].rstrip() + suffix


def resolve_by_title(conn: Conn, ns: str, title: str) -> str | None:
    """The session titled ``title``, preferring its newest ``"title #N"`` continuation."""
    clean = sanitize_title(title)
    if clean is None:
        return None
    variants = _numbered_variants(conn, ns, clean)
    if variants:
        return max(variants)[1]
    row = conn.execute(
        "SELECT id FROM sessions WHERE namespace = %s AND title = %s", (ns, clean)
    ).fetchone()
    return row["id"] if row else None


def set_title(conn: Conn, ns: str, session_id: str, title: str | None) -> str | None:
    """Set (or clear, with None or blank) the title; run inside a transaction."""
    clean = sanitize_title(title)
    if not exists(conn, ns, session_id):
        raise SessionNotFoundError(
            f"No session {session_id!r}: `memstrata sessions list` shows the ids."
        )
    if clean is not None:
        holder = conn.execute(
            "SELECT id FROM sessions WHERE namespace = %s AND title = %s AND id <> %s",
            (ns, clean, session_id),
        ).fetchone()
        if holder is not None:
            if holder["id"] not in lineage.compression_ancestors(conn, ns, session_id):
                raise TitleConflictError(
                    f"Title '{clean}' is already in use by session {holder['id']}. "
                    f"Choose another title, e.g. '{next_title_in_lineage(conn, ns, clean)}'."
                )
            conn.execute(
                "UPDATE sessions SET title = NULL WHERE namespace = %s AND id = %s",
                (ns, holder["id"]),
            )
    try:
        # A savepoint, so that losing the race for the title leaves the caller's
        # transaction usable for the error path.
        with conn.transaction():
            conn.execute(
                "UPDATE sessions SET title = %s WHERE namespace = %s AND id = %s",
                (clean, ns, session_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise TitleConflictError(
            f"Title '{clean}' was just taken by another session. Choose another title."
        ) from exc
    return clean
