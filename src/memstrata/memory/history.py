"""The audit history of curated memory: every change to ``MEMORY.md`` / ``USER.md``.

Each successful write (the memory tool, the CLI, the curator, an import, an undo) appends
one row to ``<home>/memory_history.db`` holding who made it, why, when, and the exact
bytes of the file before and after. Rows are never updated or deleted, so the history
is an append-only log, and :meth:`FileMemory.undo` can put back the bytes any change
replaced:

    memory = FileMemory()
    memory.add("memory", "Deploys go through ops/deploy.sh")
    change = memory.history.list(limit=1)[0]
    memory.undo(change.id)          # MEMORY.md is byte for byte what it was before

Rows are written by :class:`~memstrata.memory.files.FileMemory` while it still holds the
file's lock, so their order is the order of the writes, across processes too. A process
killed between the file's rename and the history row leaves a change without a row; the
next undo of an older change then sees a file that differs from what that change wrote
and refuses (or, with ``force``, restores anyway and records that it did).

:class:`ChangeLog` is what callers of a history rely on, whatever keeps it: this SQLite
file, or the ``curated_memory_history`` rows of
:class:`~memstrata.memory.postgres_history.PostgresMemoryHistory`.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from memstrata.errors import DatabaseBusyError, DriftError, InvalidMemoryArgument, StorageError
from memstrata.fileio import create_private_file, private_dir
from memstrata.query.paging import SQL_INTEGERS, clamp_page
from memstrata.store.sqlite.database import is_busy

HISTORY_FILENAME: Final = "memory_history.db"

# Who may write, by convention; free text is accepted so importers can name themselves.
ACTORS: Final = ("api", "tool", "cli", "curator", "import", "undo", "approval")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    target TEXT NOT NULL,
    action TEXT NOT NULL,
    who TEXT NOT NULL,
    why TEXT NOT NULL DEFAULT '',
    before BLOB,
    after BLOB,
    undoes INTEGER REFERENCES changes(id)
);
CREATE INDEX IF NOT EXISTS changes_target ON changes(target, id);
"""


def digest(data: bytes | None) -> str:
    """A short fingerprint of a file's bytes (``"absent"`` for a missing file)."""
    if data is None:
        return "absent"
    return hashlib.sha256(data).hexdigest()[:12]


@dataclass(frozen=True)
class MemoryChange:
    """One recorded change: the file's exact bytes before and after it.

    ``before``/``after`` are None when the file did not exist. ``undoes`` names the
    change an undo reverted.
    """

    id: int
    at: float
    target: str
    action: str
    who: str
    why: str
    before: bytes | None
    after: bytes | None
    undoes: int | None = None

    @property
    def size_delta(self) -> int:
        """Bytes gained (negative: lost) by the change."""
        return len(self.after or b"") - len(self.before or b"")

    def summary(self) -> dict[str, Any]:
        """The change without its bytes, JSON-able (what listings show)."""
        return {
            "id": self.id,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "target": self.target,
            "action": self.action,
            "who": self.who,
            "why": self.why,
            "before_bytes": None if self.before is None else len(self.before),
            "after_bytes": None if self.after is None else len(self.after),
            "before_sha": digest(self.before),
            "after_sha": digest(self.after),
            "undoes": self.undoes,
        }


@runtime_checkable
class ChangeLog(Protocol):
    """The read side of a memory history, as ``memory.history`` offers it on every backend.

    :class:`MemoryHistory` (files) and
    :class:`~memstrata.memory.postgres_history.PostgresMemoryHistory` (rows) satisfy it.
    """

    def get(self, change_id: int) -> MemoryChange:
        """The change ``change_id``; InvalidMemoryArgument naming the fix if there is none."""
        ...

    def list(self, *, target: str | None = None, limit: int = 50) -> builtins.list[MemoryChange]:
        """The newest changes first, optionally of one target."""
        ...

    def count(self) -> int:
        """How many changes are recorded."""
        ...

    def purge(self, change_ids: Sequence[int]) -> builtins.list[int]:
        """Delete these changes and their undos (``memstrata forget``); the ids deleted."""
        ...


def no_such_change(change_id: int, *, empty: bool) -> InvalidMemoryArgument:
    """The error for an unknown change id (``empty``: nothing was ever recorded)."""
    if empty:
        return InvalidMemoryArgument(
            f"There is no change #{change_id}: nothing has been recorded yet."
        )
    return InvalidMemoryArgument(
        f"There is no change #{change_id}. List the changes with "
        "`memstrata memory history` and pick a number from the first column."
    )


def undo_drift(name: str, change: MemoryChange, current: bytes | None) -> DriftError:
    """The refusal of an undo whose target changed after ``change`` (``name``: the file)."""
    return DriftError(
        f"{name} changed after change #{change.id} (it now holds "
        f"{digest(current)}, the change left {digest(change.after)}), so undoing "
        "it would also throw away the later edits. Undo the later changes first "
        "(newest first, see `memstrata memory history`), or pass --force to "
        "restore the older bytes anyway."
    )


def undo_reason(change: MemoryChange, *, force: bool) -> str:
    """The ``why`` recorded for the undo of ``change``."""
    return f"undo of change #{change.id}" + (" (forced)" if force else "")


