"""Session titles: sanitising, uniqueness, and ``X`` → ``X #2`` numbering along a lineage.

Titles are unique per store (a partial unique index settles races); setting a title held
by another session is refused, except that a title moves forward from a compression
ancestor to its continuation, since both are the same conversation.
"""

from __future__ import annotations

import re
import unicodedata

from memstrata.errors import SessionStoreError, TitleConflictError
from memstrata.store.backend import Transaction
from memstrata.store.lineage import compression_ancestors

TITLE_MAX_CHARS = 100
NUMBERED = re.compile(r"^(?P<base>.*?) #(?P<n>\d+)$")


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


def numbered_variants(tx: Transaction, base: str) -> list[tuple[int, str, float]]:
    """``(n, id, started_at)`` of sessions titled ``base`` (n=1) or ``base #n``."""
    out: list[tuple[int, str, float]] = []
    for row in tx.titled(base, numbered=True):
        if row["title"] == base:
            out.append((1, row["id"], row["started_at"]))
            continue
        match = NUMBERED.match(row["title"])
        if match and match.group("base") == base:
            out.append((int(match.group("n")), row["id"], row["started_at"]))
    return out


def next_title_in_lineage(tx: Transaction, title: str) -> str:
    """``"X"`` → ``"X #2"``: one above the highest number already used for ``X``."""
    clean = sanitize_title(title) or ""
    match = NUMBERED.match(clean)
    base = match.group("base") if match else clean
    numbers = [n for n, _, _ in numbered_variants(tx, base)] if base else []
    suffix = f" #{max([1, *numbers]) + 1}"
    return base[: TITLE_MAX_CHARS - len(suffix)].rstrip() + suffix


def resolve_by_title(tx: Transaction, title: str) -> str | None:
    """The session titled ``title``, preferring its newest ``"title #N"`` continuation."""
    clean = sanitize_title(title)
    if clean is None:
        return None
    variants = numbered_variants(tx, clean)
    if variants:
        return max(variants)[1]
    # "X #3" asked for by its full name.
    rows = tx.titled(clean)
    return str(rows[0]["id"]) if rows else None


def set_title(tx: Transaction, session_id: str, title: str | None) -> str | None:
    """Set (or clear, with None or blank) the title of an existing session."""
    clean = sanitize_title(title)
    if clean is not None:
        holders = [row["id"] for row in tx.titled(clean) if row["id"] != session_id]
        if holders:
            holder = holders[0]
            if holder not in compression_ancestors(tx, session_id):
                raise TitleConflictError(
                    f"Title '{clean}' is already in use by session {holder}. "
                    f"Choose another title, e.g. '{next_title_in_lineage(tx, clean)}'."
                )
            tx.write_title(holder, None)
    tx.write_title(session_id, clean)
    return clean
