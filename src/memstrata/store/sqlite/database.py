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
import os
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from memstrata.errors import DatabaseBusyError, SchemaError, StorageError
from memstrata.store.sqlite import migrations, prefix

Durability = Literal["normal", "full"]
DURABILITY_PRAGMA: dict[str, str] = {"normal": "NORMAL", "full": "FULL"}

logger = logging.getLogger(__name__)

# SQLITE_BUSY and SQLITE_LOCKED (primary codes; extended codes keep them in the low byte).
_BUSY_CODES = frozenset({5, 6})
# Attempts at BEGIN IMMEDIATE after SQLite's own busy wait has run out each time.
BEGIN_ATTEMPTS = 4
_JITTER = (0.02, 0.15)
_MAX_IDLE_READERS = 4


# Primary result codes (extended codes keep them in the low byte).
_SQLITE_PERM = 3
_SQLITE_READONLY = 8
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26
_STORAGE_FAULTS = frozenset(
    {
        _SQLITE_PERM,
        _SQLITE_READONLY,
        _SQLITE_IOERR,
        _SQLITE_CORRUPT,
        _SQLITE_FULL,
        _SQLITE_CANTOPEN,
        _SQLITE_NOTADB,
    }
)
_ACCESS_FAULTS = frozenset({_SQLITE_PERM, _SQLITE_READONLY, _SQLITE_CANTOPEN})
_DAMAGE_FAULTS = frozenset({_SQLITE_CORRUPT, _SQLITE_NOTADB})
# SQLITE_IOERR_SHORT_READ: a page points past the end of the file. That is a truncated
# or damaged database, not a failing disk.
_SQLITE_IOERR_SHORT_READ = 522


def _is_damage(exc: BaseException) -> bool:
    return (
        _primary_code(exc) in _DAMAGE_FAULTS
        or getattr(exc, "sqlite_errorcode", None) == _SQLITE_IOERR_SHORT_READ
    )


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _is_storage_fault(exc: BaseException) -> bool:
    return _primary_code(exc) in _STORAGE_FAULTS


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs on Windows
        return False


def _nearly_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < 1024 * 1024
    except OSError:
        return False


