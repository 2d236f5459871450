"""What a facts-store backend implements: the primitives, the only code that holds SQL.

:class:`~memstrata.providers.facts.base.BaseFactStore` holds every rule of the facts
store (argument checks, the scanner, slots and supersession, history, the recall gate,
fusion with vectors). It opens one :class:`FactTransaction` per unit of work and calls
the primitives below on it. A primitive does one thing to the rows of one store (one
file, or one tenant of a database) and knows no rule.

Rows go in and out as :class:`~memstrata.providers.facts.contract.FactRow` dicts.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memstrata.query.compile import word_term

if TYPE_CHECKING:
    from memstrata.providers.facts.contract import FactChangeRow, FactRow, VectorRow
    from memstrata.query.compile import CompiledQuery, Index, Term

__all__ = ["FactTransaction"]


class FactTransaction(abc.ABC):
    """One transaction of a facts store: reads see one state, writes commit together."""

    # -- one fact ------------------------------------------------------------------------

    @abc.abstractmethod
    def get(self, fact_id: int) -> FactRow | None:
        """The fact with this id, whatever its status."""

    @abc.abstractmethod
    def live_slot(self, subject: str, key: str) -> FactRow | None:
        """The live fact filling ``subject``'s slot ``key``."""

    @abc.abstractmethod
    def live_content(self, subject: str, content: str) -> FactRow | None:
        """The live plain (slot-less) fact of ``subject`` with exactly this content."""

    @abc.abstractmethod
    def insert(self, values: Mapping[str, Any]) -> int:
        """Insert a fact (every :class:`FactRow` column but ``id``); return its new id."""

    @abc.abstractmethod
    def set_status(self, fact_id: int, status: str, successor: int | None, at: float) -> None:
        """Set a fact's status and successor; a fact leaving ``live`` loses its vectors."""

    @abc.abstractmethod
    def set_successor(self, fact_id: int, successor: int) -> None:
        """Point ``fact_id``'s ``superseded_by`` at ``successor``."""

    @abc.abstractmethod
    def purge(self, fact_id: int) -> None:
        """Delete the fact, its vectors, its history and any link to it."""

    @abc.abstractmethod
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
        """Append one history row (``before``/``after`` are JSON text or None)."""

    @abc.abstractmethod
    def mark_recalled(self, ids: Sequence[int], at: float) -> None:
        """Count one recall of each fact."""

    # -- listings ------------------------------------------------------------------------

    @abc.abstractmethod
    def history(self, fact_id: int | None, limit: int) -> list[FactChangeRow]:
        """History rows newest first: of one fact, or of the whole store."""

    @abc.abstractmethod
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
        """Facts newest first (by ``updated_at``, then id), filtered (None: any)."""

    @abc.abstractmethod
    def count(self, *, category: str | None, status: str | None) -> int:
        """How many facts match the filters (None: any)."""

    @abc.abstractmethod
    def slots(self, subject: str, categories: Sequence[str]) -> list[FactRow]:
        """The live slot facts of ``subject`` in ``categories``, by key."""

    @abc.abstractmethod
    def containing(
        self,
        text: str,
        *,
        source: str | None = None,
        target: str | None = None,
        fold_case: bool = False,
        limit: int | None = None,
    ) -> list[FactRow]:
        """Live facts whose content contains ``text`` newest first (``fold_case``: the
        caller passes ``text`` lower-cased and the content is lower-cased to compare)."""

    @abc.abstractmethod
    def live_rows(
        self, ids: Sequence[int], *, category: str | None, subject: str | None
    ) -> dict[int, FactRow]:
        """The live rows among ``ids`` that pass the filters, by id."""

    @abc.abstractmethod
    def live_subjects(self) -> set[str]:
        """The subjects of the live facts."""

    # -- search --------------------------------------------------------------------------

    @abc.abstractmethod
    def keyword_scores(
        self,
        compiled: CompiledQuery,
        *,
        indexes: Sequence[Index],
        category: str | None,
        subject: str | None,
        limit: int,
    ) -> tuple[dict[int, float], dict[int, FactRow]]:
        """Live facts matching ``compiled`` in the given indexes (at most ``limit`` per
        index), each with a relevance score (higher is better, 0 or more; a term counts
        by its rarity) and its row."""

    @abc.abstractmethod
    def term_ids(self, index: Index, expression: str, term: Term) -> set[int]:
        """Ids of every fact (any status) that ``index`` finds ``term`` in
        (``expression`` is the term's FTS5 rendering for that index)."""

    def terms_ids(self, probes: Sequence[tuple[Index, str, Term]]) -> list[set[int]]:
        """:meth:`term_ids` of each ``(index, expression, term)``, in order; a backend
        may answer them in one round trip."""
        return [self.term_ids(index, expression, term) for index, expression, term in probes]

    def held_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` (lowercase Latin words, CJK bigrams) that some live fact
        holds, as the word index reads them or the CJK index (CJK text, and a Latin word
        glued to it): the vocabulary a typo or a homophone slip is corrected against
        (:mod:`memstrata.query.spelling`, :mod:`memstrata.query.homophones`). A
        forgotten fact's words are not in it: a correction would tell that the store
        once held them."""
        probes: list[tuple[Index, str, Term]] = []
        owners: list[str] = []
        indexes: tuple[Index, ...] = ("word", "cjk")
        for word in words:
            term = word_term(word)
            for index in indexes:
                rendered = term.render(index) if term is not None else None
                if term is not None and rendered is not None:
                    probes.append((index, rendered, term))
                    owners.append(word)
        found = self.live_held(probes)
        held = {w for w, hit in zip(owners, found, strict=True) if hit}
        return [w for w in words if w in held]

    def live_held(self, probes: Sequence[tuple[Index, str, Term]]) -> list[bool]:
        """For each ``(index, expression, term)``, whether a live fact holds the term:
        :meth:`terms_ids` without the retired facts. A backend may answer with one
        row per probe instead of every id (a common word is in thousands of facts)."""
        found = self.terms_ids(probes)
        retired = self.retired_ids() if any(found) else set()
        return [bool(ids - retired) for ids in found]

    @abc.abstractmethod
    def retired_ids(self) -> set[int]:
        """Ids of the facts that are not live."""

    @abc.abstractmethod
    def live_count(self) -> int:
        """How many facts are live."""

    # -- vectors -------------------------------------------------------------------------

    @abc.abstractmethod
    def has_vectors(self, model: str) -> bool:
        """True when some fact has a vector of ``model``."""

    @abc.abstractmethod
    def vectors(self, model: str, scan: int) -> list[tuple[int, bytes]]:
        """The newest ``scan`` vectors of ``model`` (by fact id, newest first)."""

    def server_cosines(
        self, model: str, query_vector: Sequence[float], scan: int
    ) -> dict[int, float] | None:
        """The cosines of ``query_vector`` with the newest ``scan`` vectors of ``model``,
        computed by the database; None (the default) when the backend computes none and
        the caller compares :meth:`vectors` itself."""
        return None

    @abc.abstractmethod
    def pending_count(self, model: str) -> int:
        """Live facts without a vector of ``model``."""

    @abc.abstractmethod
    def pending_batch(self, model: str, after: int, size: int) -> list[tuple[int, str]]:
        """The next ``size`` live facts after id ``after`` with no vector of ``model``."""

    @abc.abstractmethod
    def put_vectors(
        self, model: str, dims: int, items: Sequence[tuple[int, bytes]], at: float
    ) -> int:
        """Store the vectors of the facts still live (the others are skipped); return how
        many were stored."""

    # -- copying -------------------------------------------------------------------------

    @abc.abstractmethod
    def dump_facts(self) -> list[FactRow]:
        """Every fact, by id."""

    @abc.abstractmethod
    def dump_history(self) -> list[FactChangeRow]:
        """Every history row, by id."""

    @abc.abstractmethod
    def dump_vectors(self) -> list[VectorRow]:
        """Every stored vector."""

    @abc.abstractmethod
    def load_history(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append history rows as given (every column but ``id``)."""

    @abc.abstractmethod
    def load_vectors(self, rows: Iterable[VectorRow]) -> None:
        """Store vectors as given (for facts of this store)."""
