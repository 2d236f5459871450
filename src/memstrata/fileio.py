"""The one place that writes files and takes file locks.

``atomic_write`` writes a temp file in the same folder, flushes and fsyncs it, then
``os.replace``s it over the target and fsyncs the folder, so a reader sees either the old
bytes or the new ones and a crash at any moment leaves one of the two.

Symlinks are refused, not followed, unless a caller asks otherwise: a link planted in
the home (``MEMORY.md`` -> ``~/.ssh/id_rsa``, an export's ``USER.md`` -> any local file)
would otherwise redirect a write onto another file or a read into the system prompt.
Folders and files memstrata creates are 0700 and 0600 whatever the umask.

``file_lock`` is an exclusive advisory lock on a separate ``.lock`` file. The lock file is
0600, refused if it is a symlink, and never unlinked: unlinking a lock file while another
process waits on the old inode lets two holders in at once. The kernel drops the lock when
its holder dies, so a crashed process never leaves memory locked.

On POSIX the lock is ``fcntl.flock`` called directly: ``filelock`` 4 spends about 0.5 ms per
uncontended acquire (fork tracking, a singleton registry, a file read), a quarter of a whole
memory write, against 0.01 ms for the system call. Windows, which has no flock, uses
``filelock`` (msvcrt).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from memstrata.errors import (
    AtomicWriteError,
    LockTimeoutError,
    StorageError,
    SymlinkRefusedError,
    UnreadableFileError,
)

TEMP_SUFFIX = ".tmp"


def _temp_prefix(target: Path) -> str:
    return f".{target.name}."


def real_path(path: Path) -> Path:
    """Follow a symlink chain so writes replace the real file and keep the link."""
    return path.resolve() if path.is_symlink() else path


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def symlink_refused(path: Path, what: str = "this file") -> SymlinkRefusedError:
    """The error for a symlink at ``path``, naming where it points and the fix."""
    try:
        points = f" (it points to {os.readlink(path)})"
    except OSError:
        points = ""
    return SymlinkRefusedError(
        f"Refusing to follow the symlink {path}{points}: memstrata never reads or writes "
        f"{what} through a link, which could point it at any other file. Replace the link "
        "with a regular file (or remove it), then retry."
    )


def refuse_symlink(path: Path, what: str = "this file") -> None:
    """Raise :class:`SymlinkRefusedError` when ``path`` is a symlink (dangling ones too)."""
    try:
        linked = Path(path).is_symlink()
    except OSError:
        return  # not searchable: the read or write that follows says why
    if linked:
        raise symlink_refused(Path(path), what)


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents 0700, whatever the umask; return it.

    ``Path.mkdir(parents=True)`` creates the parents with the default 0777 & ~umask,
    which is how a home created for ``memories/`` used to end up 0755. Folders that
    already exist are left as they are.
    """
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # another process made it first
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask; chmod is not
    return path


