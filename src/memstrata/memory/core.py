"""The backend-independent half of L1 curated memory, shared by every storage backend.

:class:`CuratedMemoryBase` holds everything about curated memory that does not depend on
where the text lives: the character budgets, the frozen snapshot (rendering, the
injection scan of every entry, the over-budget note), matching an entry by unique
substring, the add / replace / remove / batch rules and every message they return or
raise. A backend supplies four things: how to read one target's text, how to read both
for the snapshot, how to run one change under its own lock (:meth:`_mutate`) and what an
outside edit error says (:meth:`_drift`). :class:`~memstrata.memory.files.FileMemory` keeps
files, file locks, backups and a SQLite history; :class:`~memstrata.store.postgres.PostgresMemory`
keeps rows, row locks and history rows. Both therefore answer every call with the same
words, and both offer ``history`` (a :class:`~memstrata.memory.history.ChangeLog`) and
``undo``.

:class:`CuratedMemory` is the protocol the memory tool, the curator, importers,
exporters and the MCP service accept, so any backend (or a test double) can be passed.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memstrata.config import Config
from memstrata.errors import (
    AmbiguousMatchError,
    ConfigError,
    DriftError,
    DuplicateEntryError,
    InvalidMemoryArgument,
    MemoryFullError,
    NoMatchError,
)
from memstrata.memory.args import (
    BATCH_SUFFIX,
    BatchOp,
    check_target,
    clean_content,
    clean_old_text,
    scan_content,
    validate_batch,
)
from memstrata.memory.format import (
    FILE_NAMES,
    TARGET_LABELS,
    TARGETS,
    Target,
    Usage,
    blocked_placeholder,
    char_count,
    dedupe,
    fit_to_budget,
    fold,
    join_blocks,
    normalize_entry,
    omitted_note,
    parse_entries,
    preview,
    render_block,
    render_unavailable,
    roundtrip_mismatch,
    suspicious_entry,
)
from memstrata.memory.history import ChangeLog, MemoryChange
from memstrata.memory.writes import MemoryWrite, WriteListener, WriteListeners
from memstrata.scanner import scan as scanner

__all__ = ["CuratedMemory", "CuratedMemoryBase", "Current", "EntryChange", "WriteResult"]

# Who is writing and why, for the next writes in this thread or task. A context variable
# rather than an attribute: one memory object is shared by the agent's tool, the CLI and
# a background curator, each attributing its own writes.
_ATTRIBUTION: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "memstrata_memory_attribution", default=None
)

_LAYOUT_DRIFT = (
    "its spacing around '§' separators, blank entries or line endings differ from what "
    "memstrata writes"
)


@dataclass(frozen=True)
class WriteResult:
    """The outcome of a successful memory write."""

    target: Target
    action: str
    """``"add"``, ``"replace"``, ``"remove"`` or ``"batch"``."""
    changed: bool
    """False when the stored text was left as it was (a duplicate add, a no-op replace)."""
    message: str
    entry_count: int
    usage: Usage
    # Not compared: two writes with the same outcome are equal whatever row recorded them.
    change_id: int | None = field(default=None, compare=False)
    """The memory-history change that recorded the write (None when nothing changed or
    the backend keeps no history)."""


@dataclass(frozen=True)
class Current:
    """What one target held when the backend's lock was taken."""

    target: Target
    raw: str | None
    entries: list[str]


@dataclass(frozen=True)
class EntryChange:
    """The entries a mutation wants to store, and the message it answers with."""

    entries: list[str]
    changed: bool
    message: str


