"""The local facts store: categorised facts in SQLite, key/value slots, full-text recall.

A fact is one short declarative sentence with a category:

* ``identity`` - who the user is (name, job, where they live, timezone);
* ``preference`` - how they like things done;
* ``episodic`` - something that happened or was decided, recalled on demand;
* ``note`` - the agent's own conventions and environment notes.

A fact may fill a **slot**: a ``key`` and ``value`` under a ``subject`` (``"user"`` by
default, ``"agent"`` for the agent's own notes), e.g. ``timezone = UTC+8``. A subject has
one live value per key: writing a new value supersedes the old row, which stays in the
table (``status='superseded'``, ``superseded_by`` pointing at its successor) and in the
history. Nothing is ever updated in place: every change is a new row or a status change,
and ``fact_history`` records each one with its before and after values, the time, who
made it and in which session.

Writes are cheap (SPEC decision 3): no LLM, no embedding; the text is scanned for prompt
injection (``strict`` scope, facts are injected into context) and indexed by triggers.
Several processes may share the file: WAL, every write in ``BEGIN IMMEDIATE`` with a
bounded busy retry, and the unique partial indexes settle racing slot writers.

Example::

    store = FactStore.open()                      # $MEMSTRATA_HOME/facts.db
    store.upsert_slot("timezone", "UTC+8")
    store.add("User prefers dark roast coffee", category="preference")
    [fact.content for fact in store.search("coffee")]
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from memstrata.config import ensure_home, memstrata_home
from memstrata.errors import (
    AmbiguousMatchError,
    ConfigError,
    DatabaseBusyError,
    InvalidMemoryArgument,
    MemstrataError,
    NoMatchError,
    StorageError,
)
from memstrata.fileio import create_private_file, private_dir
from memstrata.providers.facts import vectors as facts_vectors
from memstrata.providers.facts.args import (
    check_category,
    check_source,
    check_subject,
    clean_fact_text,
    clean_key,
    clean_value,
    scan_fact,
)
from memstrata.providers.facts.recall import (
    compile_search,
    filters,
    live_rows,
    rank,
    recall_scores,
    rows_by_score,
    search_scores,
)
from memstrata.providers.facts.schema import CATEGORIES, Fact, FactChange, migrate
from memstrata.search.embedders import Embedder
from memstrata.store.sqlite.database import DURABILITY_PRAGMA, Durability, is_busy
from memstrata.store.sqlite.migrations import register_functions
from memstrata.store.vectors import calibrated

logger = logging.getLogger(__name__)

FACTS_FILENAME: Final = "facts.db"


def _now() -> float:
    return time.time()


# -- the store ------------------------------------------------------------------------------


class FactStore:
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
        self.embedder = facts_vectors.check_embedder(embedder) if embedder is not None else None
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

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    @staticmethod
    def _history(
        conn: sqlite3.Connection,
        fact_id: int,
        action: str,
        before: Fact | None,
        after: Fact | None,
        origin: str,
        session_id: str | None,
    ) -> None:
        conn.execute(
            "INSERT INTO fact_history(fact_id, action, before, after, origin, session_id, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                fact_id,
                action,
                json.dumps(before._state(), ensure_ascii=False) if before else None,
                json.dumps(after._state(), ensure_ascii=False) if after else None,
                origin,
                session_id,
                _now(),
            ),
        )

    @staticmethod
    def _get(conn: sqlite3.Connection, fact_id: int) -> Fact | None:
        row = conn.execute("SELECT * FROM facts WHERE id = ?", (fact_id,)).fetchone()
        return Fact.from_row(row) if row else None

    # -- writes -------------------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        category: str = "episodic",
        subject: str = "user",
        key: str | None = None,
        value: str | None = None,
        source: str = "api",
        target: str | None = None,
        session_id: str | None = None,
        confidence: float = 1.0,
        origin: str | None = None,
        supersedes: Sequence[int] = (),
    ) -> Fact:
        """Store a fact and return it (the existing one if it is already stored).

        With ``key`` and ``value`` it fills that slot of ``subject``, superseding the
        slot's previous value. ``supersedes`` names other live facts this one replaces.
        ``origin`` is what history records as the author (default: ``source``).
        Raises InvalidMemoryArgument for bad arguments, ThreatDetectedError when the
        scanner matches.
        """
        text = clean_fact_text(content)
        category = check_category(category)
        subject = check_subject(subject)
        source = check_source(source)
        if (key is None) != (value is None):
            raise InvalidMemoryArgument(
                "key and value go together: send both to fill a slot (e.g. key='timezone', "
                "value='UTC+8'), or neither for a plain fact."
            )
        slot_key = clean_key(key) if key is not None else None
        slot_value = clean_value(value) if value is not None else None
        if not 0.0 <= float(confidence) <= 1.0:
            raise InvalidMemoryArgument(f"confidence must be between 0 and 1, got {confidence}.")
        scan_fact(text, slot_key, slot_value)
        author = origin or source
        with self._write() as conn:
            if slot_key is not None:
                row = conn.execute(
                    "SELECT * FROM facts WHERE subject = ? AND key = ? AND status = 'live'",
                    (subject, slot_key),
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT * FROM facts WHERE subject = ? AND content = ? AND key IS NULL "
                    "AND status = 'live'",
                    (subject, text),
                ).fetchone()
            replaced = [int(i) for i in supersedes]
            if row is not None:
                current = Fact.from_row(row)
                if current.content == text and current.value == slot_value:
                    # Already known: the write is idempotent, only the others it names go.
                    self._retire(conn, replaced, current.id, author, session_id, "supersede")
                    return self._get(conn, current.id) or current
                replaced.append(current.id)
            olds = self._retire(conn, replaced, None, author, session_id, "supersede")
            now = _now()
            cursor = conn.execute(
                "INSERT INTO facts(content, category, subject, key, value, source, target, "
                "session_id, confidence, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    text,
                    category,
                    subject,
                    slot_key,
                    slot_value,
                    source,
                    target,
                    session_id,
                    float(confidence),
                    now,
                    now,
                ),
            )
            new_id = int(cursor.lastrowid or 0)
            for old in olds:
                conn.execute("UPDATE facts SET superseded_by = ? WHERE id = ?", (new_id, old.id))
                after = self._get(conn, old.id)
                self._history(conn, old.id, "supersede", old, after, author, session_id)
            fact = self._get(conn, new_id)
            assert fact is not None
            self._history(conn, new_id, "add", None, fact, author, session_id)
            return fact

    def _retire(
        self,
        conn: sqlite3.Connection,
        ids: Iterable[int],
        successor: int | None,
        origin: str,
        session_id: str | None,
        action: str,
    ) -> list[Fact]:
        """Take live facts out of service (status change first, so a slot frees up)."""
        status = "deleted" if action == "delete" else "superseded"
        retired: list[Fact] = []
        for fact_id in dict.fromkeys(ids):
            old = self._get(conn, fact_id)
            if old is None or old.status != "live" or fact_id == successor:
                continue
            conn.execute(
                "UPDATE facts SET status = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
                (status, successor, _now(), fact_id),
            )
            retired.append(old)
            if successor is not None or action == "delete":
                after = self._get(conn, fact_id)
                self._history(conn, fact_id, action, old, after, origin, session_id)
        return retired

    def upsert_slot(
        self,
        key: str,
        value: str,
        *,
        subject: str = "user",
        category: str = "identity",
        content: str | None = None,
        source: str = "api",
        session_id: str | None = None,
        origin: str | None = None,
    ) -> Fact:
        """Set ``subject``'s slot ``key`` to ``value``; the previous value is superseded.

        ``content`` defaults to ``"<key>: <value>"``. Setting the value a slot already
        holds changes nothing and returns the live fact.
        """
        canonical = clean_key(key)
        if content is None:
            # Without new wording, the value alone decides: the same value keeps the fact
            # (whatever sentence holds it) instead of superseding it with "key: value".
            same = [
                f for f in self.slots(subject=subject, categories=CATEGORIES) if f.key == canonical
            ]
            if same and same[0].value == " ".join(str(value).split()):
                return same[0]
        text = content if content is not None else f"{canonical.replace('_', ' ')}: {value}"
        return self.add(
            text,
            category=category,
            subject=subject,
            key=canonical,
            value=value,
            source=source,
            session_id=session_id,
            origin=origin,
        )

    def replace(
        self,
        fact_id: int,
        content: str,
        *,
        category: str | None = None,
        key: str | None = None,
        value: str | None = None,
        source: str | None = None,
        session_id: str | None = None,
        origin: str = "api",
    ) -> Fact:
        """Supersede live fact ``fact_id`` with new text; return the new fact.

        The new fact keeps the old one's subject, source, target and (unless given)
        category. It fills a slot only if ``key``/``value`` are given.
        """
        old = self.get(fact_id)
        if old.status != "live":
            raise NoMatchError(
                f"Fact #{fact_id} is {old.status}, not live; search for the current fact "
                "and replace that one."
            )
        return self.add(
            content,
            category=category or old.category,
            subject=old.subject,
            key=key,
            value=value,
            source=source or old.source,
            target=old.target,
            session_id=session_id,
            origin=origin,
            supersedes=[fact_id],
        )

    def forget(
        self,
        fact_id: int,
        *,
        origin: str = "api",
        session_id: str | None = None,
        purge: bool = False,
    ) -> Fact:
        """Delete fact ``fact_id``; return it as it was.

        A plain forget marks it deleted (it leaves recall, stays in history). ``purge``
        removes the row, its index entries and the text in its history, leaving a
        ``purge`` record without content: for things that must not be kept at all.
        """
        with self._write() as conn:
            old = self._get(conn, fact_id)
            if old is None:
                raise NoMatchError(
                    f"No fact #{fact_id}. Find the id with facts_search (or FactStore.search)."
                )
            if purge:
                conn.execute(
                    "UPDATE facts SET superseded_by = NULL WHERE superseded_by = ?", (fact_id,)
                )
                conn.execute("DELETE FROM facts WHERE id = ?", (fact_id,))
                conn.execute("DELETE FROM fact_history WHERE fact_id = ?", (fact_id,))
                self._history(conn, fact_id, "purge", None, None, origin, session_id)
                return old
            if old.status != "live":
                raise NoMatchError(
                    f"Fact #{fact_id} is already {old.status}; nothing to forget "
                    "(pass purge=True to erase its text as well)."
                )
            self._retire(conn, [fact_id], None, origin, session_id, "delete")
            return old

    def mark_recalled(self, ids: Iterable[int], at: float | None = None) -> None:
        """Count a recall of each fact (usage statistics for a curator; no history row)."""
        unique = list(dict.fromkeys(int(i) for i in ids))
        if not unique:
            return
        with self._write() as conn:
            conn.executemany(
                "UPDATE facts SET last_recalled_at = ?, recall_count = recall_count + 1 "
                "WHERE id = ?",
                [(at or _now(), i) for i in unique],
            )

    # -- reads --------------------------------------------------------------------------

    def get(self, fact_id: int) -> Fact:
        """The fact with this id, whatever its status; NoMatchError if there is none."""
        with self._read() as conn:
            fact = self._get(conn, int(fact_id))
        if fact is None:
            raise NoMatchError(
                f"No fact #{fact_id}. Find the id with facts_search (or FactStore.search)."
            )
        return fact

    def list(
        self,
        *,
        category: str | None = None,
        subject: str | None = None,
        status: str | None = "live",
        source: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Fact]:
        """Facts newest first, filtered by category, subject, status and source (None: any)."""
        where, params = filters(category=category, subject=subject, status=status, source=source)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT * FROM facts f {where} ORDER BY f.updated_at DESC, f.id DESC "
                "LIMIT ? OFFSET ?",
                [*params, max(0, int(limit)), max(0, int(offset))],
            ).fetchall()
        return [Fact.from_row(r) for r in rows]

    def count(self, *, category: str | None = None, status: str | None = "live") -> int:
        """How many facts match the filters."""
        where, params = filters(category=category, status=status)
        with self._read() as conn:
            return int(conn.execute(f"SELECT count(*) FROM facts f {where}", params).fetchone()[0])

    def slots(
        self, *, subject: str = "user", categories: Sequence[str] = ("identity", "preference")
    ) -> builtins.list[Fact]:
        """The live slot facts of ``subject`` in ``categories``, by key."""
        marks = ", ".join("?" for _ in categories)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT * FROM facts WHERE status = 'live' AND key IS NOT NULL AND subject = ? "
                f"AND category IN ({marks}) ORDER BY key",
                [subject, *categories],
            ).fetchall()
        return [Fact.from_row(r) for r in rows]

    def find_text(
        self, text: str, *, source: str | None = None, target: str | None = None
    ) -> builtins.list[Fact]:
        """Live facts whose content contains ``text`` (case-sensitive), newest first."""
        clauses = ["status = 'live'", "instr(content, ?) > 0"]
        params: list[Any] = [" ".join(text.split())]
        if source is not None:
            clauses.append("source = ?")
            params.append(source)
        if target is not None:
            clauses.append("target = ?")
            params.append(target)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT * FROM facts WHERE {' AND '.join(clauses)} "
                "ORDER BY updated_at DESC, id DESC",
                params,
            ).fetchall()
        return [Fact.from_row(r) for r in rows]

    def find_one(self, text: str) -> Fact:
        """The one live fact whose content contains ``text`` (case-insensitive).

        NoMatchError when none does, AmbiguousMatchError (listing them) when several do.
        """
        needle = " ".join(str(text).split()).lower()
        if not needle:
            raise InvalidMemoryArgument("The text to find is empty: send an id or some words.")
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM facts WHERE status = 'live' AND instr(lower(content), ?) > 0 "
                "ORDER BY updated_at DESC, id DESC LIMIT 11",
                (needle,),
            ).fetchall()
        found = [Fact.from_row(r) for r in rows]
        if not found:
            raise NoMatchError(f"No live fact contains {text!r}. Search with facts_search first.")
        if len(found) > 1:
            listing = "; ".join(f"#{f.id} {f.content[:60]}" for f in found[:10])
            raise AmbiguousMatchError(
                f"{len(found)}{'+' if len(found) > 10 else ''} facts contain {text!r}: "
                f"{listing}. Send the id of the one you mean.",
                matches=[{"id": f.id, "content": f.content} for f in found[:10]],
            )
        return found[0]

    def history(self, fact_id: int | None = None, *, limit: int = 50) -> builtins.list[FactChange]:
        """Changes newest first: of one fact, or of the whole store."""
        sql = "SELECT * FROM fact_history"
        params: list[Any] = []
        if fact_id is not None:
            sql += " WHERE fact_id = ?"
            params.append(int(fact_id))
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(max(0, int(limit)))
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [
            FactChange(
                id=r["id"],
                fact_id=r["fact_id"],
                action=r["action"],
                before=json.loads(r["before"]) if r["before"] else None,
                after=json.loads(r["after"]) if r["after"] else None,
                origin=r["origin"],
                session_id=r["session_id"],
                at=r["at"],
            )
            for r in rows
        ]

    # -- search -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        category: str | None = None,
        subject: str | None = None,
        limit: int = 10,
    ) -> builtins.list[Fact]:
        """Live facts matching ``query``, best first (``score`` set).

        The query language is the session search's (:mod:`memstrata.query.compile`): natural
        words are ORed, explicit ``AND``/``OR``/``NOT``, ``"phrases"`` and ``prefix*``
        keep their meaning, and no string raises. An empty query lists the newest facts.
        """
        if category is not None:
            check_category(category)
        compiled = compile_search(query)
        if compiled.is_empty:
            return self.list(category=category, subject=subject, limit=limit)
        sims = self._similarities(query)
        with self._read() as conn:
            scores, rows = search_scores(conn, compiled, category=category, subject=subject)
            if sims:
                scores = facts_vectors.fuse_search(scores, sims)
                missing = [i for i in scores if i not in rows]
                rows.update(live_rows(conn, missing, category=category, subject=subject))
                scores = {i: v for i, v in scores.items() if i in rows}
        return [_fact_of(rows[i], scores[i]) for i in rank(scores, rows, int(limit))]

    def recall(
        self,
        message: str,
        *,
        limit: int = 5,
        exclude: Iterable[int] = (),
        categories: Sequence[str] | None = None,
    ) -> builtins.list[Fact]:
        """Facts relevant to a chat message, best first; ``[]`` when nothing is.

        Gated (see :func:`memstrata.providers.facts.recall.recall_rows`): a fact must share
        significant, not-too-common terms with the message, or (with an embedder) be
        very close to it in meaning. ``exclude`` leaves out facts the caller already
        shows (the slots in the system prompt).
        """
        skip = {int(i) for i in exclude}
        sims = self._similarities(message)
        with self._read() as conn:
            matched = recall_scores(conn, message, exclude=skip)
            if sims:
                matched = facts_vectors.fuse_recall(matched, sims, skip)
            found = rows_by_score(conn, matched, int(limit), categories)
        return [_fact_of(row, score) for row, score in found]

    # -- vectors (optional hybrid recall) -------------------------------------------------

    def _similarities(self, text: str) -> dict[int, float]:
        """Cosine of ``text`` with the stored vectors of ``self.embedder`` ({} without one).

        An embedder that fails (endpoint down, bad answer) costs the vectors, not the
        search: the keywords still answer, and the failure is logged.
        """
        embedder = self.embedder
        if embedder is None or not text.strip():
            return {}
        with self._read() as conn:
            stored = conn.execute(
                "SELECT 1 FROM fact_vectors WHERE model = ? LIMIT 1", (embedder.name,)
            ).fetchone()
        if stored is None:
            return {}
        try:
            vector = facts_vectors.embed_query(embedder, text)
        except MemstrataError as exc:
            logger.warning("facts: keyword-only search, the embedder failed: %s", exc)
            return {}
        with self._read() as conn:
            return calibrated(embedder, facts_vectors.vector_scores(conn, embedder.name, vector))

    def pending_vectors(self, embedder: Embedder | None = None) -> int:
        """Live facts not yet embedded by ``embedder`` (default: ``self.embedder``)."""
        chosen = self._embedder(embedder)
        with self._read() as conn:
            return facts_vectors.pending_count(conn, chosen.name)

    def index_vectors(
        self,
        embedder: Embedder | None = None,
        *,
        limit: int | None = None,
        batch: int = facts_vectors.INDEX_BATCH,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed the live facts that have no vector of ``embedder`` (default:
        ``self.embedder``) yet, oldest first, ``batch`` per embedder call; return how many.

        Each batch is embedded outside any transaction (writers are never held up by a
        model call) and written in its own; a fact retired meanwhile is skipped.
        ``limit`` bounds the run; ``progress`` gets the running count after each batch.
        """
        chosen = self._embedder(embedder)

        def read(after: int, size: int) -> builtins.list[tuple[int, str]]:
            with self._read() as conn:
                return facts_vectors.pending_batch(conn, chosen.name, after, size)

        def write(items: builtins.list[tuple[int, bytes]]) -> int:
            with self._write() as conn:
                return facts_vectors.write_vectors(conn, chosen, items)

        return facts_vectors.index_in_batches(
            read, write, chosen, limit=limit, batch=batch, progress=progress
        )

    def _embedder(self, embedder: Embedder | None) -> Embedder:
        if embedder is not None:
            return facts_vectors.check_embedder(embedder)
        if self.embedder is None:
            raise ConfigError(
                "This facts store has no embedder: pass one (MiniLMEmbedder(), "
                "embedder_from_config()) or set search.embedder."
            )
        return self.embedder


def _fact_of(row: sqlite3.Row, score: float) -> Fact:
    fields = {k: row[k] for k in row.keys() if k != "score_"}  # noqa: SIM118
    return Fact(**fields, score=score)
