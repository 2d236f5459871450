"""L1 curated memory: ``MEMORY.md`` (the agent's notes) and ``USER.md`` (the user profile).

Two states exist side by side:

* the **frozen snapshot**, rendered by :meth:`FileMemory.load` (at construction, at
  session start and after compression) and injected into the system prompt. Writes never
  change it, so the prompt prefix stays byte-identical and the provider's prefix cache
  keeps hitting;
* the **live entries**, re-read from disk by every call, so a tool response reflects
  every write at once, including those of other processes sharing the home folder.

Every mutation validates its arguments, scans new content for injection at ``strict``
scope, takes ``<file>.lock`` (a thread lock first, then the cross-process file lock),
deletes temp files left by writers that died, re-reads the file under the lock, mutates,
and writes atomically (temp file, fsync, rename, folder fsync). ``replace``, ``remove``
and ``apply_batch`` refuse to rewrite a file that was edited outside memstrata in a way a
rewrite could damage (the drift guard): the file is copied to ``<file>.bak.<unix_ts>``
and :class:`~memstrata.errors.DriftError` says how to fix it.

Every successful write is recorded, still under the lock, in the append-only
:class:`~memstrata.memory_history.MemoryHistory` with the exact bytes before and after,
who made it and why (see :meth:`FileMemory.attributed`); :meth:`FileMemory.undo` puts
back the bytes a change replaced.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstrata import fileio, scanner
from memstrata.config import Config, memstrata_home
from memstrata.errors import (
    AmbiguousMatchError,
    AtomicWriteError,
    ConfigError,
    DriftError,
    InvalidMemoryArgument,
    LockTimeoutError,
    MemoryFullError,
    NoMatchError,
    StorageError,
    UnreadableFileError,
)
from memstrata.memory_args import (
    BATCH_SUFFIX,
    BatchOp,
    check_target,
    clean_content,
    clean_old_text,
    scan_content,
    validate_batch,
)
from memstrata.memory_format import (
    ENTRY_DELIMITER,
    FILE_NAMES,
    TARGET_LABELS,
    TARGETS,
    Target,
    Usage,
    blocked_placeholder,
    char_count,
    dedupe,
    fit_to_budget,
    join_blocks,
    omitted_note,
    parse_entries,
    preview,
    render_block,
    render_unavailable,
    roundtrip_mismatch,
    serialize,
    suspicious_entry,
)
from memstrata.memory_history import HISTORY_FILENAME, MemoryChange, MemoryHistory, digest

__all__ = ["ENTRY_DELIMITER", "FileMemory", "Target", "Usage", "WriteResult"]

MEMORIES_DIRNAME = "memories"

logger = logging.getLogger(__name__)

# Who is writing and why, for the history row of the next writes in this thread or task.
# A context variable rather than a FileMemory attribute: one FileMemory is shared by the
# agent's tool, the CLI and a background curator, each attributing its own writes.
_ATTRIBUTION: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "memstrata_memory_attribution", default=None
)

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


@dataclass(frozen=True)
class WriteResult:
    """The outcome of a successful memory write."""

    target: Target
    action: str
    """``"add"``, ``"replace"``, ``"remove"`` or ``"batch"``."""
    changed: bool
    """False when the file was left as it was (a duplicate add, a no-op replace)."""
    message: str
    entry_count: int
    usage: Usage
    # Not compared: two writes with the same outcome are equal whatever row recorded them.
    change_id: int | None = field(default=None, compare=False)
    """The memory-history change that recorded the write (None when nothing changed)."""


@dataclass(frozen=True)
class _Disk:
    """What was on disk when the lock was taken."""

    target: Target
    path: Path
    raw: str | None
    entries: list[str]


@dataclass(frozen=True)
class _Change:
    entries: list[str]
    changed: bool
    message: str


class FileMemory:
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
        self._limits: dict[Target, int] = {
            "memory": int(
                memory_char_limit
                if memory_char_limit is not None
                else cfg.get("memory.memory_char_limit")
            ),
            "user": int(
                user_char_limit
                if user_char_limit is not None
                else cfg.get("memory.user_char_limit")
            ),
        }
        for target, value in self._limits.items():
            if value < 1:
                key = "memory_char_limit" if target == "memory" else "user_char_limit"
                raise ConfigError(
                    f"memory.{key} must be a positive number of characters, got {value}. "
                    f"Fix it with `memstrata config set memory.{key} <int>`."
                )
        self.lock_timeout: float = float(
            lock_timeout if lock_timeout is not None else cfg.get("memory.lock_timeout")
        )
        self._enabled: dict[Target, bool] = {
            "memory": bool(cfg.get("memory.memory_enabled")),
            "user": bool(cfg.get("memory.user_profile_enabled")),
        }
        self.actor: str = actor
        """Who the history names for writes made outside :meth:`attributed`."""
        self.history: MemoryHistory = MemoryHistory(
            self.home / HISTORY_FILENAME, full_sync=self._sync_folder
        )
        """The append-only audit history of both files."""
        self._blocks: dict[Target, str] = {"memory": "", "user": ""}
        self._snapshot = ""
        self.load_errors: dict[Target, str] = {}
        """Targets whose file could not be read at the last :meth:`load`, with the reason."""
        self.load()

    # -- paths and limits -------------------------------------------------------------

    def path(self, target: Target) -> Path:
        """The file of ``target``: ``MEMORY.md`` or ``USER.md``."""
        return self.memories_dir / FILE_NAMES[check_target(target)]

    def limit(self, target: Target) -> int:
        """The character budget of ``target``."""
        return self._limits[check_target(target)]

    # -- frozen snapshot --------------------------------------------------------------

    def load(self) -> None:
        """Re-read both files and re-freeze the snapshot.

        Every entry is scanned at ``strict`` scope; a flagged entry is replaced by a
        ``[BLOCKED: ...]`` placeholder in the snapshot only (the file keeps it so it can
        be seen and removed). A file over its budget (hand-edited, or the limit was
        lowered) is not injected whole: entries are shown while they fit and a note
        says how many were left out. An unreadable file renders a notice instead of
        raising, so the agent still starts; :attr:`load_errors` names it.
        """
        blocks: dict[Target, str] = {"memory": "", "user": ""}
        errors: dict[Target, str] = {}
        for target in TARGETS:
            try:
                raw = fileio.read_text(self.path(target))
            except UnreadableFileError as exc:
                errors[target] = str(exc)
                blocks[target] = render_unavailable(target, str(exc))
                continue
            blocks[target] = self._render(target, parse_entries(raw))
        self._blocks = blocks
        self.load_errors = errors
        self._snapshot = join_blocks(blocks[t] for t in TARGETS if self._enabled[t])

    def snapshot(self) -> str:
        """The frozen system-prompt text of both targets (``""`` if both are empty).

        Byte-stable until :meth:`load` is called again, whatever is written meanwhile.
        """
        return self._snapshot

    def snapshot_block(self, target: Target) -> str:
        """The frozen block of one target (``""`` when empty or disabled)."""
        target = check_target(target)
        return self._blocks[target] if self._enabled[target] else ""

    def _render(self, target: Target, entries: list[str]) -> str:
        limit = self._limits[target]
        usage = Usage(char_count(entries), limit)
        shown = [self._sanitize(target, entry) for entry in entries]
        footer = ""
        if usage.over_limit:
            shown, left_out = fit_to_budget(shown, limit)
            if left_out:
                footer = omitted_note(
                    FILE_NAMES[target], len(left_out), char_count(left_out), usage
                )
        return render_block(target, shown, usage, footer)

    @staticmethod
    def _sanitize(target: Target, entry: str) -> str:
        # Entries that already look like a placeholder are scanned too: passing them
        # through unscanned would let "[BLOCKED: ...] <payload>" reach the prompt.
        findings = scanner.scan_for_threats(entry, "strict")
        if not findings:
            return entry
        return blocked_placeholder(FILE_NAMES[target], [f.pattern_id for f in findings])

    # -- live state -------------------------------------------------------------------

    def entries(self, target: Target) -> list[str]:
        """The live entries, read from disk now (reflects every write, any process)."""
        return parse_entries(fileio.read_text(self.path(target)))

    def usage(self, target: Target) -> Usage:
        """Live usage of ``target``."""
        return Usage(char_count(self.entries(target)), self.limit(target))

    # -- mutations --------------------------------------------------------------------

    def add(self, target: Target, content: str) -> WriteResult:
        """Append an entry; adding an entry that exists already succeeds with no change.

        Raises :class:`MemoryFullError` when the budget would be exceeded.
        """
        target = check_target(target)
        text = clean_content(content, "Content cannot be empty.")
        scan_content(text)

        def change(disk: _Disk) -> _Change:
            if text in disk.entries:
                return _Change(disk.entries, False, "Entry already exists (no duplicate added).")
            after = [*disk.entries, text]
            self._check_budget(disk, after, self._add_overflow_message(disk, text))
            return _Change(after, True, "Entry added.")

        # No drift guard: an append rewrites every existing entry verbatim.
        return self._mutate(target, "add", change, drift_guard=False)

    def replace(self, target: Target, old_text: str, content: str) -> WriteResult:
        """Replace the whole entry matching ``old_text`` with ``content``.

        An entry equal to ``old_text`` wins; otherwise ``old_text`` must be a substring
        of exactly one distinct entry.
        """
        target = check_target(target)
        old = clean_old_text(old_text)
        text = clean_content(content, "content cannot be empty. Use 'remove' to delete entries.")
        scan_content(text)

        def change(disk: _Disk) -> _Change:
            index = self._locate(disk, disk.entries, old, verb="replace")
            if disk.entries[index] == text:
                return _Change(disk.entries, False, "Entry already up to date (no change).")
            after = list(disk.entries)
            after[index] = text
            after = dedupe(after)
            limit = self._limits[target]
            self._check_budget(
                disk,
                after,
                f"Replacement would put {TARGET_LABELS[target].lower()} at "
                f"{char_count(after):,}/{limit:,} chars. Shorten the new content, or "
                "'remove' other stale entries to make room (see current_entries), then "
                "retry — all in this turn.",
            )
            return _Change(after, True, "Entry replaced.")

        return self._mutate(target, "replace", change, drift_guard=True)

    def remove(self, target: Target, old_text: str) -> WriteResult:
        """Remove the whole entry matching ``old_text`` (same matching as replace)."""
        target = check_target(target)
        old = clean_old_text(old_text)

        def change(disk: _Disk) -> _Change:
            index = self._locate(disk, disk.entries, old, verb="remove")
            after = [e for i, e in enumerate(disk.entries) if i != index]
            return _Change(after, True, "Entry removed.")

        return self._mutate(target, "remove", change, drift_guard=True)

    def apply_batch(self, target: Target, operations: Sequence[Mapping[str, Any]]) -> WriteResult:
        """Apply add/replace/remove operations all-or-nothing.

        Each operation is ``{"action": ..., "content": ..., "old_text": ...}``. They run
        in order on a working copy; an add of an existing entry is skipped; the budget is
        checked on the final state only, so one batch can free space and add. A batch
        that would remove every entry of a store holding several is refused, so one bad
        match cannot wipe it (remove entries one at a time to clear it deliberately).
        """
        target = check_target(target)
        ops = validate_batch(operations)

        def change(disk: _Disk) -> _Change:
            working = list(disk.entries)
            for op in ops:
                if op.action == "add":
                    if op.content not in working:
                        working.append(op.content)
                    continue
                index = self._locate(disk, working, op.old_text, verb=op.action, op=op)
                if op.action == "replace":
                    working[index] = op.content
                    working = dedupe(working)
                else:
                    del working[index]
            limit = self._limits[target]
            if not working and len(disk.entries) > 1:
                raise InvalidMemoryArgument(
                    f"This batch would remove all {len(disk.entries)} entries of "
                    f"{FILE_NAMES[target]}. A batch never empties a store, so one broad "
                    "match cannot wipe it; to clear it deliberately, remove the entries one "
                    "at a time with action='remove'." + BATCH_SUFFIX,
                    **self._recovery(disk),
                )
            self._check_budget(
                disk,
                working,
                f"After all {len(ops)} operation(s), {TARGET_LABELS[target].lower()} would "
                f"be at {char_count(working):,}/{limit:,} chars, over the limit. Remove or "
                "shorten more entries in the same batch (see current_entries), then retry."
                + BATCH_SUFFIX,
            )
            if working == disk.entries:
                return _Change(
                    working,
                    False,
                    f"No change: the {len(ops)} operation(s) left the entries as they were.",
                )
            return _Change(working, True, f"Applied {len(ops)} operation(s).")

        return self._mutate(target, "batch", change, drift_guard=True)

    # -- the write path ---------------------------------------------------------------

    def _mutate(
        self,
        target: Target,
        action: str,
        change: Callable[[_Disk], _Change],
        *,
        drift_guard: bool,
    ) -> WriteResult:
        path = self.path(target)
        self._ensure_dir()
        with self._locked(path):
            fileio.remove_stale_temps(path)
            raw = fileio.read_text(path)
            before = _read_bytes(path)
            disk = _Disk(target, path, raw, parse_entries(raw))
            if drift_guard and raw is not None and roundtrip_mismatch(raw):
                raise self._drift(
                    disk,
                    "its spacing around '§' separators, blank entries or line endings differ "
                    "from what memstrata writes",
                )
            result = change(disk)
            final = dedupe(result.entries) if result.changed else disk.entries
            change_id: int | None = None
            if result.changed:
                after = serialize(final).encode("utf-8")
                fileio.atomic_write(path, after, mode=0o600, sync_folder=self._sync_folder)
                change_id = self._record(target, action, before, after)
        return WriteResult(
            target=target,
            action=action,
            changed=result.changed,
            message=result.message,
            entry_count=len(final),
            usage=Usage(char_count(final), self._limits[target]),
            change_id=change_id,
        )

    # -- history and undo ---------------------------------------------------------------

    @contextlib.contextmanager
    def attributed(self, who: str, why: str = "") -> Iterator[None]:
        """Name the author and reason the history records for writes in this block.

        Example::

            with memory.attributed("curator", "merged 2 duplicates"):
                memory.apply_batch("memory", operations)
        """
        token = _ATTRIBUTION.set((str(who) or self.actor, str(why)))
        try:
            yield
        finally:
            _ATTRIBUTION.reset(token)

    def _record(
        self,
        target: Target,
        action: str,
        before: bytes | None,
        after: bytes | None,
        *,
        undoes: int | None = None,
    ) -> int | None:
        who, why = _ATTRIBUTION.get() or (self.actor, "")
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
                raise DriftError(
                    f"{FILE_NAMES[target]} changed after change #{change.id} (it now holds "
                    f"{digest(current)}, the change left {digest(change.after)}), so undoing "
                    "it would also throw away the later edits. Undo the later changes first "
                    "(newest first, see `memstrata memory history`), or pass --force to "
                    "restore the older bytes anyway."
                )
            if change.before is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                fileio.atomic_write(path, change.before, mode=0o600, sync_folder=self._sync_folder)
            with self.attributed(
                (_ATTRIBUTION.get() or (self.actor, ""))[0],
                f"undo of change #{change.id}" + (" (forced)" if force else ""),
            ):
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
            self.memories_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create {self.memories_dir}: {exc.strerror or exc}. Make the "
                "memstrata home folder writable or set MEMSTRATA_HOME elsewhere."
            ) from exc

    # -- matching, budget, drift ------------------------------------------------------

    def _locate(
        self,
        disk: _Disk,
        working: list[str],
        old_text: str,
        *,
        verb: str,
        op: BatchOp | None = None,
    ) -> int:
        """Index of the entry ``old_text`` designates in ``working``; raise if none/many."""
        exact = [i for i, entry in enumerate(working) if entry == old_text]
        matches = exact or [i for i, entry in enumerate(working) if old_text in entry]
        if not matches:
            if op is None:
                message = (
                    f"No entry matched '{old_text}'. Check current_entries and retry with "
                    f"the exact text of the entry you want to {verb}."
                )
            else:
                message = f"{op.label}: no entry matched '{old_text}'." + BATCH_SUFFIX
            raise NoMatchError(message, **self._recovery(disk))
        distinct = dedupe(working[i] for i in matches)
        if len(distinct) > 1:
            if op is None:
                message = (
                    f"Multiple entries matched '{old_text}'. Be more specific: quote enough "
                    "of the entry you mean to match it alone (see matches)."
                )
            else:
                message = (
                    f"{op.label}: '{old_text}' matched multiple distinct entries — be more "
                    "specific (see matches)." + BATCH_SUFFIX
                )
            raise AmbiguousMatchError(
                message, matches=[preview(e) for e in distinct], **self._recovery(disk)
            )
        index = matches[0]
        # An entry memstrata could not have written (too long, or holding a separator
        # line) is text merged by an outside edit: rewriting it would drop the merged
        # part. Other entries are rewritten verbatim, so only touching it is refused.
        reason = suspicious_entry(working[index], self._limits[disk.target])
        if reason is not None:
            raise self._drift(disk, reason)
        return index

    def _check_budget(self, disk: _Disk, after: list[str], message: str) -> None:
        # A write may not push the store past its budget; when the store is already
        # over it (hand edit, lowered limit), a write that does not grow it is allowed,
        # so replace can shorten entries step by step.
        new_total = char_count(after)
        limit = self._limits[disk.target]
        if new_total <= limit or new_total <= char_count(disk.entries):
            return
        raise MemoryFullError(message, **self._recovery(disk))

    def _add_overflow_message(self, disk: _Disk, text: str) -> str:
        limit = self._limits[disk.target]
        current = char_count(disk.entries)
        label = TARGET_LABELS[disk.target]
        if len(text) > limit:
            return (
                f"This entry alone is {len(text):,} chars, longer than the whole "
                f"{limit:,}-char limit of {FILE_NAMES[disk.target]}. Shorten it to the "
                "essential fact, then retry."
            )
        return (
            f"{label} at {current:,}/{limit:,} chars. Adding this entry ({len(text):,} "
            "chars) would exceed the limit. Consolidate now: use 'replace' to shorten or "
            "merge entries, or 'remove' stale ones (see current_entries), then retry — all "
            "in this turn."
        )

    def _recovery(self, disk: _Disk) -> dict[str, Any]:
        return {
            "current_entries": list(disk.entries),
            "usage": str(Usage(char_count(disk.entries), self._limits[disk.target])),
        }

    def _drift(self, disk: _Disk, reason: str) -> DriftError:
        name = FILE_NAMES[disk.target]
        limit = self._limits[disk.target]
        remediation = (
            f"Edit {disk.path} so entries are separated by a line holding only '§' with no "
            f"blank lines around it, Unix line endings, and every entry under {limit:,} "
            "chars (or restore it from the backup), then retry. If you lowered the "
            "character limit below an entry's length, raise it again or shorten that entry "
            "in the file."
        )
        try:
            backup: Path | None = self._backup(disk.path)
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


def _read_bytes(path: Path) -> bytes | None:
    """The file's exact bytes (None if missing), for the history."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableFileError(
            f"{path} exists but could not be read ({exc.strerror or exc}). It was left "
            f"untouched: fix its permissions (chmod 600 {path}) and retry."
        ) from exc
