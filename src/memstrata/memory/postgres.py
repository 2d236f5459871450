"""L1 curated memory on PostgreSQL: ``MEMORY.md``/``USER.md`` semantics in table rows.

:class:`PostgresMemory` has the public API and the behaviour of
:class:`memstrata.memory.files.FileMemory` (limits, ``§``-delimited entries, add / replace /
remove by unique substring, an all-or-nothing batch, the injection scan on write and on
load, the frozen snapshot beside live entries, the same errors and messages), but each
target is one row of ``curated_memory`` keyed by ``(namespace, target)``, so agents on
several machines can share one agent's memory.

The entry rules, budgets, messages and the snapshot are those of
:class:`memstrata.memory.core.CuratedMemoryBase`, shared with ``FileMemory``; this module
only stores the text. The row's ``content`` holds exactly the text the file would hold,
so the pure functions of :mod:`memstrata.memory.format` parse and render it unchanged.

A write runs in one transaction: make sure the row exists (``INSERT ... ON CONFLICT DO
NOTHING``), lock it with ``SELECT ... FOR UPDATE`` (the row lock plays the part of the
lock file), re-read, mutate, ``UPDATE`` with ``version + 1``. Two writers on two
machines therefore queue on the row and the second one sees the first one's entry: no
update is lost. A waiting writer gives up after ``memory.lock_timeout`` seconds with
:class:`~memstrata.errors.LockTimeoutError`.

Every change is recorded in ``curated_memory_history`` in the same transaction
(:mod:`memstrata.memory.postgres_history`), with who made it, why and the exact text
before and after; :meth:`PostgresMemory.undo` puts back the text a change replaced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from memstrata.closing import Closing
from memstrata.config import Config
from memstrata.errors import ConfigError, DriftError, LockTimeoutError, StorageError
from memstrata.memory import postgres_history as memory_history
from memstrata.memory.args import check_target
from memstrata.memory.core import CuratedMemoryBase, Current, EntryChange, WriteResult
from memstrata.memory.format import FILE_NAMES, TARGETS, Target, parse_entries, serialize
from memstrata.memory.history import MemoryChange, undo_drift, undo_reason
from memstrata.memory.postgres_history import PostgresMemoryHistory
from memstrata.store.postgres.database import connect, unreachable
from memstrata.store.postgres.schema import migrate
from memstrata.store.postgres.store import validate_namespace

__all__ = ["PostgresMemory"]

logger = logging.getLogger(__name__)


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


class PostgresMemory(CuratedMemoryBase, Closing):
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
        actor: str = "api",
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
        self._configure(
            cfg,
            memory_char_limit=memory_char_limit,
            user_char_limit=user_char_limit,
            lock_timeout=lock_timeout,
            actor=actor,
        )
        # One direct connection first: a wrong DSN or a stopped server fails at once
        # with libpq's own reason (a pool would retry until its timeout), and the
        # schema is created or upgraded on it.
        with connect(dsn, autocommit=True) as first:
            migrate(first)
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
            raise unreachable(dsn, exc) from None
        self.history: PostgresMemoryHistory = PostgresMemoryHistory(self._conn, self.namespace)
        """The append-only audit history of the namespace's two rows."""
        self.load()

    @property
    def dsn_label(self) -> str:
        """Where the rows live, without credentials: ``host:port/dbname``."""
        return self._dsn_label

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Release the connections (idempotent)."""
        self._pool.close()

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

    # -- storage --------------------------------------------------------------------

    def _read_raw(self, target: Target) -> str | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s",
                (self.namespace, target),
            ).fetchone()
        return str(row[0]) if row is not None else None

    def _read_for_snapshot(self) -> tuple[dict[Target, str | None], dict[Target, str]]:
        # Both rows in one query; when the database cannot be read, both targets are.
        try:
            with self._conn() as conn:
                rows = conn.execute(
                    "SELECT target, content FROM curated_memory WHERE namespace = %s",
                    (self.namespace,),
                ).fetchall()
        except StorageError as exc:
            return {}, {target: str(exc) for target in TARGETS}
        found = {str(r[0]): str(r[1]) for r in rows}
        return {target: found.get(target) for target in TARGETS}, {}

    # -- the write path ---------------------------------------------------------------

    def _mutate(
        self,
        target: Target,
        action: str,
        change: Callable[[Current], EntryChange],
        *,
        drift_guard: bool,
    ) -> WriteResult:
        with self._locked(target) as (conn, before):
            raw = before.decode("utf-8") if before else None
            current = Current(target, raw, parse_entries(raw))
            result, final = self._apply(current, change, drift_guard=drift_guard)
            change_id: int | None = None
            if result.changed:
                text = serialize(final)
                self._store(conn, target, text)
                change_id = self._record(conn, target, action, before, text.encode("utf-8"))
                # Also logged, for operators who follow a server's log rather than the rows.
                who, why = self._author()
                logger.info(
                    "memory %s of %s in namespace %r by %s%s",
                    action,
                    target,
                    self.namespace,
                    who,
                    f" ({why})" if why else "",
                )
        return self._result(target, action, result, final, change_id)

    @contextmanager
    def _locked(self, target: Target) -> Iterator[tuple[psycopg.Connection[Any], bytes | None]]:
        """A transaction holding ``target``'s row lock, and the row's bytes (None: no row).

        The row is created empty when missing, so that it can be locked; two first writers
        race on the primary key and the database settles it.
        """
        key = (self.namespace, target)
        try:
            with self._conn() as conn, conn.transaction():
                # A negative lock_timeout means wait forever, as for the file lock.
                wait_ms = 0 if self.lock_timeout < 0 else max(1, int(self.lock_timeout * 1000))
                conn.execute(f"SET LOCAL lock_timeout = {wait_ms}")
                created = conn.execute(
                    "INSERT INTO curated_memory (namespace, target, content, version, "
                    "updated_at) VALUES (%s, %s, '', 0, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (*key, time.time()),
                ).fetchone()
                found = conn.execute(
                    "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s "
                    "FOR UPDATE",
                    key,
                ).fetchone()
                # The history tells a target never written (no row: a missing file) from
                # an emptied one, as the file backend tells a missing file from an empty one.
                if created is not None or found is None:
                    yield conn, None
                else:
                    yield conn, str(found[0] or "").encode("utf-8")
        except pg_errors.LockNotAvailable as exc:
            raise LockTimeoutError(
                f"Timed out after {self.lock_timeout:g}s waiting for the {FILE_NAMES[target]} "
                f"row of namespace {self.namespace!r} (another writer holds it). Retry, or "
                "raise memory.lock_timeout."
            ) from exc

    def _store(self, conn: psycopg.Connection[Any], target: Target, text: str) -> None:
        conn.execute(
            "UPDATE curated_memory SET content = %s, version = version + 1, "
            "updated_at = %s WHERE namespace = %s AND target = %s",
            (text, time.time(), self.namespace, target),
        )

    def _record(
        self,
        conn: psycopg.Connection[Any],
        target: Target,
        action: str,
        before: bytes | None,
        after: bytes | None,
        *,
        undoes: int | None = None,
    ) -> int:
        # In the write's own transaction: if the history row cannot be written, the
        # change is rolled back with it, so the history is never missing a change.
        who, why = self._author()
        return memory_history.record(
            conn,
            self.namespace,
            target=target,
            action=action,
            who=who,
            why=why,
            before=before,
            after=after,
            undoes=undoes,
        )

    # -- history and undo -------------------------------------------------------------

    def undo(self, change_id: int, *, force: bool = False) -> MemoryChange:
        """Put back the exact text change ``change_id`` replaced; return the undo's change.

        Refuses with :class:`DriftError` when the row changed since that change (its text
        differs from what the change wrote), unless ``force``. The undo is itself
        recorded (``action="undo"``), so it can be undone too. A change made to a target
        that had no row yet is undone by emptying the row (recorded as empty text, where
        the file backend records a removed file).
        """
        change = self.history.get(change_id)
        target = check_target(change.target)
        with self._locked(target) as (conn, current):
            # An empty row and no row are the same empty store: a row created empty by a
            # write that changed nothing does not make an undo look like a conflict.
            if (current or b"") != (change.after or b"") and not force:
                raise undo_drift(self._name(target), change, current)
            # A target that had no row before the change gets an empty row, not a deleted
            # one: a writer queued on the row lock would find no row to update and lose
            # its write. The history records what the row holds: empty text.
            restored = change.before or b""
            self._store(conn, target, restored.decode("utf-8"))
            with self.attributed(self._author()[0], undo_reason(change, force=force)):
                new_id = self._record(conn, target, "undo", current, restored, undoes=change.id)
        return self.history.get(new_id)

    def reset(self, target: Target) -> MemoryChange | None:
        """Empty ``target``; return the recorded change (None when it was already empty).

        There is no backup file: the history keeps the emptied text, and
        ``undo(change.id)`` brings it back.
        """
        target = check_target(target)
        with self._locked(target) as (conn, before):
            if before is None or not before.strip():
                return None
            self._store(conn, target, "")
            new_id = self._record(conn, target, "reset", before, b"")
        return self.history.get(new_id)

    def _name(self, target: Target) -> str:
        return f"{FILE_NAMES[target]} of namespace {self.namespace!r}"

    # -- drift ------------------------------------------------------------------------

    def _drift(self, current: Current, reason: str) -> DriftError:
        name = FILE_NAMES[current.target]
        limit = self._limits[current.target]
        # The transaction rolls back, so the row itself is the backup: nothing changed.
        remediation = (
            f"Fix the content of the curated_memory row (namespace {self.namespace!r}, "
            f"target {current.target!r}) so entries are separated by a line holding only '§' "
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
