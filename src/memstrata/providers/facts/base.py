"""The rules of a facts store, written once for every backend.

A fact is one short declarative sentence with a category:

* ``identity`` - who the user is (name, job, where they live, timezone);
* ``preference`` - how they like things done;
* ``episodic`` - something that happened or was decided, recalled on demand;
* ``note`` - the agent's own conventions and environment notes.

A fact may fill a **slot**: a ``key`` and ``value`` under a ``subject`` (``"user"`` by
default, ``"agent"`` for the agent's own notes), e.g. ``timezone = UTC+8``. A subject has
one live value per key: writing a new value supersedes the old row, which stays in the
store (``status='superseded'``, ``superseded_by`` pointing at its successor) and in the
history. Nothing is ever updated in place: every change is a new row or a status change,
and the history records each one with its before and after values, the time, who made
it and in which session.

Writes are cheap (SPEC decision 3): no LLM, no embedding; the text is scanned for prompt
injection (``strict`` scope, facts are injected into context) and indexed by the backend.

:class:`BaseFactStore` holds all of this; a backend
(:class:`~memstrata.providers.facts.store.FactStore` on SQLite,
:class:`~memstrata.providers.facts.postgres.PostgresFactStore` on PostgreSQL) only opens
transactions of :class:`~memstrata.providers.facts.backend.FactTransaction` primitives.
"""

from __future__ import annotations

import abc
import builtins
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from memstrata.errors import (
    AmbiguousMatchError,
    ConfigError,
    InvalidMemoryArgument,
    MemstrataError,
    NoMatchError,
)
from memstrata.providers.facts import recall as facts_recall
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
from memstrata.providers.facts.backend import FactTransaction
from memstrata.providers.facts.contract import (
    FACT_COLUMNS,
    Fact,
    FactChange,
    FactDump,
)
from memstrata.providers.facts.schema import CATEGORIES
from memstrata.query.paging import SQL_INTEGERS, clamp_page
from memstrata.query.spelling import corrected, may_correct, respell
from memstrata.query.transcript import LAST_TURN_WEIGHT, Readings, readings
from memstrata.search.embedders import Embedder
from memstrata.store.boosts import mix_readings
from memstrata.store.codec import is_epoch
from memstrata.store.vectors import calibrated

logger = logging.getLogger(__name__)

__all__ = ["BaseFactStore"]


def _now() -> float:
    return time.time()


def _no_fact(fact_id: int) -> NoMatchError:
    return NoMatchError(f"No fact #{fact_id}. Find the id with facts_search (or FactStore.search).")