@runtime_checkable
class CuratedMemory(Protocol):
    """What callers of curated memory rely on, whatever stores it.

    :class:`~memstrata.memory.files.FileMemory` and
    :class:`~memstrata.memory.postgres.PostgresMemory` both satisfy it.
    """

    @property
    def home(self) -> Path:
        """The memstrata home folder whose configuration the memory follows."""
        ...

    @property
    def load_errors(self) -> dict[Target, str]:
        """Targets that could not be read at the last :meth:`load`, with the reason."""
        ...

    def limit(self, target: Target) -> int:
        """The character budget of ``target``."""
        ...

    def load(self) -> None:
        """Re-read both targets and re-freeze the snapshot."""
        ...

    def snapshot(self) -> str:
        """The frozen system-prompt text of both targets."""
        ...

    def snapshot_block(self, target: Target) -> str:
        """The frozen block of one target."""
        ...

    def entries(self, target: Target) -> list[str]:
        """The live entries of ``target``."""
        ...

    def usage(self, target: Target) -> Usage:
        """Live usage of ``target``."""
        ...

    def add(self, target: Target, content: str) -> WriteResult:
        """Append an entry."""
        ...

    def replace(self, target: Target, old_text: str, content: str) -> WriteResult:
        """Replace the entry matching ``old_text``."""
        ...

    def remove(self, target: Target, old_text: str) -> WriteResult:
        """Remove the entry matching ``old_text``."""
        ...

    def apply_batch(self, target: Target, operations: Sequence[Mapping[str, Any]]) -> WriteResult:
        """Apply add/replace/remove operations all-or-nothing."""
        ...

    def attributed(self, who: str, why: str = "") -> AbstractContextManager[None]:
        """Name the author and reason of the writes made in a ``with`` block."""
        ...

    @property
    def history(self) -> ChangeLog:
        """The append-only audit history of both targets."""
        ...

    def undo(self, change_id: int, *, force: bool = False) -> MemoryChange:
        """Put back what change ``change_id`` replaced; return the undo's own change."""
        ...

    def add_write_listener(self, listener: WriteListener) -> Callable[[], None]:
        """Call ``listener`` with each stored write; return the function removing it."""
        ...