def _denied(path: Path) -> Path | None:
    # The first of the folder and the database files this user may not write: SQLite
    # needs the folder too, to create the -wal and -shm files next to the database.
    for candidate in (path.parent, path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if candidate.exists() and not os.access(candidate, os.W_OK):
            return candidate
    return None


def _access_advice(path: Path, *, readonly: bool) -> str:
    folder = path.parent
    if not folder.exists():
        return f"The folder {folder} does not exist: create it or set MEMSTRATA_HOME."
    if _read_only_fs(folder):
        where = f"{folder} is on a read-only file system"
        if readonly:
            return (
                f"{where} and the database has unmerged WAL content that needs a -shm file: "
                "copy state.db and its -wal file to a writable folder and open the copy."
            )
        return (
            f"{where}: point MEMSTRATA_HOME at a writable folder, or open the store with "
            "readonly=True to only read it."
        )
    denied = _denied(path)
    if denied is not None:
        owner = denied.stat().st_uid
        if owner == os.geteuid():
            return (
                f"Permission denied: {denied} is not writable. Make it writable "
                f"(chmod u+w {denied}), then retry."
            )
        return (
            f"Permission denied: {denied} belongs to uid {owner}, and this process runs as "
            f"uid {os.geteuid()}. Give the files back to this user "
            f"(chown -R <you> {folder}) or make them writable, then retry."
        )
    return f"Check that {folder} exists and is writable by this user, then retry."


def fault_advice(path: Path, exc: BaseException, *, readonly: bool = False) -> str:
    """What to do about a SQLite storage fault on ``path``: one sentence or two.

    Disk full, I/O error, a damaged file, a read-only file system or a permission problem
    each get their own fix, so the user never "repairs" a healthy file by moving it aside.
    """
    code = _primary_code(exc)
    if _is_damage(exc):
        return (
            f"The file is damaged. Keep a copy first (cp {path} {path}.damaged). Then copy "
            f"its readable rows into a new file with `memstrata sessions salvage {path} "
            f"{path}.salvaged` and move that into place (see `memstrata help security`), restore a "
            "backup, or move it aside and memstrata starts an empty one."
        )
    if code == _SQLITE_FULL or (code == _SQLITE_IOERR and _nearly_full(path.parent)):
        # SQLite reports a full disk as an I/O error when it cannot even create the
        # -wal or -shm file; the free space tells the two apart.
        return "The disk is full: free some disk space, then retry."
    if code == _SQLITE_IOERR:
        return (
            "The disk reported an I/O error: check free disk space and the disk's health, "
            "then retry."
        )
    if code in _ACCESS_FAULTS:
        return _access_advice(path, readonly=readonly)
    return "Check free disk space and that the file is writable, then retry."


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
        if not readonly:
            self._create_private()
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
        target = str(self.path)
        if self.readonly:
            target = f"{self.path.resolve().as_uri()}?mode=ro"
            if self._frozen_wal_free():
                # A WAL reader needs the -shm file, and nobody can create it here; with
                # no -wal content to miss, reading the file as immutable is exact.
                target += "&immutable=1"
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
                f"{fault_advice(self.path, exc, readonly=self.readonly)}"
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
        try:
            prefix.prepare(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unusable(exc) from exc
        return conn

    def _create_private(self) -> None:
        """Create a new database file as 0600 before SQLite opens it.

        Transcripts hold whatever was said, secrets included; SQLite would create the
        file with the umask (often world-readable 0644), and it gives the -wal and -shm
        files the mode of the database file.
        """
        if str(self.path) == ":memory:" or self.path.exists():
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return  # another process created it first; it set the mode
        except OSError:
            return  # SQLite's own open reports the problem with the fix
        os.close(fd)

    def _frozen_wal_free(self) -> bool:
        """True when the file cannot change under us and has no WAL content.

        That is: its folder is on a read-only file system (or not writable by this
        user), there is no ``-shm`` file and no non-empty ``-wal`` file.
        """
        folder = self.path.parent
        if not (_read_only_fs(folder) or not os.access(folder, os.W_OK)):
            return False
        shm, wal = Path(f"{self.path}-shm"), Path(f"{self.path}-wal")
        try:
            return not shm.exists() and (not wal.exists() or wal.stat().st_size == 0)
        except OSError:
            return False

    def _unusable(self, exc: sqlite3.DatabaseError) -> StorageError:
        if _is_damage(exc):
            advice = fault_advice(self.path, exc)
        elif _primary_code(exc) in _ACCESS_FAULTS | {_SQLITE_FULL, _SQLITE_IOERR}:
            # The file may be perfectly healthy: only the place it lives is the problem.
            advice = fault_advice(self.path, exc, readonly=self.readonly)
        else:
            advice = (
                "If it is damaged, move it aside (memstrata starts a new one) or restore a backup."
            )
        return StorageError(f"{self.path} cannot be used as a session database ({exc}). {advice}")

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
                # sqlite3.DatabaseError, not only OperationalError: a damaged page
                # surfaces as the base class ("database disk image is malformed").
                if isinstance(exc, sqlite3.DatabaseError) and _is_storage_fault(exc):
                    raise self._write_failed(exc) from exc
                raise
            self._depth = 0
            try:
                self._writer.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("ROLLBACK")
                raise self._write_failed(exc) from exc

    def _write_failed(self, exc: sqlite3.DatabaseError) -> StorageError:
        # Disk full, I/O errors, a file made read-only underneath us: the transaction was
        # rolled back, so nothing is half-written; say so and what to do.
        if is_busy(exc):
            return self._busy_error(1)
        # Only a healthy file can promise that earlier writes are intact.
        kept = "" if _is_damage(exc) else "; every earlier write is kept"
        return StorageError(
            f"Writing to {self.path} failed and was rolled back ({exc}){kept}. "
            f"{fault_advice(self.path, exc)}"
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
        except sqlite3.DatabaseError as exc:
            # A damaged page or a vanished file must reach the caller as a StorageError
            # that says what to do, not as a bare sqlite3 traceback.
            if _is_storage_fault(exc) and not is_busy(exc):
                raise StorageError(
                    f"Reading {self.path} failed ({exc}). "
                    f"{fault_advice(self.path, exc, readonly=self.readonly)}"
                ) from exc
            raise
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