class BaseFactStore(abc.ABC):
    """Every rule of a facts store; subclasses open transactions (see the module doc).

    ``embedder`` (optional, settable later) turns on hybrid recall: searches fuse its
    cosine similarity with the keywords for the facts :meth:`index_vectors` has embedded
    (see :mod:`memstrata.providers.facts.vectors`). ``typos`` (settable; ``search.typos``
    where the store is opened from a configuration) turns typo correction of searches
    and recall on or off (:mod:`memstrata.query.spelling`).
    """

    embedder: Embedder | None = None
    typos: bool = True

    # -- what a backend provides ----------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self, *, write: bool = False) -> AbstractContextManager[FactTransaction]:
        """One transaction: a write commits on return and rolls back on error."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the facts live: a file path, or a DSN (password hidden) and tenant."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection(s) (idempotent)."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_embedder(self, embedder: Embedder | None) -> None:
        self.embedder = facts_vectors.check_embedder(embedder) if embedder is not None else None

    # -- history -------------------------------------------------------------------------

    @staticmethod
    def _history(
        tx: FactTransaction,
        fact_id: int,
        action: str,
        before: Fact | None,
        after: Fact | None,
        origin: str,
        session_id: str | None,
    ) -> None:
        tx.add_history(
            fact_id,
            action,
            json.dumps(before.state(), ensure_ascii=False) if before else None,
            json.dumps(after.state(), ensure_ascii=False) if after else None,
            origin,
            session_id,
            _now(),
        )

    @staticmethod
    def _get(tx: FactTransaction, fact_id: int) -> Fact | None:
        row = tx.get(fact_id) if fact_id in SQL_INTEGERS else None
        return Fact.from_row(row) if row is not None else None

    # -- writes --------------------------------------------------------------------------

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
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0.0 <= confidence <= 1.0
        ):
            raise InvalidMemoryArgument(
                f"confidence must be a number between 0 and 1, got {confidence!r}."
            )
        scan_fact(text, slot_key, slot_value)
        author = origin or source
        with self._transaction(write=True) as tx:
            row = (
                tx.live_slot(subject, slot_key)
                if slot_key is not None
                else tx.live_content(subject, text)
            )
            replaced = [int(i) for i in supersedes]
            if row is not None:
                current = Fact.from_row(row)
                if current.content == text and current.value == slot_value:
                    # Already known: the write is idempotent, only the others it names go.
                    self._retire(tx, replaced, current.id, author, session_id, "supersede")
                    return self._get(tx, current.id) or current
                replaced.append(current.id)
            olds = self._retire(tx, replaced, None, author, session_id, "supersede")
            now = _now()
            new_id = tx.insert(
                {
                    "content": text,
                    "category": category,
                    "subject": subject,
                    "key": slot_key,
                    "value": slot_value,
                    "source": source,
                    "target": target,
                    "session_id": session_id,
                    "confidence": float(confidence),
                    "status": "live",
                    "superseded_by": None,
                    "created_at": now,
                    "updated_at": now,
                    "last_recalled_at": None,
                    "recall_count": 0,
                }
            )
            for old in olds:
                tx.set_successor(old.id, new_id)
                after = self._get(tx, old.id)
                self._history(tx, old.id, "supersede", old, after, author, session_id)
            fact = self._get(tx, new_id)
            assert fact is not None
            self._history(tx, new_id, "add", None, fact, author, session_id)
            return fact

    def _retire(
        self,
        tx: FactTransaction,
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
            old = self._get(tx, fact_id)
            if old is None or old.status != "live" or fact_id == successor:
                continue
            tx.set_status(fact_id, status, successor, _now())
            retired.append(old)
            if successor is not None or action == "delete":
                after = self._get(tx, fact_id)
                self._history(tx, fact_id, action, old, after, origin, session_id)
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
        removes the row, its index entries, its vectors and the text in its history,
        leaving a ``purge`` record without content: for things that must not be kept.
        """
        with self._transaction(write=True) as tx:
            old = self._get(tx, int(fact_id))
            if old is None:
                raise _no_fact(fact_id)
            if purge:
                tx.purge(old.id)
                self._history(tx, old.id, "purge", None, None, origin, session_id)
                return old
            if old.status != "live":
                raise NoMatchError(
                    f"Fact #{fact_id} is already {old.status}; nothing to forget "
                    "(pass purge=True to erase its text as well)."
                )
            self._retire(tx, [old.id], None, origin, session_id, "delete")
            return old

    def mark_recalled(self, ids: Iterable[int], at: float | None = None) -> None:
        """Count a recall of each fact (usage statistics for a curator; no history row)."""
        unique = [i for i in dict.fromkeys(int(i) for i in ids) if i in SQL_INTEGERS]
        if at is not None and not is_epoch(at):
            raise InvalidMemoryArgument(f"at must be epoch seconds (a finite number), got {at!r}.")
        if not unique:
            return
        with self._transaction(write=True) as tx:
            tx.mark_recalled(unique, at or _now())

    # -- reads ---------------------------------------------------------------------------

    def get(self, fact_id: int) -> Fact:
        """The fact with this id, whatever its status; NoMatchError if there is none."""
        with self._transaction() as tx:
            fact = self._get(tx, int(fact_id))
        if fact is None:
            raise _no_fact(fact_id)
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
        with self._transaction() as tx:
            rows = tx.rows(
                category=category,
                subject=subject,
                status=status,
                source=source,
                limit=clamp_page(limit),
                offset=clamp_page(offset),
            )
        return [Fact.from_row(r) for r in rows]

    def count(self, *, category: str | None = None, status: str | None = "live") -> int:
        """How many facts match the filters."""
        with self._transaction() as tx:
            return tx.count(category=category, status=status)

    def slots(
        self, *, subject: str = "user", categories: Sequence[str] = ("identity", "preference")
    ) -> builtins.list[Fact]:
        """The live slot facts of ``subject`` in ``categories``, by key."""
        with self._transaction() as tx:
            return [Fact.from_row(r) for r in tx.slots(subject, list(categories))]

    def find_text(
        self, text: str, *, source: str | None = None, target: str | None = None
    ) -> builtins.list[Fact]:
        """Live facts whose content contains ``text`` (case-sensitive), newest first."""
        with self._transaction() as tx:
            rows = tx.containing(" ".join(text.split()), source=source, target=target)
        return [Fact.from_row(r) for r in rows]

    def find_one(self, text: str) -> Fact:
        """The one live fact whose content contains ``text`` (case-insensitive).

        NoMatchError when none does, AmbiguousMatchError (listing them) when several do.
        """
        needle = " ".join(str(text).split()).lower()
        if not needle:
            raise InvalidMemoryArgument("The text to find is empty: send an id or some words.")
        with self._transaction() as tx:
            rows = tx.containing(needle, fold_case=True, limit=11)
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
        if fact_id is not None and int(fact_id) not in SQL_INTEGERS:
            return []  # no fact has such an id
        with self._transaction() as tx:
            rows = tx.history(None if fact_id is None else int(fact_id), clamp_page(limit))
        return [
            FactChange(
                id=int(r["id"]),
                fact_id=int(r["fact_id"]),
                action=r["action"],
                before=json.loads(r["before"]) if r["before"] else None,
                after=json.loads(r["after"]) if r["after"] else None,
                origin=r["origin"],
                session_id=r["session_id"],
                at=float(r["at"]),
            )
            for r in rows
        ]

    # -- search --------------------------------------------------------------------------

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
        if self.typos and may_correct(query):
            # A natural query's typos search the word the facts hold (query.spelling).
            with self._transaction() as tx:
                query = respell(query, tx.held_words)[0] or query
        # A transcript-shaped query is read as a whole (its end, when long) and again by
        # its last turn, as the session search reads it (memstrata.query.transcript).
        read = readings(query)
        compiled = facts_recall.compile_search(query if read is None else read.whole)
        if compiled.is_empty:
            return self.list(category=category, subject=subject, limit=limit)
        sims = self._similarities(query, read)
        with self._transaction() as tx:
            scores, rows = facts_recall.search_scores(
                tx, compiled, category=category, subject=subject
            )
            if read is not None:
                last = facts_recall.compile_search(read.last_turn)
                if not last.is_empty:
                    last_scores, last_rows = facts_recall.search_scores(
                        tx, last, category=category, subject=subject
                    )
                    scores = mix_readings(scores, last_scores, LAST_TURN_WEIGHT)
                    rows.update(last_rows)
            if sims:
                scores = facts_vectors.fuse_search(scores, sims)
                missing = [i for i in scores if i not in rows]
                rows.update(facts_recall.live_rows(tx, missing, category=category, subject=subject))
                scores = {i: v for i, v in scores.items() if i in rows}
        ranked = facts_recall.rank(scores, rows, clamp_page(limit))
        return [Fact.from_row(rows[i], scores[i]) for i in ranked]

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
        sims = self._similarities(message, readings(message))
        with self._transaction() as tx:
            # Typos count as the words the facts hold: a chat message is never explicit
            # syntax (recall reads its quotes and operators as words).
            if self.typos:
                message = corrected(message, tx.held_words)[0]
            matched = facts_recall.recall_scores(tx, message, exclude=skip)
            if sims:
                matched = facts_vectors.fuse_recall(matched, sims, skip)
            found = facts_recall.rows_by_score(tx, matched, clamp_page(limit), categories)
        return [Fact.from_row(row, score) for row, score in found]

    # -- vectors (optional hybrid recall) -------------------------------------------------

    def _similarities(self, text: str, read: Readings | None = None) -> dict[int, float]:
        """Cosine of ``text`` with the stored vectors of ``self.embedder`` ({} without one);
        with ``read`` (a transcript's two readings) each fact's cosines under both, mixed
        (:func:`memstrata.store.boosts.mix_readings`).

        An embedder that fails (endpoint down, bad answer) costs the vectors, not the
        search: the keywords still answer, and the failure is logged.
        """
        embedder = self.embedder
        if embedder is None or not text.strip():
            return {}
        with self._transaction() as tx:
            stored = tx.has_vectors(embedder.name)
        if not stored:
            return {}
        texts = [text] if read is None else [read.whole, read.last_turn]
        try:
            vectors = facts_vectors.embed_query(embedder, *texts)
        except MemstrataError as exc:
            logger.warning("facts: keyword-only search, the embedder failed: %s", exc)
            return {}
        with self._transaction() as tx:
            server = [
                tx.server_cosines(embedder.name, v, facts_vectors.VECTOR_SCAN) for v in vectors
            ]
            if all(sims is not None for sims in server):
                readings = [sims for sims in server if sims is not None]
            else:
                rows = tx.vectors(embedder.name, facts_vectors.VECTOR_SCAN)
                readings = [facts_vectors.cosines(rows, v) for v in vectors]
        sims = readings[0]
        if read is not None:
            sims = mix_readings(sims, readings[1], LAST_TURN_WEIGHT)
        return calibrated(embedder, sims)

    def pending_vectors(self, embedder: Embedder | None = None) -> int:
        """Live facts not yet embedded by ``embedder`` (default: ``self.embedder``)."""
        chosen = self._embedder(embedder)
        with self._transaction() as tx:
            return tx.pending_count(chosen.name)

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
            with self._transaction() as tx:
                return [
                    (fid, text[: facts_vectors.EMBED_CHARS])
                    for fid, text in tx.pending_batch(chosen.name, after, size)
                ]

        def write(items: builtins.list[tuple[int, bytes]]) -> int:
            with self._transaction(write=True) as tx:
                return tx.put_vectors(chosen.name, chosen.dims, items, _now())

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

    # -- copying -------------------------------------------------------------------------

    def dump(self) -> FactDump:
        """Every fact, history row and vector of this store, in one consistent read."""
        with self._transaction() as tx:
            return FactDump(tx.dump_facts(), tx.dump_history(), tx.dump_vectors())

    def load(self, dump: FactDump) -> dict[int, int]:
        """Copy ``dump`` (another store's :meth:`dump`) into this store, in one transaction.

        Every fact keeps its text, slot, status, times and recall counts; this store numbers
        the rows itself, and ``superseded_by``, the history and the vectors follow the new
        ids (a history record of a purged fact keeps the source's id, negated, as no fact
        of this store has it). Returns ``{source id: new id}``. InvalidMemoryArgument when
        this store already holds facts: a copy never mixes with what is there.
        """
        with self._transaction(write=True) as tx:
            if tx.count(category=None, status=None) or tx.history(None, 1):
                raise InvalidMemoryArgument(
                    f"The facts store {self.location} already holds facts; load a copy only "
                    "into an empty one (another namespace, or a new file)."
                )
            ids: dict[int, int] = {}
            for row in sorted(dump.facts, key=lambda r: int(r["id"])):
                values = {c: row[c] for c in FACT_COLUMNS if c != "id"}  # type: ignore[literal-required]
                values["superseded_by"] = None
                ids[int(row["id"])] = tx.insert(values)
            for row in dump.facts:
                if row["superseded_by"] is not None and int(row["superseded_by"]) in ids:
                    tx.set_successor(ids[int(row["id"])], ids[int(row["superseded_by"])])
            tx.load_history(
                {
                    **{k: v for k, v in change.items() if k != "id"},
                    "fact_id": ids.get(int(change["fact_id"]), -int(change["fact_id"])),
                }
                for change in sorted(dump.history, key=lambda r: int(r["id"]))
            )
            tx.load_vectors(
                {**vector, "fact_id": ids[int(vector["fact_id"])]}
                for vector in dump.vectors
                if int(vector["fact_id"]) in ids
            )
        self._loaded()
        return ids

    def _loaded(self) -> None:  # noqa: B027 - an optional hook
        """Called after :meth:`load` committed (a backend refreshes its statistics here)."""
