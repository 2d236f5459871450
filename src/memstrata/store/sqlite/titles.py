"""Session titles: sanitising, uniqueness, and ``X`` → ``X #2`` numbering along a lineage.

Titles are unique (a partial unique index settles races); setting a title held by another
session is refused, except that a title moves forward from a compression ancestor to its
continuation, since both are the same conversation.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata

from memstrata.errors import SessionNotFoundError, SessionStoreError, TitleConflictError
from memstrata.store.sqlite.lineage import compression_ancestors

TITLE_MAX_CHARS = 100
_NUMBERED = re.compile(r"^(?P<base>.*?) #(?P<n>\d+)$")


def sanitize_title(title: str | None) -> str | None:
    """Strip control, zero-width and bidi characters and collapse whitespace.

    Returns None for an empty result; raises :class:`SessionStoreError` above
    :data:`TITLE_MAX_CHARS` characters.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise SessionStoreError(f"A title must be text, not {type(title).__name__}.")
    # Category Cc holds the control characters, Cf the zero-width and bidi controls;
    # whitespace controls (tab, newline) separate words, so they become spaces.
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in title
        if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf", "Cs")
    )
    clean = " ".join(kept.split())
    if not clean:
        return None
    if len(clean) > TITLE_MAX_CHARS:
        raise SessionStoreError(
            f"The title is {len(clean)} characters long; the limit is {TITLE_MAX_CHARS}. "
            "Shorten it and retry."
        )
    return clean


def escape_like(text: str) -> str:
    """Escape LIKE wildcards (``%``, ``_``) and the escape character itself."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _numbered_variants(conn: sqlite3.Connection, base: str) -> list[tuple[int, str, float]]:
    """``(n, id, started_at)`` of sessions titled ``base`` (n=1) or ``base #n``."""
    rows = conn.execute(
        "SELECT id, title, started_at FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\'",
        (base, escape_like(base) + " #%"),
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


def next_title_in_lineage(conn: sqlite3.Connection, title: str) -> str:
    """``"X"`` → ``"X #2"``: one above the highest number already used for ``X``."""
    clean = sanitize_title(title) or ""
    match = _NUMBERED.match(clean)
    base = match.group("base") if match else clean
    numbers = [n for n, _, _ in _numbered_variants(conn, base)] if base else []
    suffix = f" #{max([1, *numbers]) + 1}"
    return base[: TITLE_MAX_CHARS - len(suffix)].rstrip() + suffix


def resolve_by_title(conn: sqlite3.Connection, title: str) -> str | None:
    """The session titled ``title``, preferring its newest ``"title #N"`` continuation."""
    clean = sanitize_title(title)
    if clean is None:
        return None
    variants = _numbered_variants(conn, clean)
    if variants:
        return max(variants)[1]
    # "X #3" asked for by its full name.
    row = conn.execute("SELECT id FROM sessions WHERE title = ?", (clean,)).fetchone()
    return row["id"] if row else None


def set_title(conn: sqlite3.Connection, session_id: str, title: str | None) -> str | None:
    """Set (or clear, with None or blank) the title; run inside a write transaction."""
    clean = sanitize_title(title)
    exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if exists is None:
        raise SessionNotFoundError(
            f"No session {session_id!r}: `memstrata sessions list` shows the ids."
        )
    if clean is not None:
        holder = conn.execute(
            "SELECT id FROM sessions WHERE title = ? AND id != ?", (clean, session_id)
        ).fetchone()
        if holder is not None:
            if holder["id"] not in compression_ancestors(conn, session_id):
                raise TitleConflictError(
                    f"Title '{clean}' is already in use by session {holder['id']}. "
                    f"Choose another title, e.g. '{next_title_in_lineage(conn, clean)}'."
                )
            conn.execute("UPDATE sessions SET title = NULL WHERE id = ?", (holder["id"],))
    try:
        conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, session_id))
    except sqlite3.IntegrityError as exc:
        raise TitleConflictError(
            f"Title '{clean}' was just taken by another session. Choose another title."
        ) from exc
    return clean
