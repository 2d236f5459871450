"""The local facts store: facts in one SQLite file (``$MEMSTRATA_HOME/facts.db``).

The rules (slots, supersession, history, the scanner, search and the recall gate) are
:class:`~memstrata.providers.facts.base.BaseFactStore`'s; this module holds the SQLite
primitives (:class:`SQLiteFactTransaction`) and the file's connection discipline.
Several processes may share the file: WAL, every write in ``BEGIN IMMEDIATE`` with a
bounded busy retry, and the unique partial indexes settle racing slot writers. The three
FTS5 indexes are kept by triggers (:mod:`memstrata.providers.facts.schema`).

Example::

    store = FactStore.open()                      # $MEMSTRATA_HOME/facts.db
    store.upsert_slot("timezone", "UTC+8")
    store.add("User prefers dark roast coffee", category="preference")
    [fact.content for fact in store.search("coffee")]

With ``store.dsn`` set, :func:`memstrata.providers.facts.open_facts` opens the facts of
the PostgreSQL tenant instead (:class:`~memstrata.providers.facts.postgres.PostgresFactStore`).
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from memstrata.config import ensure_home, memstrata_home
from memstrata.errors import DatabaseBusyError, StorageError
from memstrata.fileio import create_private_file, private_dir
from memstrata.providers.facts.backend import FactTransaction
from memstrata.providers.facts.base import BaseFactStore
from memstrata.providers.facts.contract import FACT_COLUMNS, FactChangeRow, FactRow, VectorRow
from memstrata.providers.facts.schema import FTS_TABLES, migrate
from memstrata.search.embedders import Embedder
from memstrata.store.sqlite.database import DURABILITY_PRAGMA, Durability, is_busy
from memstrata.store.sqlite.migrations import register_functions

if TYPE_CHECKING:
    from memstrata.query.compile import CompiledQuery, Index, Term

__all__ = ["FACTS_FILENAME", "FactStore", "SQLiteFactTransaction"]

FACTS_FILENAME: Final = "facts.db"
# Column weights of the word and trigram indexes (content, key, value): a slot's key and
# value are repeated in its content, so they count half to avoid scoring them twice.
_WEIGHTS: Final = ", 1.0, 0.5, 0.5"
# Ids per statement of an IN list (SQLite's default limit of host parameters is 999+).
_CHUNK: Final = 500


def _fact(row: sqlite3.Row) -> FactRow:
    return cast(FactRow, {c: row[c] for c in FACT_COLUMNS})


def _filters(
    *,
    category: str | None = None,
    subject: str | None = None,
    status: str | None = None,
    source: str | None = None,
) -> tuple[str, list[Any]]:
    """A ``WHERE`` clause over ``facts f`` and its parameters ("" when unfiltered)."""
    clauses: list[str] = []
    params: list[Any] = []
    pairs = (("category", category), ("subject", subject), ("status", status), ("source", source))
    for column, value in pairs:
        if value is not None:
            clauses.append(f"f.{column} = ?")
            params.append(value)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


class SQLiteFactTransaction(FactTransaction):
    """The primitives on the facts file's connection (inside the caller's transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _one(self, sql: str, params: Sequence[Any]) -> FactRow | None:
        row = self.conn.execute(sql, params).fetchone()
        return _fact(row) if row is not None else None

    def _all(self, sql: str, params: Sequence[Any]) -> list[FactRow]:
        return [_fact(r) for r in self.conn.execute(sql, params)]

    def get(self, fact_id: int) -> FactRow | None:
        return self._one("SELECT * FROM facts WHERE id = ?", (fact_id,))

    def live_slot(self, subject: str, key: str) -> FactRow | None:
        return self._one(
            "SELECT * FROM facts WHERE subject = ? AND key = ? AND status = 'live'",
            (subject, key),
        )

    def live_content(self, subject: str, content: str) -> FactRow | None:
        return self._one(
            "SELECT * FROM facts WHERE subject = ? AND content = ? AND key IS NULL "
            "AND status = 'live'",
            (subject, content),
        )

    def insert(self, values: Mapping[str, Any]) -> int:
        columns = [c for c in FACT_COLUMNS if c != "id"]
        cursor = self.conn.execute(
            f"INSERT INTO facts({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
            [values[c] for c in columns],
        )
        return int(cursor.lastrowid or 0)

    def set_status(self, fact_id: int, status: str, successor: int | None, at: float) -> None:
        # The fact_vectors_retired trigger drops the vectors of a fact leaving 'live'.
        self.conn.execute(
            "UPDATE facts SET status = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
            (status, successor, at, fact_id),
        )

    def set_successor(self, fact_id: int, successor: int) -> None:
        self.conn.execute("UPDATE facts SET superseded_by = ? WHERE id = ?", (successor, fact_id))

    def purge(self, fact_id: int) -> None:
        # The delete triggers take the text out of the indexes and drop the vectors.
        self.conn.execute(
            "UPDATE facts SET superseded_by = NULL WHERE superseded_by = ?", (fact_id,)
        )
        self.conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
        self.conn.execute("DELETE FROM fact_history WHERE fact_id = ?", (fact_id,))

    def add_history(
        self,
        fact_id: int,
        action: str,
        before: str | None,
        after: str | None,
        origin: str,
        session_id: str | None,
        at: float,
    ) -> None:
        self.conn.execute(
            "INSERT INTO fact_history(fact_id, action, before, after, origin, session_id, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (fact_id, action, before, after, origin, session_id, at),
        )

    def mark_recalled(self, ids: Sequence[int], at: float) -> None:
        self.conn.executemany(
            "UPDATE facts SET last_recalled_at = ?, recall_count = recall_count + 1 WHERE id = ?",
            [(at, i) for i in ids],
        )

    def history(self, fact_id: int | None, limit: int) -> list[FactChangeRow]:
        sql = "SELECT * FROM fact_history"
        params: list[Any] = []
        if fact_id is not None:
            sql += " WHERE fact_id = ?"
            params.append(fact_id)
        rows = self.conn.execute(sql + " ORDER BY id DESC LIMIT ?", [*params, limit])
        return [cast(FactChangeRow, dict(r)) for r in rows]

    def rows(
        self,
        *,
        category: str | None,
        subject: str | None,
        status: str | None,
        source: str | None,
        limit: int,
        offset: int,
    ) -> list[FactRow]:
        where, params = _filters(category=category, subject=subject, status=status, source=source)
        return self._all(
            f"SELECT * FROM facts f {where} ORDER BY f.updated_at DESC, f.id DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )

    def count(self, *, category: str | None, status: str | None) -> int:
        where, params = _filters(category=category, status=status)
        return int(self.conn.execute(f"SELECT count(*) FROM facts f {where}", params).fetchone()[0])

    def slots(self, subject: str, categories: Sequence[str]) -> list[FactRow]:
        marks = ", ".join("?" for _ in categories)
        return self._all(
            f"SELECT * FROM facts WHERE status = 'live' AND key IS NOT NULL AND subject = ? "
            f"AND category IN ({marks}) ORDER BY key",
            [subject, *categories],
        )

    def containing(
        self,
        text: str,
        *,
        source: str | None = None,
        target: str | None = None,
        fold_case: bool = False,
        limit: int | None = None,
    ) -> list[FactRow]:
        column = "lower(content)" if fold_case else "content"
        clauses = ["status = 'live'", f"instr({column}, ?) > 0"]
        params: list[Any] = [text]
        if source is not None:
            clauses.append("source = ?")
            params.append(source)
        if target is not None:
            clauses.append("target = ?")
            params.append(target)
        tail = ""
        if limit is not None:
            tail = " LIMIT ?"
            params.append(limit)
        return self._all(
            f"SELECT * FROM facts WHERE {' AND '.join(clauses)} "
            f"ORDER BY updated_at DESC, id DESC{tail}",
            params,
        )

    def live_rows(
        self, ids: Sequence[int], *, category: str | None, subject: str | None
    ) -> dict[int, FactRow]:
        where, params = _filters(category=category, subject=subject, status="live")
        out: dict[int, FactRow] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            marks = ", ".join("?" for _ in chunk)
            for row in self._all(
                f"SELECT * FROM facts f {where} AND f.id IN ({marks})", [*params, *chunk]
            ):
                out[int(row["id"])] = row
        return out

    def live_subjects(self) -> set[str]:
        return {
            str(r[0])
            for r in self.conn.execute("SELECT DISTINCT subject FROM facts WHERE status = 'live'")
        }

    def keyword_scores(
        self,
        compiled: CompiledQuery,
        *,
        indexes: Sequence[Index],
        category: str | None,
        subject: str | None,
        limit: int,
    ) -> tuple[dict[int, float], dict[int, FactRow]]:
        where, params = _filters(category=category, subject=subject, status="live")
        scores: dict[int, float] = {}
        rows: dict[int, FactRow] = {}
        for index in indexes:
            expression = compiled.match.get(index)
            if expression is None:
                continue
            table = FTS_TABLES[index]
            weights = "" if index == "cjk" else _WEIGHTS
            found = self.conn.execute(
                f"SELECT f.*, bm25({table}{weights}) AS score_ FROM {table} "
                f"CROSS JOIN facts f ON f.id = {table}.rowid {where} AND {table} MATCH ? "
                "ORDER BY score_ LIMIT ?",
                [*params, expression, limit],
            ).fetchall()
            # FTS5's BM25 is negative, best lowest; summed over the indexes (each holds
            # its own terms: a term counts by its rarity, whichever index found it).
            for r in found:
                fact_id = int(r["id"])
                scores[fact_id] = scores.get(fact_id, 0.0) - min(float(r["score_"]), 0.0)
                rows[fact_id] = _fact(r)
        return scores, rows

    def term_ids(self, index: Index, expression: str, term: Term) -> set[int]:
        table = FTS_TABLES[index]
        return {
            int(r[0])
            for r in self.conn.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expression,)
            )
        }

    def live_held(self, probes: Sequence[tuple[Index, str, Term]]) -> list[bool]:
        # One indexed lookup each, stopped at the first live fact (the FTS tables are
        # external content: their rowid is the fact's id).
        held = []
        for index, expression, _ in probes:
            table = FTS_TABLES[index]
            row = self.conn.execute(
                f"SELECT 1 FROM {table} CROSS JOIN facts f ON f.id = {table}.rowid "
                f"WHERE {table} MATCH ? AND f.status = 'live' LIMIT 1",
                (expression,),
            ).fetchone()
            held.append(row is not None)
        return held

    def retired_ids(self) -> set[int]:
        return {int(r[0]) for r in self.conn.execute("SELECT id FROM facts WHERE status <> 'live'")}

    def live_count(self) -> int:
        return int(
            self.conn.execute("SELECT count(*) FROM facts WHERE status = 'live'").fetchone()[0]
        )

    def has_vectors(self, model: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM fact_vectors WHERE model = ? LIMIT 1", (model,)
        ).fetchone()
        return row is not None

    def vectors(self, model: str, scan: int) -> list[tuple[int, bytes]]:
        return [
            (int(r[0]), bytes(r[1]))
            for r in self.conn.execute(
                "SELECT fact_id, vector FROM fact_vectors WHERE model = ? "
                "ORDER BY fact_id DESC LIMIT ?",
                (model, max(0, scan)),
            )
        ]

    def pending_count(self, model: str) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM facts f WHERE f.status = 'live' AND NOT EXISTS "
            "(SELECT 1 FROM fact_vectors v WHERE v.model = ? AND v.fact_id = f.id)",
            (model,),
        ).fetchone()
        return int(row[0])

    def pending_batch(self, model: str, after: int, size: int) -> list[tuple[int, str]]:
        return [
            (int(r[0]), str(r[1]))
            for r in self.conn.execute(
                "SELECT f.id, f.content FROM facts f WHERE f.status = 'live' AND f.id > ? "
                "AND NOT EXISTS (SELECT 1 FROM fact_vectors v WHERE v.model = ? "
                "AND v.fact_id = f.id) ORDER BY f.id LIMIT ?",
                (after, model, size),
            )
        ]

    def put_vectors(
        self, model: str, dims: int, items: Sequence[tuple[int, bytes]], at: float
    ) -> int:
        if not items:
            return 0
        live = set(self.live_rows([fid for fid, _ in items], category=None, subject=None))
        rows = [(model, fid, dims, blob, at) for fid, blob in items if fid in live]
        self.conn.executemany(
            "INSERT OR REPLACE INTO fact_vectors(model, fact_id, dims, vector, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        return len(rows)

    def dump_facts(self) -> list[FactRow]:
        return self._all("SELECT * FROM facts ORDER BY id", ())

    def dump_history(self) -> list[FactChangeRow]:
        return [
            cast(FactChangeRow, dict(r))
            for r in self.conn.execute("SELECT * FROM fact_history ORDER BY id")
        ]

    def dump_vectors(self) -> list[VectorRow]:
        return [
            cast(VectorRow, {**dict(r), "vector": bytes(r["vector"])})
            for r in self.conn.execute("SELECT * FROM fact_vectors ORDER BY model, fact_id")
        ]

    def load_history(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self.conn.executemany(
            "INSERT INTO fact_history(fact_id, action, before, after, origin, session_id, at) "
            "VALUES (:fact_id, :action, :before, :after, :origin, :session_id, :at)",
            [dict(r) for r in rows],
        )

    def load_vectors(self, rows: Iterable[VectorRow]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO fact_vectors(model, fact_id, dims, vector, created_at) "
            "VALUES (:model, :fact_id, :dims, :vector, :created_at)",
            [dict(r) for r in rows],
        )


# -- the store ------------------------------------------------------------------------------


class FactStore(BaseFactStore):
    """Facts in one SQLite file, safe to share between threads and processes.

    ``durability`` is "normal" (WAL + ``synchronous=NORMAL``) or "full";
    ``busy_timeout_ms`` is how long a writer waits for another process before retrying.
    ``embedder`` (optional, also settable later as ``store.embedder``) turns on hybrid
    recall: searches fuse its cosine similarity with the keywords for the facts
    :meth:`index_vectors` has embedded (see :mod:`memstrata.providers.facts.vectors`).
    """

    def __init__(
        self,
        path: Path,
        *,
        durability: Durability = "normal",
        busy_timeout_ms: int = 5000,
        embedder: Embedder | None = None,
    ) -> None:
        if durability not in DURABILITY_PRAGMA:
            raise StorageError(f"Unknown durability {durability!r}: use 'normal' or 'full'.")
        self.path = Path(path)
        self.busy_timeout_ms = max(0, int(busy_timeout_ms))
        self._set_embedder(embedder)
        # One connection serves every thread of the process, one at a time: the
        # provider's hooks run on a prefetch thread, the manager's worker and the
        # caller's thread, and facts are small enough that a lock costs nothing.
        self._lock = threading.RLock()
        try:
            if str(self.path) != ":memory:":
                # Facts hold what the user said: private like the session store, and
                # created 0600 first because SQLite gives -wal/-shm the file's mode.
                private_dir(self.path.parent)
                create_private_file(self.path)
            self._conn = sqlite3.connect(
                str(self.path),
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(
                f"Cannot open the facts database {self.path}: {exc}. Check that the folder "
                "exists and is writable (MEMSTRATA_HOME)."
            ) from exc
        self._conn.row_factory = sqlite3.Row
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            self._conn.execute(f"PRAGMA synchronous = {DURABILITY_PRAGMA[durability]}")
            register_functions(self._conn)
            self._retry(lambda: self._conn.execute("PRAGMA journal_mode = WAL"))
            self._retry(lambda: migrate(self._conn))
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if is_busy(exc):
                raise self._busy() from exc
            raise StorageError(
                f"{self.path} cannot be used as a facts database ({exc}). If it is damaged, "
                "move it aside (a new one is created) or restore a backup."
            ) from exc
        except BaseException:
            self._conn.close()
            raise
        self._closed = False

    @classmethod
    def open(cls, home: Path | None = None, **kwargs: Any) -> FactStore:
        """The store at ``<home>/facts.db`` (home: ``$MEMSTRATA_HOME``), created if needed."""
        folder = ensure_home(home if home is not None else memstrata_home())
        return cls(folder / FACTS_FILENAME, **kwargs)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __enter__(self) -> FactStore:
        return self

    @property
    def location(self) -> str:
        """The facts file (absolute)."""
        return str(self.path.absolute())

    # -- transactions -------------------------------------------------------------------

    def _busy(self) -> DatabaseBusyError:
        return DatabaseBusyError(
            f"The facts database {self.path} stayed locked by another process for over "
            f"{self.busy_timeout_ms / 1000:.1f}s. Retry, or raise the wait with "
            "`memstrata config set store.busy_timeout_ms 20000`."
        )

    def _retry(self, fn: Any) -> Any:
        # SQLite's own busy wait runs first; a few jittered retries cover a writer that
        # held the lock just past it (the same discipline as the session store).
        for attempt in range(4):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or attempt == 3:
                    raise
                time.sleep(random.uniform(0.02, 0.15))
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StorageError(f"The facts store {self.path} is closed: open a new one.")
            yield self._conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._read() as conn:
            try:
                self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            except sqlite3.OperationalError as exc:
                if is_busy(exc):
                    raise self._busy() from exc
                raise
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise StorageError(
                    f"Writing to {self.path} failed and was rolled back ({exc}). Check free "
                    "disk space and that the file is writable, then retry."
                ) from exc

    @contextlib.contextmanager
    def _transaction(self, *, write: bool = False) -> Iterator[FactTransaction]:
        with self._write() if write else self._read() as conn:
            yield SQLiteFactTransaction(conn)


if TYPE_CHECKING:
    from memstrata.providers.facts.contract import FactStoreContract

    # mypy proves here that the backend keeps the whole public contract.
    _keeps_contract: type[FactStoreContract] = FactStore
