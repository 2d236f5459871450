"""Connection discipline for the SQLite session store.

What Hermes users hit ("database is locked" after a one-second timeout, corruption after
closing extra file descriptors on live database files) is settled here, once:

* WAL journal, ``synchronous=NORMAL`` (or ``FULL`` on request), ``foreign_keys=ON`` and a
  configurable ``busy_timeout`` on every connection;
* one writer connection per :class:`Database`, guarded by a re-entrant lock, every write
  transaction opened with ``BEGIN IMMEDIATE`` (the write lock is taken up front, so a
  transaction never fails half-way on a read-to-write upgrade); when SQLite's own busy wait
  runs out, the ``BEGIN`` is retried a bounded number of times with random jitter before
  :class:`~memstrata.errors.DatabaseBusyError` says what to do;
* readers use a small pool of separate connections: under WAL they never wait for the
  writer, and each sees a consistent snapshot;
* the files are only ever touched through SQLite: no raw descriptor is opened or closed on
  a live database, its ``-wal`` or its ``-shm``.

Connections are opened with ``check_same_thread=False`` because a pooled reader may serve
several threads in turn; the pool and the writer lock make sure one thread at a time uses
a connection.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from memstrata import migrations
from memstrata.errors import DatabaseBusyError, SchemaError, StorageError

Durability = Literal["normal", "full"]
DURABILITY_PRAGMA: dict[str, str] = {"normal": "NORMAL", "full": "FULL"}

logger = logging.getLogger(__name__)

# SQLITE_BUSY and SQLITE_LOCKED (primary codes; extended codes keep them in the low byte).
_BUSY_CODES = frozenset({5, 6})
# Attempts at BEGIN IMMEDIATE after SQLite's own busy wait has run out each time.
BEGIN_ATTEMPTS = 4
_JITTER = (0.02, 0.15)
_MAX_IDLE_READERS = 4


def _is_storage_fault(exc: sqlite3.Error) -> bool:
    # SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN.
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in {8, 10, 11, 13, 14}


def is_busy(exc: BaseException) -> bool:
    """True when ``exc`` is SQLite reporting a lock held by another connection."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Database:
    """A SQLite file opened with memstrata's connection discipline.

    ``path`` is the database file; ``busy_timeout_ms`` is how long SQLite itself waits for
    another writer before each retry; ``readonly`` opens every connection with
    ``mode=ro`` and never migrates.
    """

    def __init__(
        self,
        path: Path,
        *,
        durability: Durability = "normal",
        busy_timeout_ms: int = 5000,
        readonly: bool = False,
    ) -> None:
        if durability not in DURABILITY_PRAGMA:
            raise StorageError(
                f"Unknown durability {durability!r}: use 'normal' or 'full' "
                "(`memstrata config set store.durability full`)."
            )
        self.path = path
        self.durability: Durability = durability
        self.busy_timeout_ms = max(0, int(busy_timeout_ms))
        self.readonly = readonly
        self.journal_mode = "wal"
        self._lock = threading.RLock()
        self._depth = 0
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        if readonly and not path.exists():
            raise StorageError(
                f"No session database at {path}: run memstrata once without read-only "
                "mode to create it."
            )
        self._writer = self._connect()
        try:
            if not readonly:
                self._retry_busy(self._set_wal)
                self._retry_busy(lambda: migrations.migrate(self._writer))
            else:
                self._check_readonly_schema()
        except BaseException as exc:
            self._writer.close()
            if isinstance(exc, sqlite3.DatabaseError) and not is_busy(exc):
                raise self._unusable(exc) from exc
            raise

    # -- connections ---------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # as_uri() percent-encodes "?" and "#", which a plain "file:" string would misread.
        target = f"{self.path.resolve().as_uri()}?mode=ro" if self.readonly else str(self.path)
        try:
            conn = sqlite3.connect(
                target,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=self.readonly,
            )
        except sqlite3.Error as exc:
            raise StorageError(
                f"Cannot open the session database {self.path}: {exc}. "
                "Check that the folder exists and is writable (MEMSTRATA_HOME)."
            ) from exc
        conn.row_factory = sqlite3.Row
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            conn.execute(f"PRAGMA synchronous = {DURABILITY_PRAGMA[self.durability]}")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unusable(exc) from exc
        migrations.register_functions(conn)
        return conn

    def _unusable(self, exc: sqlite3.DatabaseError) -> StorageError:
        return StorageError(
            f"{self.path} cannot be used as a session database ({exc}). If it is damaged, "
            "move it aside (memstrata starts a new one) or restore a backup."
        )

    def _set_wal(self) -> None:
        mode = str(self._writer.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        if mode != "wal":
            # Network file systems refuse the shared memory WAL needs; SQLite then keeps
            # the rollback journal, which is slower but just as safe.
            logger.warning(
                "%s: WAL is not available on this file system (journal_mode=%s); "
                "concurrent readers will wait for writers.",
                self.path,
                mode,
            )
        self.journal_mode = mode

    def _check_readonly_schema(self) -> None:
        known = {name for name, _ in migrations.MIGRATIONS}
        try:
            rows = self._writer.execute("SELECT name FROM _migrations").fetchall()
        except sqlite3.OperationalError as exc:
            raise SchemaError(
                f"{self.path} is not a memstrata session database ({exc}). "
                "Open it once read-write to create the schema."
            ) from exc
        done = {row[0] for row in rows}
        if done - known:
            raise SchemaError(
                f"This database was upgraded by a newer memstrata (migrations "
                f"{sorted(done - known)}). Upgrade memstrata: pip install -U memstrata."
            )
        if known - done:
            raise SchemaError(
                f"{self.path} needs migrations {sorted(known - done)}: open it once "
                "read-write to upgrade it."
            )

    def _retry_busy(self, fn: Callable[[], object]) -> None:
        for attempt in range(1, BEGIN_ATTEMPTS + 1):
            try:
                fn()
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or attempt == BEGIN_ATTEMPTS:
                    if is_busy(exc):
                        raise self._busy_error(attempt) from exc
                    raise
                time.sleep(random.uniform(*_JITTER))

    def _busy_error(self, attempts: int) -> DatabaseBusyError:
        waited = attempts * self.busy_timeout_ms / 1000
        return DatabaseBusyError(
            f"The session database {self.path} stayed locked by another process for about "
            f"{waited:.1f}s ({attempts} attempts). A long write (reindex, prune, vacuum) may be "
            "running: wait for it, or raise the wait with "
            "`memstrata config set store.busy_timeout_ms 20000`."
        )

    # -- transactions --------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one ``BEGIN IMMEDIATE`` transaction on the writer connection.

        Commits when the block returns, rolls back when it raises. A nested ``write()`` on
        the same thread joins the outer transaction.
        """
        if self.readonly:
            raise StorageError(
                f"{self.path} is open read-only: open the store without readonly=True to write."
            )
        with self._lock:
            self._ensure_open()
            if self._depth:
                self._depth += 1
                try:
                    yield self._writer
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield self._writer
            except BaseException as exc:
                self._depth = 0
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError) and _is_storage_fault(exc):
                    raise self._write_failed(exc) from exc
                raise
            self._depth = 0
            try:
                self._writer.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("ROLLBACK")
                raise self._write_failed(exc) from exc

    def _write_failed(self, exc: sqlite3.OperationalError) -> StorageError:
        # Disk full, I/O errors, a file made read-only underneath us: the transaction was
        # rolled back, so nothing is half-written; say so and what to check.
        if is_busy(exc):
            return self._busy_error(1)
        return StorageError(
            f"Writing to {self.path} failed and was rolled back ({exc}). Check free disk "
            "space and that the file is writable, then retry."
        )

    def _begin(self) -> None:
        for attempt in range(1, BEGIN_ATTEMPTS + 1):
            try:
                self._writer.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                if attempt == BEGIN_ATTEMPTS:
                    raise self._busy_error(attempt) from exc
                time.sleep(random.uniform(*_JITTER))

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """Lend a reader connection (functions registered) for the duration of the block.

        Each statement sees the last committed state; wrap several statements in
        ``BEGIN`` / ``COMMIT`` yourself for one snapshot across them.
        """
        self._ensure_open()
        with self._pool_lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            with self._pool_lock:
                if not self._closed and len(self._idle) < _MAX_IDLE_READERS:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"The session store {self.path} is closed: open a new one.")

    def vacuum(self) -> None:
        """Rewrite the file to reclaim free pages (holds the write lock meanwhile)."""
        with self._lock:
            self._ensure_open()
            self._retry_busy(lambda: self._writer.execute("VACUUM"))

    def close(self) -> None:
        """Close every connection; SQLite checkpoints the WAL when the last one closes."""
        with self._lock:
            if self._closed:
                return
            with self._pool_lock:
                self._closed = True
                idle, self._idle = self._idle, []
            for conn in idle:
                conn.close()
            self._writer.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it (best effort if readers are busy)."""
        if self.readonly:
            return
        with self._lock:
            self._ensure_open()
            self._retry_busy(lambda: self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
