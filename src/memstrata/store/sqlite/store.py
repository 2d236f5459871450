"""L2: the session store — every session and message, searchable, in one SQLite file.

The public API and its rules are :class:`~memstrata.store.base.BaseSessionStore`'s; this
backend adds the connections (:mod:`memstrata.store.sqlite.database`: WAL, one writer,
pooled readers, busy retries), its primitives (:mod:`memstrata.store.sqlite.transaction`)
and the maintenance of one file and its FTS5 indexes (:mod:`memstrata.store.sqlite.index`).

    with SessionStore() as store:
        store.create_session("s1", source="cli")
        store.append_messages("s1", [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": "hello"}])
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from memstrata.config import Config, ensure_home
from memstrata.errors import IndexError_
from memstrata.store.base import BaseSessionStore
from memstrata.store.sqlite import index as store_index
from memstrata.store.sqlite import migrations
from memstrata.store.sqlite.database import Database, Durability
from memstrata.store.sqlite.sessions import VECTOR_TABLE, vector_key
from memstrata.store.sqlite.transaction import SQLiteTransaction

DB_FILENAME = "state.db"


class SessionStore(BaseSessionStore):
    """The L2 session store on SQLite (``$MEMSTRATA_HOME/state.db`` by default).

    ``durability`` overrides ``store.durability`` ("normal": WAL with
    ``synchronous=NORMAL``, survives any process crash; "full": also survives power loss).
    ``readonly`` opens the file with ``mode=ro``. ``verify_indexes`` runs the cheap index
    check on open and raises :class:`~memstrata.errors.IndexError_` naming the fix.
    Safe to share between threads; several processes may open the same file.
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        config: Config | None = None,
        durability: Literal["normal", "full"] | None = None,
        readonly: bool = False,
        verify_indexes: bool = True,
    ) -> None:
        cfg = config if config is not None else Config.load()
        if path is None:
            path = ensure_home(cfg.home) / DB_FILENAME
        elif not readonly and str(path) != ":memory:":
            # SQLite creates the file but not its folder; a first run in a fresh home
            # (`memstrata search` before anything was written) must not fail on that.
            ensure_home(Path(path).parent)
        self.typos = bool(cfg.get("search.typos"))
        chosen = durability if durability is not None else cfg.get("store.durability")
        self._db = Database(
            Path(path),
            durability=cast(Durability, chosen),
            busy_timeout_ms=int(cfg.get("store.busy_timeout_ms")),
            readonly=readonly,
        )
        if verify_indexes:
            with self._db.read() as conn:
                # One snapshot for all the check's statements: otherwise a writer that
                # commits between them makes a healthy index look inconsistent.
                conn.execute("BEGIN")
                problems = store_index.quick_check(conn)
            if problems:
                self._db.close()
                raise IndexError_(
                    f"The full-text index of {path} is inconsistent: {'; '.join(problems)}. "
                    + store_index.REINDEX_HINT
                )

    # -- lifecycle and connections ------------------------------------------------

    @property
    def path(self) -> Path:
        """The database file."""
        return self._db.path

    @property
    def durability(self) -> Durability:
        """The durability mode in effect ("normal" or "full")."""
        return self._db.durability

    def close(self) -> None:
        """Close every connection (idempotent)."""
        self._db.close()

    def read_conn(self) -> AbstractContextManager[sqlite3.Connection]:
        """Lend a reader connection (rows are ``sqlite3.Row``, SQL functions registered)."""
        return self._db.read()

    def write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: commit on return, roll back on error."""
        return self._db.write()

    @contextmanager
    def _transaction(
        self, *, write: bool = False, snapshot: bool = False
    ) -> Iterator[SQLiteTransaction]:
        if write:
            with self._db.write() as conn:
                yield SQLiteTransaction(conn)
            return
        with self._db.read() as conn:
            if snapshot:
                # One snapshot for every statement: a writer committing between them
                # would otherwise show a walk or a listing half old, half new.
                conn.execute("BEGIN")
            yield SQLiteTransaction(conn)

    # -- maintenance ---------------------------------------------------------------------

    def check_indexes(self) -> list[str]:
        """Full index check (FTS5 integrity-check against the messages); [] when healthy."""
        if self._db.readonly:
            with self._db.read() as conn:
                return store_index.quick_check(conn)
        with self._db.write() as conn:
            return store_index.full_check(conn)

    def reindex(self, progress: store_index.Progress | None = None) -> dict[str, int]:
        """Recreate missing index objects and rebuild the three indexes in one transaction.

        ``progress(stage, done, total)`` is called as each index is rebuilt. Returns the
        rows each index holds.
        """
        with self._db.write() as conn:
            return store_index.reindex(conn, progress)

    def optimize(self) -> None:
        """Merge index segments, refresh planner statistics, truncate the WAL."""
        with self._db.write() as conn:
            store_index.optimize(conn)
        with self._db.read() as conn:
            conn.execute("PRAGMA optimize")
        self._db.checkpoint()

    @contextmanager
    def secure_deletes(self) -> Iterator[None]:
        """While inside, deleted content is overwritten with zeros (``PRAGMA secure_delete``).

        Without it SQLite only marks freed space as free, and the deleted text stays in
        the file until the space is reused. Together with :meth:`optimize` (which merges
        away full-text segments still holding deleted terms and truncates the WAL) this
        makes deleted text leave ``state.db``; :func:`memstrata.ops.forget.forget` uses both.
        """
        with self._db.write() as conn:
            conn.execute("PRAGMA secure_delete = ON")
        try:
            yield
        finally:
            with self._db.write() as conn:
                conn.execute("PRAGMA secure_delete = OFF")

    def index_counts(self) -> dict[str, int]:
        """Rows held by each full-text index, the vector table (if any) and the summary cache."""
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot across the counts
            counts = {
                table: int(conn.execute(f"SELECT count(*) FROM {table}_docsize").fetchone()[0])
                for table in (*migrations.EXTERNAL_CONTENT_TABLES, migrations.CJK_TABLE)
            }
            if vector_key(conn) is not None:
                table = VECTOR_TABLE
                counts[table] = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            row = conn.execute("SELECT count(*) FROM summary_cache").fetchone()
            counts["summary_cache"] = int(row[0])
            return counts

    def checkpoint(self) -> None:
        """Copy the WAL into the database file and truncate it (best effort under readers)."""
        self._db.checkpoint()

    def analyze(self) -> None:
        """Refresh the query planner's statistics on every table and index (``ANALYZE``)."""
        with self._db.write() as conn:
            conn.execute("ANALYZE")

    def vacuum(self) -> None:
        """Rewrite the file to give freed pages back to the file system."""
        self._db.vacuum()

    def integrity_check(self) -> dict[str, Any]:
        """``PRAGMA integrity_check`` plus the full index check.

        Returns ``{ok, sqlite, indexes, fix}``; ``fix`` says what to run when not ok.
        """
        with self._db.read() as conn:
            lines = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        return store_index.integrity_report(lines, self.check_indexes())

    def stats(self) -> dict[str, Any]:
        """Counts and sizes for `memstrata sessions stats`."""
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot across the counts
            counts = store_index.counts(conn)
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        wal = Path(f"{self.path}-wal")
        return {
            "path": str(self.path),
            "durability": self.durability,
            "journal_mode": self._db.journal_mode,
            **counts,
            "db_bytes": os.path.getsize(self.path) if self.path.exists() else 0,
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            # Pages left free by deletions; `optimize` (VACUUM) returns them to the disk.
            "pages": pages,
            "free_pages": free,
        }


if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

    # mypy proves here that the backend keeps the whole public contract.
    _keeps_contract: type[SessionStoreContract] = SessionStore
