"""L1 curated memory on PostgreSQL: ``MEMORY.md``/``USER.md`` semantics in table rows.

:class:`PostgresMemory` has the public API and the behaviour of
:class:`memstrata.memory.FileMemory` (limits, ``§``-delimited entries, add / replace /
remove by unique substring, an all-or-nothing batch, the injection scan on write and on
load, the frozen snapshot beside live entries, the same errors and messages), but each
target is one row of ``curated_memory`` keyed by ``(namespace, target)``, so agents on
several machines can share one agent's memory.

The row's ``content`` holds exactly the text the file would hold, so the pure functions
of :mod:`memstrata.memory_format` parse and render it unchanged. A write runs in one
transaction: make sure the row exists (``INSERT ... ON CONFLICT DO NOTHING``), lock it
with ``SELECT ... FOR UPDATE`` (the row lock plays the part of the lock file), re-read,
mutate, ``UPDATE`` with ``version + 1``. Two writers on two machines therefore queue on
the row and the second one sees the first one's entry: no update is lost. A waiting
writer gives up after ``memory.lock_timeout`` seconds with
:class:`~memstrata.errors.LockTimeoutError`.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from memstrata import scanner
from memstrata.config import Config
from memstrata.errors import (
    AmbiguousMatchError,
    ConfigError,
    DriftError,
    InvalidMemoryArgument,
    LockTimeoutError,
    MemoryFullError,
    NoMatchError,
    StorageError,
)
from memstrata.memory import WriteResult
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
from memstrata.postgres.schema import migrate
from memstrata.postgres.store import validate_namespace

__all__ = ["PostgresMemory"]

logger = logging.getLogger(__name__)

# Who writes and why (see PostgresMemory.attributed): per thread or task, like FileMemory's.
_ATTRIBUTION: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "memstrata_pg_memory_attribution", default=None
)


def _safe_dsn(dsn: str) -> str:
    # Error messages name the server, never the password.
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"The PostgreSQL DSN could not be parsed ({exc}). Use a URL such as "
            "'postgresql://user@host:5432/dbname'."
        ) from exc
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or ''}"


@dataclass(frozen=True)
class _Row:
    """What the locked row held when the transaction read it."""

    target: Target
    raw: str | None
    entries: list[str]


@dataclass(frozen=True)
class _Change:
    entries: list[str]
    changed: bool
    message: str


class PostgresMemory:
    """Curated memory in PostgreSQL rows, shared by every process that uses the namespace.

    Example::

        memory = PostgresMemory("postgresql://db.internal/agents", namespace="alice")
        memory.add("user", "Prefers answers in French.")
        system_prompt_part = memory.snapshot()   # frozen until memory.load()

    Limits come from ``config`` (``memory.memory_char_limit``,
    ``memory.user_char_limit``, ``memory.lock_timeout``); explicit arguments win.
    ``memory.memory_enabled`` / ``memory.user_profile_enabled`` set to false leave that
    target out of the snapshot (the rows stay writable). The schema is created or
    upgraded on first use. Close it (or use it as a context manager) to release its
    connections.
    """

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str = "default",
        config: Config | None = None,
        memory_char_limit: int | None = None,
        user_char_limit: int | None = None,
        lock_timeout: float | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(
                "PostgresMemory needs a PostgreSQL DSN such as "
                "'postgresql://user@host:5432/dbname'."
            )
        self.namespace: str = validate_namespace(namespace)
        cfg = config if config is not None else Config.load()
        self.config = cfg
        self.home: Path = cfg.home
        self._dsn_label = _safe_dsn(dsn)
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
        # One direct connection first: a wrong DSN or a stopped server fails at once
        # with libpq's own reason (a pool would retry until its timeout), and the
        # schema is created or upgraded on it.
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as first:
                migrate(first)
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"Cannot connect to PostgreSQL at {self._dsn_label}: {exc}. Check the DSN, "
                "that the server is running and that this user may connect."
            ) from exc
        # A small pool: memory writes are rare and short, but a tool call and a
        # snapshot load may overlap in a threaded agent.
        self._pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            kwargs={"autocommit": True, "connect_timeout": 10},
            open=False,
            name="memstrata-memory",
        )
        try:
            self._pool.open(wait=True, timeout=10.0)
        except Exception as exc:
            self._pool.close()
            raise StorageError(
                f"Cannot connect to PostgreSQL at {self._dsn_label}: {exc}. Check the DSN, "
                "that the server is running and that this user may connect."
            ) from exc
        self._blocks: dict[Target, str] = {"memory": "", "user": ""}
        self._snapshot = ""
        self.load_errors: dict[Target, str] = {}
        """Targets whose row could not be read at the last :meth:`load`, with the reason."""
        self.load()

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release the connections (idempotent)."""
        self._pool.close()

    def __enter__(self) -> PostgresMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            if isinstance(exc, pg_errors.LockNotAvailable):
                raise
            raise StorageError(
                f"PostgreSQL at {self._dsn_label} failed: {exc}. Check that the server is "
                "reachable, then retry."
            ) from exc

    # -- attribution ------------------------------------------------------------------

    @contextmanager
    def attributed(self, who: str, why: str = "") -> Iterator[None]:
        """Name the author and reason of the writes made in this block.

        The same call as :meth:`memstrata.memory.FileMemory.attributed`, so callers such
        as the memory tool work on both. Rows keep no audit history yet: each write is
        logged (logger ``memstrata.postgres.memory``, level INFO) with its author.
        """
        token = _ATTRIBUTION.set((str(who) or "api", str(why)))
        try:
            yield
        finally:
            _ATTRIBUTION.reset(token)

    # -- limits -----------------------------------------------------------------------

    def limit(self, target: Target) -> int:
        """The character budget of ``target``."""
        return self._limits[check_target(target)]

    # -- frozen snapshot --------------------------------------------------------------

    def _read_all(self) -> dict[str, str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT target, content FROM curated_memory WHERE namespace = %s",
                (self.namespace,),
            ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def load(self) -> None:
        """Re-read both rows and re-freeze the snapshot.

        Every entry is scanned at ``strict`` scope; a flagged entry is replaced by a
        ``[BLOCKED: ...]`` placeholder in the snapshot only (the row keeps it so it can
        be seen and removed). A target over its budget is not injected whole: entries
        are shown while they fit and a note says how many were left out. When the
        database cannot be read, both blocks render a notice instead of raising, so the
        agent still starts; :attr:`load_errors` names the targets.
        """
        blocks: dict[Target, str] = {"memory": "", "user": ""}
        errors: dict[Target, str] = {}
        try:
            raws: dict[str, str] | None = self._read_all()
        except StorageError as exc:
            raws = None
            for target in TARGETS:
                errors[target] = str(exc)
                blocks[target] = render_unavailable(target, str(exc))
        if raws is not None:
            for target in TARGETS:
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
        # Placeholder-looking entries are scanned too, as in FileMemory.
        findings = scanner.scan_for_threats(entry, "strict")
        if not findings:
            return entry
        return blocked_placeholder(FILE_NAMES[target], [f.pattern_id for f in findings])

    # -- live state -------------------------------------------------------------------

    def entries(self, target: Target) -> list[str]:
        """The live entries, read now (reflects every write, from any machine)."""
        target = check_target(target)
        with self._conn() as conn:
            row = conn.execute(
                "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s",
                (self.namespace, target),
            ).fetchone()
        return parse_entries(str(row[0]) if row is not None else None)

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

        def change(row: _Row) -> _Change:
            if text in row.entries:
                return _Change(row.entries, False, "Entry already exists (no duplicate added).")
            after = [*row.entries, text]
            self._check_budget(row, after, self._add_overflow_message(row, text))
            return _Change(after, True, "Entry added.")

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

        def change(row: _Row) -> _Change:
            index = self._locate(row, row.entries, old, verb="replace")
            if row.entries[index] == text:
                return _Change(row.entries, False, "Entry already up to date (no change).")
            after = list(row.entries)
            after[index] = text
            after = dedupe(after)
            limit = self._limits[target]
            self._check_budget(
                row,
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

        def change(row: _Row) -> _Change:
            index = self._locate(row, row.entries, old, verb="remove")
            after = [e for i, e in enumerate(row.entries) if i != index]
            return _Change(after, True, "Entry removed.")

        return self._mutate(target, "remove", change, drift_guard=True)

    def apply_batch(self, target: Target, operations: Sequence[Mapping[str, Any]]) -> WriteResult:
        """Apply add/replace/remove operations all-or-nothing (one transaction).

        Each operation is ``{"action": ..., "content": ..., "old_text": ...}``. They run
        in order on a working copy; an add of an existing entry is skipped; the budget is
        checked on the final state only, so one batch can free space and add. A batch
        that would remove every entry of a target holding several is refused.
        """
        target = check_target(target)
        ops = validate_batch(operations)

        def change(row: _Row) -> _Change:
            working = list(row.entries)
            for op in ops:
                if op.action == "add":
                    if op.content not in working:
                        working.append(op.content)
                    continue
                index = self._locate(row, working, op.old_text, verb=op.action, op=op)
                if op.action == "replace":
                    working[index] = op.content
                    working = dedupe(working)
                else:
                    del working[index]
            limit = self._limits[target]
            if not working and len(row.entries) > 1:
                raise InvalidMemoryArgument(
                    f"This batch would remove all {len(row.entries)} entries of "
                    f"{FILE_NAMES[target]}. A batch never empties a store, so one broad "
                    "match cannot wipe it; to clear it deliberately, remove the entries one "
                    "at a time with action='remove'." + BATCH_SUFFIX,
                    **self._recovery(row),
                )
            self._check_budget(
                row,
                working,
                f"After all {len(ops)} operation(s), {TARGET_LABELS[target].lower()} would "
                f"be at {char_count(working):,}/{limit:,} chars, over the limit. Remove or "
                "shorten more entries in the same batch (see current_entries), then retry."
                + BATCH_SUFFIX,
            )
            if working == row.entries:
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
        change: Callable[[_Row], _Change],
        *,
        drift_guard: bool,
    ) -> WriteResult:
        key = (self.namespace, target)
        try:
            with self._conn() as conn, conn.transaction():
                # A negative lock_timeout means wait forever, as for the file lock.
                wait_ms = 0 if self.lock_timeout < 0 else max(1, int(self.lock_timeout * 1000))
                conn.execute(f"SET LOCAL lock_timeout = {wait_ms}")
                # The row must exist before it can be locked; two first writers race on
                # the primary key and the database settles it.
                conn.execute(
                    "INSERT INTO curated_memory (namespace, target, content, version, "
                    "updated_at) VALUES (%s, %s, '', 0, %s) ON CONFLICT DO NOTHING",
                    (*key, time.time()),
                )
                found = conn.execute(
                    "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s "
                    "FOR UPDATE",
                    key,
                ).fetchone()
                raw = str(found[0]) if found is not None and found[0] else None
                row = _Row(target, raw, parse_entries(raw))
                if drift_guard and raw is not None and roundtrip_mismatch(raw):
                    raise self._drift(
                        row,
                        "its spacing around '§' separators, blank entries or line endings "
                        "differ from what memstrata writes",
                    )
                result = change(row)
                final = dedupe(result.entries) if result.changed else row.entries
                if result.changed:
                    who, why = _ATTRIBUTION.get() or ("api", "")
                    logger.info(
                        "memory %s of %s in namespace %r by %s%s",
                        action,
                        target,
                        self.namespace,
                        who,
                        f" ({why})" if why else "",
                    )
                    conn.execute(
                        "UPDATE curated_memory SET content = %s, version = version + 1, "
                        "updated_at = %s WHERE namespace = %s AND target = %s",
                        (serialize(final), time.time(), *key),
                    )
        except pg_errors.LockNotAvailable as exc:
            raise LockTimeoutError(
                f"Timed out after {self.lock_timeout:g}s waiting for the {FILE_NAMES[target]} "
                f"row of namespace {self.namespace!r} (another writer holds it). Retry, or "
                "raise memory.lock_timeout."
            ) from exc
        return WriteResult(
            target=target,
            action=action,
            changed=result.changed,
            message=result.message,
            entry_count=len(final),
            usage=Usage(char_count(final), self._limits[target]),
        )

    # -- matching, budget, drift ------------------------------------------------------

    def _locate(
        self,
        row: _Row,
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
            raise NoMatchError(message, **self._recovery(row))
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
                message, matches=[preview(e) for e in distinct], **self._recovery(row)
            )
        index = matches[0]
        # An entry memstrata could not have written (too long, or holding a separator
        # line) is text merged by an outside edit of the row; rewriting it would drop
        # the merged part.
        reason = suspicious_entry(working[index], self._limits[row.target])
        if reason is not None:
            raise self._drift(row, reason)
        return index

    def _check_budget(self, row: _Row, after: list[str], message: str) -> None:
        # Never past the budget; a target already over it (outside edit, lowered
        # limit) may still be written when the write does not grow it.
        new_total = char_count(after)
        limit = self._limits[row.target]
        if new_total <= limit or new_total <= char_count(row.entries):
            return
        raise MemoryFullError(message, **self._recovery(row))

    def _add_overflow_message(self, row: _Row, text: str) -> str:
        limit = self._limits[row.target]
        current = char_count(row.entries)
        label = TARGET_LABELS[row.target]
        if len(text) > limit:
            return (
                f"This entry alone is {len(text):,} chars, longer than the whole "
                f"{limit:,}-char limit of {FILE_NAMES[row.target]}. Shorten it to the "
                "essential fact, then retry."
            )
        return (
            f"{label} at {current:,}/{limit:,} chars. Adding this entry ({len(text):,} "
            "chars) would exceed the limit. Consolidate now: use 'replace' to shorten or "
            "merge entries, or 'remove' stale ones (see current_entries), then retry — all "
            "in this turn."
        )

    def _recovery(self, row: _Row) -> dict[str, Any]:
        return {
            "current_entries": list(row.entries),
            "usage": str(Usage(char_count(row.entries), self._limits[row.target])),
        }

    def _drift(self, row: _Row, reason: str) -> DriftError:
        name = FILE_NAMES[row.target]
        limit = self._limits[row.target]
        # The transaction rolls back, so the row itself is the backup: nothing changed.
        remediation = (
            f"Fix the content of the curated_memory row (namespace {self.namespace!r}, "
            f"target {row.target!r}) so entries are separated by a line holding only '§' "
            "with no blank lines around it, Unix line endings, and every entry under "
            f"{limit:,} chars, then retry. If you lowered the character limit below an "
            "entry's length, raise it again or shorten that entry."
        )
        return DriftError(
            f"{name} of namespace {self.namespace!r} was edited outside memstrata ({reason}), "
            f"so it was not rewritten; the row is unchanged. {remediation}",
            drift_backup=None,
            remediation=remediation,
        )