class CuratedMemoryBase(abc.ABC):
    """Entry rules, budgets and the frozen snapshot; subclasses store the text.

    A subclass calls :meth:`_configure` in its constructor (then :meth:`load` once it
    can read) and implements :meth:`_read_raw`, :meth:`_read_for_snapshot`,
    :meth:`_mutate` and :meth:`_drift`.
    """

    actor: str
    """Who writes made outside :meth:`attributed` are attributed to."""
    lock_timeout: float
    """Seconds a writer waits for the target's lock (negative: forever)."""
    load_errors: dict[Target, str]
    """Targets that could not be read at the last :meth:`load`, with the reason."""

    def _configure(
        self,
        cfg: Config,
        *,
        memory_char_limit: int | None,
        user_char_limit: int | None,
        lock_timeout: float | None,
        actor: str,
    ) -> None:
        """Set budgets, lock timeout and enabled targets (explicit arguments win)."""
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
        self.lock_timeout = float(
            lock_timeout if lock_timeout is not None else cfg.get("memory.lock_timeout")
        )
        self._enabled: dict[Target, bool] = {
            "memory": bool(cfg.get("memory.memory_enabled")),
            "user": bool(cfg.get("memory.user_profile_enabled")),
        }
        self.actor = actor
        self._write_listeners = WriteListeners()
        self._blocks: dict[Target, str] = {"memory": "", "user": ""}
        self._snapshot = ""
        self.load_errors = {}

    # -- what a backend provides ------------------------------------------------------

    @abc.abstractmethod
    def _read_raw(self, target: Target) -> str | None:
        """The stored text of ``target`` now (None when nothing was ever stored)."""

    @abc.abstractmethod
    def _read_for_snapshot(self) -> tuple[dict[Target, str | None], dict[Target, str]]:
        """The stored text of each readable target, and the reason for each unreadable one."""

    @abc.abstractmethod
    def _mutate(
        self,
        target: Target,
        action: str,
        change: Callable[[Current], EntryChange],
        *,
        drift_guard: bool,
    ) -> WriteResult:
        """Lock ``target``, read it, run ``change`` (see :meth:`_apply`), store, unlock."""

    @abc.abstractmethod
    def _drift(self, current: Current, reason: str) -> DriftError:
        """The error for text edited outside memstrata in a way a rewrite could damage."""

    # -- limits and attribution -------------------------------------------------------

    def limit(self, target: Target) -> int:
        """The character budget of ``target``."""
        return self._limits[check_target(target)]

    @contextlib.contextmanager
    def attributed(self, who: str, why: str = "") -> Iterator[None]:
        """Name the author and reason recorded for the writes made in this block.

        Example::

            with memory.attributed("curator", "merged 2 duplicates"):
                memory.apply_batch("memory", operations)
        """
        token = _ATTRIBUTION.set((str(who) or self.actor, str(why)))
        try:
            yield
        finally:
            _ATTRIBUTION.reset(token)

    def add_write_listener(self, listener: WriteListener) -> Callable[[], None]:
        """Call ``listener`` with a :class:`~memstrata.memory.writes.MemoryWrite` for each
        operation of every write that changed the stored text, whoever made it (tool,
        CLI, curator, importer); return the function that removes the listener.

        This is how an external provider's ``on_memory_write`` hears of every write:
        the :class:`~memstrata.providers.manager.MemoryManager` listens to its memory.
        """
        return self._write_listeners.add(listener)

    def _announce(self, result: WriteResult, ops: Sequence[MemoryWrite]) -> WriteResult:
        # Only stored changes are announced: a duplicate add or a no-op batch left the
        # text as it was, so a mirror has nothing to catch up with.
        if result.changed and len(self._write_listeners):
            origin = self._author()[0]
            size = len(ops) if result.action == "batch" else None
            self._write_listeners.emit(
                [
                    MemoryWrite(
                        action=op.action,
                        target=op.target,
                        content=op.content,
                        old_text=op.old_text,
                        origin=origin,
                        batch_index=index if size is not None else None,
                        batch_size=size,
                    )
                    for index, op in enumerate(ops)
                ]
            )
        return result

    def _author(self) -> tuple[str, str]:
        """Who writes now and why: the innermost :meth:`attributed` block, or the actor."""
        return _ATTRIBUTION.get() or (self.actor, "")

    # -- frozen snapshot --------------------------------------------------------------

    def load(self) -> None:
        """Re-read both targets and re-freeze the snapshot.

        Every entry is scanned at ``strict`` scope; a flagged entry is replaced by a
        ``[BLOCKED: ...]`` placeholder in the snapshot only (the stored text keeps it so
        it can be seen and removed). A target over its budget (edited outside memstrata,
        or the limit was lowered) is not injected whole: entries are shown while they
        fit and a note says how many were left out. An unreadable target renders a
        notice instead of raising, so the agent still starts; :attr:`load_errors` names
        it.
        """
        raws, errors = self._read_for_snapshot()
        blocks: dict[Target, str] = {}
        for target in TARGETS:
            if target in errors:
                blocks[target] = render_unavailable(target, errors[target])
            else:
                blocks[target] = self._render(target, parse_entries(raws.get(target)))
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
        shown = [_sanitize(target, entry) for entry in entries]
        footer = ""
        if usage.over_limit:
            shown, left_out = fit_to_budget(shown, limit)
            if left_out:
                footer = omitted_note(
                    FILE_NAMES[target], len(left_out), char_count(left_out), usage
                )
        return render_block(target, shown, usage, footer)

    # -- live state -------------------------------------------------------------------

    def entries(self, target: Target) -> list[str]:
        """The live entries, read now (reflects every write, from any process)."""
        return parse_entries(self._read_raw(check_target(target)))

    def usage(self, target: Target) -> Usage:
        """Live usage of ``target``."""
        return Usage(char_count(self.entries(target)), self.limit(target))

    # -- mutations --------------------------------------------------------------------

    def add(self, target: Target, content: str) -> WriteResult:
        """Append an entry; adding an entry that exists already succeeds with no change.

        Raises :class:`MemoryFullError` when the budget would be exceeded.
        """
        target = check_target(target)
        text = clean_content(content, "Content cannot be empty.", max_chars=self.limit(target))
        scan_content(text)

        def change(current: Current) -> EntryChange:
            if text in current.entries:
                return EntryChange(
                    current.entries, False, "Entry already exists (no duplicate added)."
                )
            same = _same_as(text, current.entries)
            if same is not None:
                raise DuplicateEntryError(
                    f"Not added: the entry '{preview(same)}' already says this (it differs "
                    "only in case, width or punctuation). To change its wording, replace "
                    "it instead of adding another.",
                    existing=same,
                    **self._recovery(current),
                )
            after = [*current.entries, text]
            self._check_budget(current, after, self._add_overflow_message(current, text))
            return EntryChange(after, True, "Entry added.")

        # No drift guard: an append rewrites every existing entry verbatim.
        result = self._mutate(target, "add", change, drift_guard=False)
        return self._announce(result, [MemoryWrite("add", target, text)])

    def replace(self, target: Target, old_text: str, content: str) -> WriteResult:
        """Replace the whole entry matching ``old_text`` with ``content``.

        An entry equal to ``old_text`` wins; otherwise ``old_text`` must be a substring
        of exactly one distinct entry.
        """
        target = check_target(target)
        old = clean_old_text(old_text)
        text = clean_content(
            content,
            "content cannot be empty. Use 'remove' to delete entries.",
            max_chars=self.limit(target),
        )
        scan_content(text)

        def change(current: Current) -> EntryChange:
            index = self._locate(current, current.entries, old, verb="replace")
            if current.entries[index] == text:
                return EntryChange(current.entries, False, "Entry already up to date (no change).")
            after = list(current.entries)
            after[index] = text
            after = dedupe(after)
            limit = self._limits[target]
            self._check_budget(
                current,
                after,
                f"Replacement would put {TARGET_LABELS[target].lower()} at "
                f"{char_count(after):,}/{limit:,} chars. Shorten the new content, or "
                "'remove' other stale entries to make room (see current_entries), then "
                "retry — all in this turn.",
            )
            return EntryChange(after, True, "Entry replaced.")

        result = self._mutate(target, "replace", change, drift_guard=True)
        return self._announce(result, [MemoryWrite("replace", target, text, old_text=old)])

    def remove(self, target: Target, old_text: str) -> WriteResult:
        """Remove the whole entry matching ``old_text`` (same matching as replace)."""
        target = check_target(target)
        old = clean_old_text(old_text)

        def change(current: Current) -> EntryChange:
            index = self._locate(current, current.entries, old, verb="remove")
            after = [e for i, e in enumerate(current.entries) if i != index]
            return EntryChange(after, True, "Entry removed.")

        result = self._mutate(target, "remove", change, drift_guard=True)
        return self._announce(result, [MemoryWrite("remove", target, "", old_text=old)])

    def apply_batch(self, target: Target, operations: Sequence[Mapping[str, Any]]) -> WriteResult:
        """Apply add/replace/remove operations all-or-nothing.

        Each operation is ``{"action": ..., "content": ..., "old_text": ...}``. They run
        in order on a working copy; an add of an existing entry is skipped; the budget is
        checked on the final state only, so one batch can free space and add. A batch
        that would remove every entry of a store holding several is refused, so one bad
        match cannot wipe it (remove entries one at a time to clear it deliberately).
        """
        target = check_target(target)
        ops = validate_batch(operations, max_chars=self.limit(target))

        def change(current: Current) -> EntryChange:
            working = list(current.entries)
            for op in ops:
                if op.action == "add":
                    if op.content not in working:
                        working.append(op.content)
                    continue
                index = self._locate(current, working, op.old_text, verb=op.action, op=op)
                if op.action == "replace":
                    working[index] = op.content
                    working = dedupe(working)
                else:
                    del working[index]
            limit = self._limits[target]
            if not working and len(current.entries) > 1:
                raise InvalidMemoryArgument(
                    f"This batch would remove all {len(current.entries)} entries of "
                    f"{FILE_NAMES[target]}. A batch never empties a store, so one broad "
                    "match cannot wipe it; to clear it deliberately, remove the entries one "
                    "at a time with action='remove'." + BATCH_SUFFIX,
                    **self._recovery(current),
                )
            self._check_budget(
                current,
                working,
                f"After all {len(ops)} operation(s), {TARGET_LABELS[target].lower()} would "
                f"be at {char_count(working):,}/{limit:,} chars, over the limit. Remove or "
                "shorten more entries in the same batch (see current_entries), then retry."
                + BATCH_SUFFIX,
            )
            if working == current.entries:
                return EntryChange(
                    working,
                    False,
                    f"No change: the {len(ops)} operation(s) left the entries as they were.",
                )
            return EntryChange(working, True, f"Applied {len(ops)} operation(s).")

        result = self._mutate(target, "batch", change, drift_guard=True)
        writes = [
            MemoryWrite(op.action, target, op.content, old_text=op.old_text or None) for op in ops
        ]
        return self._announce(result, writes)

    # -- helpers for a backend's _mutate ----------------------------------------------

    def _apply(
        self,
        current: Current,
        change: Callable[[Current], EntryChange],
        *,
        drift_guard: bool,
    ) -> tuple[EntryChange, list[str]]:
        """Run ``change`` on the locked state; return it and the entries to store.

        With ``drift_guard``, text whose layout memstrata would not have written is
        refused first (a rewrite would normalise it and could lose an outside edit).
        """
        if drift_guard and current.raw is not None and roundtrip_mismatch(current.raw):
            raise self._drift(current, _LAYOUT_DRIFT)
        result = change(current)
        final = dedupe(result.entries) if result.changed else current.entries
        return result, final

    def _result(
        self,
        target: Target,
        action: str,
        result: EntryChange,
        final: list[str],
        change_id: int | None = None,
    ) -> WriteResult:
        """The :class:`WriteResult` of a finished mutation."""
        return WriteResult(
            target=target,
            action=action,
            changed=result.changed,
            message=result.message,
            entry_count=len(final),
            usage=Usage(char_count(final), self._limits[target]),
            change_id=change_id,
        )

    # -- matching and budget ----------------------------------------------------------

    def _locate(
        self,
        current: Current,
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
            # "pnpm" for "PNPM", "ｐｎｐｍ" for "pnpm": accepted only when it designates one
            # entry, so a loose match can never pick between several.
            folded = fold(old_text)
            loose = [i for i, entry in enumerate(working) if folded in fold(entry)]
            if len(dedupe(working[i] for i in loose)) == 1:
                matches = loose
        if not matches:
            if op is None:
                message = (
                    f"No entry matched '{old_text}'. Check current_entries and retry with "
                    f"the exact text of the entry you want to {verb}."
                )
            else:
                message = f"{op.label}: no entry matched '{old_text}'." + BATCH_SUFFIX
            raise NoMatchError(message, **self._recovery(current))
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
                message, matches=[preview(e) for e in distinct], **self._recovery(current)
            )
        index = matches[0]
        # An entry memstrata could not have written (too long, or holding a separator
        # line) is text merged by an outside edit: rewriting it would drop the merged
        # part. Other entries are rewritten verbatim, so only touching it is refused.
        reason = suspicious_entry(working[index], self._limits[current.target])
        if reason is not None:
            raise self._drift(current, reason)
        return index

    def _check_budget(self, current: Current, after: list[str], message: str) -> None:
        # A write may not push the store past its budget; when the store is already
        # over it (outside edit, lowered limit), a write that does not grow it is
        # allowed, so replace can shorten entries step by step.
        new_total = char_count(after)
        limit = self._limits[current.target]
        if new_total <= limit or new_total <= char_count(current.entries):
            return
        raise MemoryFullError(message, **self._recovery(current))

    def _add_overflow_message(self, current: Current, text: str) -> str:
        limit = self._limits[current.target]
        count = char_count(current.entries)
        label = TARGET_LABELS[current.target]
        if len(text) > limit:
            return (
                f"This entry alone is {len(text):,} chars, longer than the whole "
                f"{limit:,}-char limit of {FILE_NAMES[current.target]}. Shorten it to the "
                "essential fact, then retry."
            )
        return (
            f"{label} at {count:,}/{limit:,} chars. Adding this entry ({len(text):,} "
            "chars) would exceed the limit. Consolidate now: use 'replace' to shorten or "
            "merge entries, or 'remove' stale ones (see current_entries), then retry — all "
            "in this turn."
        )

    def _recovery(self, current: Current) -> dict[str, Any]:
        return {
            "current_entries": list(current.entries),
            "usage": str(Usage(char_count(current.entries), self._limits[current.target])),
        }


def _same_as(text: str, entries: Sequence[str]) -> str | None:
    """The entry that says what ``text`` says (equal normal forms), if there is one."""
    normal = normalize_entry(text)
    if not normal:
        return None
    return next((e for e in entries if normalize_entry(e) == normal), None)


def _sanitize(target: Target, entry: str) -> str:
    # Entries that already look like a placeholder are scanned too: passing them
    # through unscanned would let "[BLOCKED: ...] <payload>" reach the prompt.
    findings = scanner.scan_for_threats(entry, "strict")
    if not findings:
        return entry
    return blocked_placeholder(FILE_NAMES[target], [f.pattern_id for f in findings])