def create_private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 if it does not exist (never through a symlink).

    SQLite creates a database 0644 and gives its ``-wal``/``-shm`` files the database's
    mode, so a database made by memstrata is created here first.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    except FileExistsError:
        refuse_symlink(path, "a database")
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def open_private_output(path: Path, *, overwrite: bool, what: str = "an export") -> int:
    """Open ``path`` for writing as a 0600 file and return the descriptor.

    A symlink (dangling or not) is refused; an existing file is refused unless
    ``overwrite``. Raises :class:`StorageError` naming the path and the fix.
    """
    path = Path(path)
    refuse_symlink(path, what)
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise StorageError(
            f"{path} already exists. Choose another file, or pass --overwrite to replace it."
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise symlink_refused(path, what) from None
        raise AtomicWriteError(
            f"Cannot write {path}: {exc.strerror or exc}. {_fix_for(exc, path)}"
        ) from exc
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_TRUNC
    return fd


def _fix_for(exc: OSError, path: Path) -> str:
    if exc.errno == errno.ENOSPC:
        return "The disk is full: free some space and retry."
    if exc.errno == errno.EDQUOT:
        return "The disk quota is exhausted: free some space and retry."
    if exc.errno in (errno.EROFS,):
        return f"{path.parent} is on a read-only file system: point MEMSTRATA_HOME elsewhere."
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"Permission denied: {_ownership_fix(path)}"
    return "Check that the folder exists and is writable, then retry."


def _ownership_fix(path: Path) -> str:
    # The usual cause is a home folder created by another user (often `sudo memstrata`):
    # chmod cannot help then, only giving the files back can.
    for candidate in (path, path.parent, path.parent.parent):
        try:
            owner = candidate.stat().st_uid
        except OSError:
            continue
        if hasattr(os, "geteuid") and owner != os.geteuid():
            return (
                f"{candidate} belongs to uid {owner}, and this process runs as uid "
                f"{os.geteuid()}. Give the folder back to this user "
                f"(chown -R <you> {candidate}) or point MEMSTRATA_HOME elsewhere."
            )
        break
    return f"make {path.parent} and the files in it readable and writable by this user."


def _fsync_dir(folder: Path) -> None:
    # A rename is durable only once its folder entry is; Windows has no folder fsync.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: str | bytes,
    *,
    mode: int = 0o600,
    sync_folder: bool = True,
    follow_symlinks: bool = False,
) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    The new bytes are always fsynced before the rename, so the file is never torn.
    ``sync_folder`` also fsyncs the folder after the rename, making the rename itself
    survive a power cut; it costs a second journal commit (about as much as the first),
    so callers that follow the ``store.durability = "normal"`` policy skip it.

    A symlink at ``path`` is refused (:class:`SymlinkRefusedError`) unless
    ``follow_symlinks``, when the real file behind it is replaced and the link kept.

    Raises :class:`AtomicWriteError` (previous content intact, temp file removed) on any
    failure, with the fix in the message (disk full, read-only, permission denied).
    """
    if not follow_symlinks:
        refuse_symlink(Path(path))
    try:
        target = real_path(Path(path))
    except OSError as exc:  # lstat needs search permission on the folder
        raise AtomicWriteError(
            f"Failed to write {path}: {exc.strerror or exc}. {_fix_for(exc, Path(path))}"
        ) from exc
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=target.parent, prefix=_temp_prefix(target), suffix=TEMP_SUFFIX
        )
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
        tmp_name = None
        if sync_folder:
            _fsync_dir(target.parent)
    except OSError as exc:
        raise AtomicWriteError(
            f"Failed to write {target}: {exc.strerror or exc}. {_fix_for(exc, target)}"
        ) from exc
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def remove_stale_temps(path: Path) -> int:
    """Delete temp files left by writers that died mid-write; return how many.

    Call it only while holding the file's lock: then no live writer owns a temp file.
    """
    target = real_path(Path(path))
    removed = 0
    prefix = _temp_prefix(target)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix) and name.endswith(TEMP_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target.parent / name)
                removed += 1
    return removed


def read_text(path: Path, *, follow_symlinks: bool = True) -> str | None:
    """Return the file's text, ``None`` if it does not exist.

    Without ``follow_symlinks`` a symlink at ``path`` raises :class:`SymlinkRefusedError`
    (checked on the open itself, so a link swapped in meanwhile is refused too).

    Raises :class:`UnreadableFileError` when it exists but cannot be read or is not
    UTF-8, so callers refuse to work on it instead of overwriting it as if it were empty.
    A leading byte-order mark is dropped.
    """
    try:
        raw = read_bytes(Path(path), follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise symlink_refused(Path(path)) from None
        fix = (
            _ownership_fix(Path(path))
            if exc.errno in (errno.EACCES, errno.EPERM)
            else "check the file and the disk, then retry."
        )
        raise UnreadableFileError(
            f"{path} exists but could not be read ({exc.strerror or exc}). It was left "
            f"untouched. Fix: {fix}"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(
            f"{path} is not valid UTF-8 (byte {exc.start}). It was left untouched: "
            "re-save it as UTF-8 or move it aside, then retry."
        ) from exc
    return text.removeprefix("\ufeff")


def read_bytes(path: Path, *, follow_symlinks: bool = True) -> bytes:
    """The file's bytes; OSError as ``open`` raises it (ELOOP for a refused symlink)."""
    if follow_symlinks:
        return Path(path).read_bytes()
    if Path(path).is_symlink():
        raise OSError(errno.ELOOP, "symlink", str(path))
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _lock_timeout_error(lock_path: Path, timeout: float) -> LockTimeoutError:
    return LockTimeoutError(
        f"Timed out after {timeout:g}s waiting for {lock_path}. Another memstrata "
        "process is writing; retry, or raise memory.lock_timeout. A lock held by a "
        "process that died is released automatically."
    )


def _lock_open_error(lock_path: Path, exc: OSError) -> StorageError:
    if exc.errno == errno.ELOOP:
        return StorageError(
            f"Refusing to lock through a symlink: {lock_path}. Remove the link and retry."
        )
    return StorageError(
        f"Cannot create the lock file {lock_path}: {exc.strerror or exc}. "
        f"{_fix_for(exc, lock_path)}"
    )


@contextlib.contextmanager
def file_lock(lock_path: Path, *, timeout: float = 10.0) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created 0600) for the ``with`` block."""
    lock_path = Path(lock_path)
    try:
        linked = lock_path.is_symlink()
    except OSError as exc:  # e.g. EACCES: a folder this user may not search
        raise _lock_open_error(lock_path, exc) from exc
    if linked:
        raise _lock_open_error(lock_path, OSError(errno.ELOOP, "symlink"))
    if os.name != "posix":  # pragma: no cover - exercised on Windows only
        with _filelock(lock_path, timeout):
            yield
        return
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError as exc:
        raise _lock_open_error(lock_path, exc) from exc
    try:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _lock_timeout_error(lock_path, timeout) from None
                # Back off from 1 ms to 50 ms: short waits stay short, long ones stay cheap.
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _filelock(lock_path: Path, timeout: float) -> Iterator[None]:  # pragma: no cover
    import filelock  # type: ignore[import-not-found, unused-ignore]  # Windows-only dependency

    lock = filelock.FileLock(str(lock_path), timeout=timeout, mode=0o600)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise _lock_timeout_error(lock_path, timeout) from None
    except OSError as exc:
        raise _lock_open_error(lock_path, exc) from exc
    try:
        yield
    finally:
        lock.release()
