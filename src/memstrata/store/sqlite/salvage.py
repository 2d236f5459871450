"""Recover a damaged session store: copy every readable row into a new file.

``memstrata sessions salvage DAMAGED NEW`` (or :func:`salvage`) walks each table of the
damaged file by rowid, stepping over pages that cannot be read, writes what it can read
into a freshly migrated store and rebuilds the full-text indexes there. Damage to a leaf
page loses only the rows on that page; damage to a table's root page loses the table.
The sqlite3 shell's ``.recover`` cannot do this for our schema: it does not know the CJK
tokenizer function the indexes use.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memstrata.errors import StorageError
from memstrata.store.sqlite import migrations
from memstrata.store.sqlite.database import Database

_SKIP_LIMIT = 2**63


def salvage(damaged: Path, target: Path) -> dict[str, int]:
    """Copy every row still readable in a damaged database into a new one at ``target``.

    ``target`` must not exist; it gets the current schema, and the full-text indexes
    are rebuilt from the copied messages by their triggers (the damaged file's own index
    pages are never read). Rows are read in rowid order; where a page cannot be read,
    the reader skips ahead past it, so only the rows on damaged pages are lost. The
    damaged file is opened read-only and left as it is. Returns the rows copied per table.
    """
    if target.exists():
        raise StorageError(f"{target} already exists: salvage writes a new file only.")
    src = _open_damaged(damaged)
    Database(target).close()  # the schema, migrated
    dst = sqlite3.connect(target, isolation_level=None)
    migrations.register_functions(dst)
    copied: dict[str, int] = {}
    try:
        # Off so a child row may arrive before its parent; every row is kept as it was.
        dst.execute("PRAGMA foreign_keys = OFF")
        dst.execute("BEGIN IMMEDIATE")
        for table, has_rowid in _plain_tables(dst):
            columns = _shared_columns(src, dst, table)
            if columns:
                copied[table] = _copy_table(src, dst, table, columns, has_rowid)
        dst.execute("COMMIT")
    finally:
        src.close()
        dst.close()
    return copied


def _open_damaged(path: Path) -> sqlite3.Connection:
    """Read-only, with its -wal (commits not yet checkpointed) when SQLite can use it."""
    if not path.is_file():
        raise StorageError(f"No database file at {path} to salvage.")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    for suffix in ("", "&immutable=1"):  # immutable: no -shm needed, the -wal is ignored
        try:
            conn = sqlite3.connect(uri + suffix, uri=True)
        except sqlite3.Error:
            continue
        try:
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        except sqlite3.DatabaseError:
            conn.close()
            continue
        return conn
    raise StorageError(
        f"{path} is damaged beyond its schema: no row can be read. Restore a backup."
    )


def _plain_tables(conn: sqlite3.Connection) -> list[tuple[str, bool]]:
    """Ordinary tables of the schema (no FTS tables or their shadows), rowid or not."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    virtual = [name for name, sql in rows if str(sql).upper().startswith("CREATE VIRTUAL")]
    return [
        (name, "WITHOUT ROWID" not in str(sql).upper())
        for name, sql in rows
        if name != "_migrations"
        and name not in virtual
        and not any(name.startswith(f"{v}_") for v in virtual)
    ]


def _shared_columns(src: sqlite3.Connection, dst: sqlite3.Connection, table: str) -> list[str]:
    try:
        theirs = {row[1] for row in src.execute(f'PRAGMA table_info("{table}")')}
    except sqlite3.DatabaseError:
        return []  # the schema page itself is gone
    return [row[1] for row in dst.execute(f'PRAGMA table_info("{table}")') if row[1] in theirs]


def _copy_table(
    src: sqlite3.Connection,
    dst: sqlite3.Connection,
    table: str,
    columns: list[str],
    has_rowid: bool,
) -> int:
    names = ", ".join(f'"{c}"' for c in columns)
    keys = f"rowid, {names}" if has_rowid else names
    marks = ", ".join("?" * (len(columns) + has_rowid))
    insert = f'INSERT OR IGNORE INTO "{table}" ({keys}) VALUES ({marks})'
    if not has_rowid:
        try:
            return _drain(src.execute(f'SELECT {names} FROM "{table}"'), dst, insert)[0]
        except sqlite3.DatabaseError:
            return 0
    select = f'SELECT rowid, {names} FROM "{table}" WHERE rowid >= ? ORDER BY rowid'
    # LIMIT 1 stops before the next row: a plain cursor reads one row ahead, and a read
    # that fails takes the row already read with it.
    one = f"{select} LIMIT 1"
    copied, start = 0, -_SKIP_LIMIT
    while True:
        try:
            count, last, failed = _drain(src.execute(select, (start,)), dst, insert)
            copied += count
            if not failed:
                return copied
            start = last + 1 if last is not None else start
        except sqlite3.DatabaseError:
            pass
        # Close to the damage: take rows one at a time, then jump past what is unreadable.
        while True:
            try:
                row = src.execute(one, (start,)).fetchone()
            except sqlite3.DatabaseError:
                break
            if row is None:
                return copied
            dst.execute(insert, tuple(row))
            copied, start = copied + 1, int(row[0]) + 1
        found = _next_readable(src, one, start)
        if found is None:
            return copied
        start = found


def _opens(src: sqlite3.Connection, select: str, after: int) -> bool:
    try:
        src.execute(select, (after,))  # runs the seek and reads the first row
    except sqlite3.DatabaseError:
        return False
    return True


def _next_readable(src: sqlite3.Connection, select: str, start: int) -> int | None:
    """The smallest start past ``start`` (whose read fails) that reads again, or None.

    Doubles the jump until a read works, then narrows back down, so no readable row
    after the damaged page is skipped.
    """
    bad, step = start, 1
    while not _opens(src, select, bad + step):
        bad, step = bad + step, step * 2
        if bad + step >= _SKIP_LIMIT:
            return None
    good = bad + step
    while good - bad > 1:
        mid = (bad + good) // 2
        if _opens(src, select, mid):
            good = mid
        else:
            bad = mid
    return good


def _drain(
    cursor: sqlite3.Cursor, dst: sqlite3.Connection, insert: str
) -> tuple[int, int | None, bool]:
    """Insert the cursor's rows; (count, first column of the last row, failed part-way)."""
    count, last = 0, None
    rows = iter(cursor)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return count, last, False
        except sqlite3.DatabaseError:  # only reading may fail here: writing must raise
            return count, last, True
        dst.execute(insert, tuple(row))
        count += 1
        last = row[0]