class MemoryHistory:
    """The append-only change log of one home's curated memory files."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 5000, full_sync: bool = False) -> None:
        self.path = Path(path)
        self.full_sync = full_sync
        """fsync every commit (``store.durability = "full"``), not only checkpoints."""
        self.busy_timeout_ms = max(0, int(busy_timeout_ms))
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def _open(self) -> sqlite3.Connection:
        # One connection kept open: closing the last connection of a WAL database
        # checkpoints it with fsyncs, which would triple the cost of a memory write.
        # A forked child opens its own (a connection must not cross a fork).
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        private_dir(self.path.parent)
        # Created 0600 before SQLite opens it: SQLite gives -wal/-shm the file's mode.
        create_private_file(self.path)
        conn = sqlite3.connect(
            str(self.path),
            timeout=self.busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.row_factory = sqlite3.Row
            # The session store's policy: WAL with NORMAL sync survives any process crash;
            # FULL also survives a power cut, like the memory file's folder fsync.
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.full_sync else 'NORMAL'}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        # The history holds every byte memory ever held: private like the files.
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o600)
        self._conn, self._pid = conn, os.getpid()
        weakref.finalize(self, conn.close)
        return conn

    def close(self) -> None:
        """Close the connection (it reopens on the next use)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._open()
            except sqlite3.OperationalError as exc:
                if is_busy(exc):
                    raise DatabaseBusyError(
                        f"The memory history {self.path} stayed locked for over "
                        f"{self.busy_timeout_ms / 1000:.1f}s. Retry the command."
                    ) from exc
                raise StorageError(
                    f"The memory history {self.path} failed: {exc}. Check that the "
                    "memstrata home folder is writable and has free space."
                ) from exc
            except sqlite3.DatabaseError as exc:
                raise StorageError(
                    f"{self.path} cannot be used as a memory history ({exc}). Move it aside "
                    "(a new, empty history is started) or restore a backup."
                ) from exc
            except OSError as exc:
                raise StorageError(
                    f"Cannot open the memory history {self.path}: {exc}. Check that the "
                    "memstrata home folder is writable."
                ) from exc

    def record(
        self,
        *,
        target: str,
        action: str,
        who: str,
        why: str,
        before: bytes | None,
        after: bytes | None,
        undoes: int | None = None,
    ) -> int:
        """Append one change and return its id."""
        with self._connect() as conn:
            cursor = conn.execute(
                "INSERT INTO changes (at, target, action, who, why, before, after, undoes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), target, action, who, why, before, after, undoes),
            )
            return int(cursor.lastrowid or 0)

    def get(self, change_id: int) -> MemoryChange:
        """The change ``change_id``; InvalidMemoryArgument naming the fix if there is none."""
        if not self.path.exists():
            raise no_such_change(change_id, empty=True)
        row = None
        if int(change_id) in SQL_INTEGERS:  # no change has an id past SQL's integers
            with self._connect() as conn:
                row = conn.execute(
                    "SELECT * FROM changes WHERE id = ?", (int(change_id),)
                ).fetchone()
        if row is None:
            raise no_such_change(change_id, empty=False)
        return change_from_row(row)

    def list(self, *, target: str | None = None, limit: int = 50) -> list[MemoryChange]:
        """The newest changes first, optionally of one target."""
        if not self.path.exists():
            return []
        sql = "SELECT * FROM changes"
        params: list[Any] = []
        if target is not None:
            sql += " WHERE target = ?"
            params.append(target)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(clamp_page(limit, 1))
        with self._connect() as conn:
            return [change_from_row(row) for row in conn.execute(sql, params)]

    def count(self) -> int:
        """How many changes are recorded."""
        if not self.path.exists():
            return 0
        with self._connect() as conn:
            return int(conn.execute("SELECT count(*) FROM changes").fetchone()[0])

    def purge(self, change_ids: Sequence[int]) -> builtins.list[int]:
        """Delete these changes, and every undo of them, so their bytes leave the file.

        The one exception to append-only: ``memstrata forget`` removes a secret from the
        history too. Deleted pages are overwritten (``secure_delete``), the WAL is
        truncated and the file rebuilt, so no free page keeps the old bytes. Returns the
        ids deleted.
        """
        if not change_ids or not self.path.exists():
            return []
        with self._connect() as conn:
            doomed = _with_undos(
                {int(i) for i in change_ids},
                [(int(r[0]), r[1]) for r in conn.execute("SELECT id, undoes FROM changes")],
            )
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("DELETE FROM changes WHERE id = ?", [(i,) for i in doomed])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sorted(doomed)


def _with_undos(ids: set[int], links: Sequence[tuple[int, int | None]]) -> set[int]:
    """``ids`` plus every change that undoes one of them, transitively (an undo row
    refers to its change, and usually holds the same bytes)."""
    found = set(ids)
    grew = True
    while grew:
        extra = {change for change, undoes in links if undoes in found and change not in found}
        found |= extra
        grew = bool(extra)
    return found


def change_from_row(row: Sequence[Any]) -> MemoryChange:
    """A change from a history row in column order: id, at, target, action, who, why,
    before, after, undoes (both backends' tables keep that order)."""
    change_id, at, target, action, who, why, before, after, undoes = row
    return MemoryChange(
        id=int(change_id),
        at=float(at),
        target=str(target),
        action=str(action),
        who=str(who),
        why=str(why),
        before=None if before is None else bytes(before),
        after=None if after is None else bytes(after),
        undoes=None if undoes is None else int(undoes),
    )
