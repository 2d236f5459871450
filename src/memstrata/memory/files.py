"""L1 curated memory: ``MEMORY.md`` (the agent's notes) and ``USER.md`` (the user profile).

Two states exist side by side:

* the **frozen snapshot**, rendered by :meth:`FileMemory.load` (at construction, at
  session start and after compression) and injected into the system prompt. Writes never
  change it, so the prompt prefix stays byte-identical and the provider's prefix cache
  keeps hitting;
* the **live entries**, re-read from disk by every call, so a tool response reflects
  every write at once, including those of other processes sharing the home folder.

The entry rules, budgets, messages and snapshot rendering live in
:class:`memstrata.memory.core.CuratedMemoryBase`, shared with the PostgreSQL backend;
this module adds the files, their locks, the drift backups and the history.

Every mutation validates its arguments, scans new content for injection at ``strict``
scope, takes ``<file>.lock`` (a thread lock first, then the cross-process file lock),
deletes temp files left by writers that died, re-reads the file under the lock, mutates,
and writes atomically (temp file, fsync, rename, folder fsync). ``replace``, ``remove``
and ``apply_batch`` refuse to rewrite a file that was edited outside memstrata in a way a
rewrite could damage (the drift guard): the file is copied to ``<file>.bak.<unix_ts>``
and :class:`~memstrata.errors.DriftError` says how to fix it.

Every successful write is recorded, still under the lock, in the append-only
:class:`~memstrata.memory.history.MemoryHistory` with the exact bytes before and after,
who made it and why (see :meth:`FileMemory.attributed`); :meth:`FileMemory.undo` puts
back the bytes a change replaced.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from memstrata import fileio
from memstrata.config import Config, memstrata_home
from memstrata.errors import (
    AtomicWriteError,
    DriftError,
    LockTimeoutError,
    StorageError,
    SymlinkRefusedError,
    UnreadableFileError,
)
from memstrata.memory.args import check_target
from memstrata.memory.core import (
    CuratedMemory,
    CuratedMemoryBase,
    Current,
    EntryChange,
    WriteResult,
)
from memstrata.memory.format import (
    ENTRY_DELIMITER,
    FILE_NAMES,
    TARGETS,
    Target,
    Usage,
    parse_entries,
    serialize,
)
from memstrata.memory.history import (
    HISTORY_FILENAME,
    MemoryChange,
    MemoryHistory,
    undo_drift,
    undo_reason,
)

__all__ = [
    "ENTRY_DELIMITER",
    "FileMemory",
    "Target",
    "Usage",
    "WriteResult",
    "memory_and_config",
]

MEMORIES_DIRNAME = "memories"

logger = logging.getLogger(__name__)

# One thread lock per lock file for the whole process: threads then queue on it instead
# of polling the file lock, and two FileMemory objects on one home folder share it.
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock_for(lock_path: Path) -> threading.Lock:
    key = str(lock_path.absolute())
    with _THREAD_LOCKS_GUARD:
        lock = _THREAD_LOCKS.get(key)
        if lock is None:
            lock = _THREAD_LOCKS[key] = threading.Lock()
        return lock


class FileMemory(CuratedMemoryBase):
    """Curated memory in two §-delimited files under ``<home>/memories/``.

    Example::

        memory = FileMemory()
        memory.add("user", "Prefers answers in French.")
        system_prompt_part = memory.snapshot()   # frozen until memory.load()

    Limits come from ``config`` (``memory.memory_char_limit``,
    ``memory.user_char_limit``, ``memory.lock_timeout``); explicit arguments win.
    ``memory.memory_enabled`` / ``memory.user_profile_enabled`` set to false leave that
    target out of the snapshot (the files stay writable).
    """

    def __init__(
        self,
        home: Path | None = None,
        *,
        config: Config | None = None,
        memory_char_limit: int | None = None,
        user_char_limit: int | None = None,
        lock_timeout: float | None = None,
        actor: str = "api",
    ) -> None:
        self.home: Path = Path(home) if home is not None else memstrata_home()
        cfg = config if config is not None else Config.load(self.home)
        self.memories_dir: Path = self.home / MEMORIES_DIRNAME
        # The file is always fsynced; the rename is made power-cut durable only under
        # store.durability = "full", the same policy as the session store.
        self._sync_folder: bool = cfg.get("store.durability") == "full"
        self._configure(
            cfg,
            memory_char_limit=memory_char_limit,
            user_char_limit=user_char_limit,
            lock_timeout=lock_timeout,
            actor=actor,
        )
        self.history: MemoryHistory = MemoryHistory(
            self.home / HISTORY_FILENAME, full_sync=self._sync_folder
        )
        """The append-only audit history of both files."""
        self.load()

    # -- storage --------------------------------------------------------------------

    def path(self, target: Target) -> Path:
        """The file of ``target``: ``MEMORY.md`` or ``USER.md``."""
        return self.memories_dir / FILE_NAMES[check_target(target)]

    def _read_raw(self, target: Target) -> str | None:
        return fileio.read_text(self.path(target), follow_symlinks=False)

    def _read_for_snapshot(self) -> tuple[dict[Target, str | None], dict[Target, str]]:
        # Each file on its own: one unreadable file still lets the other be injected.
        raws: dict[Target, str | None] = {}
        errors: dict[Target, str] = {}
        for target in TARGETS:
            try:
                raws[target] = fileio.read_text(self.path(target), follow_symlinks=False)
            except (UnreadableFileError, SymlinkRefusedError) as exc:
                errors[target] = str(exc)
        return raws, errors

    # -- the write path ---------------------------------------------------------------

    def _mutate(
        self,
        target: Target,
        action: str,
        change: Callable[[Current], EntryChange],
        *,
        drift_guard: bool,
    ) -> WriteResult:
        path = self.path(target)
        self._ensure_dir()
        with self._locked(path):
            fileio.remove_stale_temps(path)
            raw = fileio.read_text(path, follow_symlinks=False)
            before = _read_bytes(path)
            current = Current(target, raw, parse_entries(raw))
            result, final = self._apply(current, change, drift_guard=drift_guard)
            change_id: int | None = None
            if result.changed:
                after = serialize(final).encode("utf-8")
                fileio.atomic_write(path, after, mode=0o600, sync_folder=self._sync_folder)
                change_id = self._record(target, action, before, after)
        return self._result(target, action, result, final, change_id)

    # -- history and undo -------------------------------------------------------------

    def _record(
        self,
        target: Target,
        action: str,
        before: bytes | None,
        after: bytes | None,
        *,
        undoes: int | None = None,
    ) -> int | None:
        who, why = self._author()
        try:
            return self.history.record(
                target=target,
                action=action,
                who=who,
                why=why,
                before=before,
                after=after,
                undoes=undoes,
            )
        except StorageError as exc:
            # The file is written already: failing the write now would make a caller
            # retry a change that happened. The gap is logged loudly instead, as one line
            # (a traceback on a CLI user's screen would read as a failed write).
            logger.error("memory change of %s was not recorded in the history: %s", target, exc)
            return None

    def undo(self, change_id: int, *, force: bool = False) -> MemoryChange:
        """Put back the exact bytes change ``change_id`` replaced; return the undo's change.

        Refuses with :class:`DriftError` when the file changed since that change (its
        bytes differ from what the change wrote), unless ``force``. The undo is itself
        recorded (``action="undo"``), so it can be undone too.
        """
        change = self.history.get(change_id)
        target = check_target(change.target)
        path = self.path(target)
        self._ensure_dir()
        with self._locked(path):
            fileio.remove_stale_temps(path)
            current = _read_bytes(path)
            if current != change.after and not force:
                raise undo_drift(FILE_NAMES[target], change, current)
            if change.before is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                fileio.atomic_write(path, change.before, mode=0o600, sync_folder=self._sync_folder)
            with self.attributed(self._author()[0], undo_reason(change, force=force)):
                new_id = self._record(target, "undo", current, change.before, undoes=change.id)
        if new_id is None:
            raise StorageError(
                f"Change #{change.id} was undone, but the undo could not be recorded in "
                f"{self.history.path}; check that the file is writable."
            )
        return self.history.get(new_id)

    def reset(self, target: Target) -> Path | None:
        """Empty ``target``, keeping a ``<file>.bak.<unix_ts>`` copy; return the copy.

        Raw bytes are copied, so a reset works on a file that is damaged or not UTF-8
        (often why a user resets). None when the file was already empty.
        """
        target = check_target(target)
        path = self.path(target)
        self._ensure_dir()
        with self._locked(path):
            data = _read_bytes(path)
            if data is None or not data.strip():
                return None
            backup = self._backup(path)
            fileio.atomic_write(path, b"", mode=0o600, sync_folder=self._sync_folder)
            self._record(target, "reset", data, b"")
        return backup

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        lock_path = path.with_name(path.name + ".lock")
        thread_lock = _thread_lock_for(lock_path)
        timeout = self.lock_timeout
        started = time.monotonic()
        if not thread_lock.acquire(timeout=timeout if timeout >= 0 else -1):
            raise LockTimeoutError(
                f"Timed out after {timeout:g}s waiting for {lock_path} (held by another "
                "thread of this process). Retry, or raise memory.lock_timeout."
            )
        try:
            left = timeout - (time.monotonic() - started) if timeout >= 0 else timeout
            with fileio.file_lock(lock_path, timeout=max(left, 0.0) if timeout >= 0 else left):
                yield
        finally:
            thread_lock.release()

    def _ensure_dir(self) -> None:
        try:
            fileio.private_dir(self.memories_dir)
        except OSError as exc:
            raise StorageError(
                f"Cannot create {self.memories_dir}: {exc.strerror or exc}. Make the "
                "memstrata home folder writable or set MEMSTRATA_HOME elsewhere."
            ) from exc

    # -- drift -------------------------------------------------------------------

    def _drift(self, current: Current, reason: str) -> DriftError:
        # The file is copied aside first, so the user can restore it after fixing it.
        path = self.path(current.target)
        name = FILE_NAMES[current.target]
        limit = self._limits[current.target]
        remediation = (
            f"Edit {path} so entries are separated by a line holding only '§' with no "
            f"blank lines around it, Unix line endings, and every entry under {limit:,} "
            "chars (or restore it from the backup), then retry. If you lowered the "
            "character limit below an entry's length, raise it again or shorten that entry "
            "in the file."
        )
        try:
            backup: Path | None = self._backup(path)
        except (OSError, AtomicWriteError) as exc:
            backup = None
            where = f"no backup could be written ({exc}); the file itself is unchanged"
        else:
            where = f"a copy is in {backup}"
        return DriftError(
            f"{name} was edited outside memstrata ({reason}), so it was not rewritten; "
            f"{where}. {remediation}",
            drift_backup=str(backup) if backup is not None else None,
            remediation=remediation,
        )

    @staticmethod
    def _backup(path: Path) -> Path:
        data = path.read_bytes()
        stamp = int(time.time())
        candidate = path.with_name(f"{path.name}.bak.{stamp}")
        counter = 1
        while candidate.exists():
            if candidate.read_bytes() == data:
                return candidate
            candidate = path.with_name(f"{path.name}.bak.{stamp}.{counter}")
            counter += 1
        fileio.atomic_write(candidate, data, mode=0o600)
        return candidate


def memory_and_config(
    memory: CuratedMemory | None, config: Config | None
) -> tuple[CuratedMemory, Config]:
    """The memory and configuration a component works with, each defaulting from the other.

    Without ``config``, the configuration of ``memory``'s home (or of the default home);
    without ``memory``, the :class:`FileMemory` of the configuration's home.
    """
    if config is None:
        config = Config.load(memory.home if memory is not None else None)
    if memory is None:
        memory = FileMemory(config.home, config=config)
    return memory, config


def _read_bytes(path: Path) -> bytes | None:
    """The file's exact bytes (None if missing), for the history."""
    try:
        return fileio.read_bytes(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise fileio.symlink_refused(path) from None
        raise UnreadableFileError(
            f"{path} exists but could not be read ({exc.strerror or exc}). It was left "
            f"untouched: fix its permissions (chmod 600 {path}) and retry."
        ) from exc
