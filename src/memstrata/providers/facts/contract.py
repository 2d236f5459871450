"""The facts-store contract: the public API of a facts store and the rows it keeps.

Everything that reads or writes facts (the ``facts`` provider, the ``remember`` tool and
its recall, the curator, the CLI, ``memstrata migrate``) talks to a store through
:class:`FactStoreContract`, so it runs unchanged on the local ``facts.db`` and on a
tenant of a PostgreSQL database. :class:`~memstrata.providers.facts.base.BaseFactStore`
implements the contract once over per-backend primitives
(:class:`~memstrata.providers.facts.backend.FactTransaction`), the way the session store
does it (:mod:`memstrata.store.contract`), and :mod:`memstrata.testing.facts_contract`
checks that a backend behaves so.

Stored rows travel between the layers as :class:`FactRow` and :class:`FactChangeRow`
(``TypedDict``\\ s, the same keys on every backend); the public methods return them as
the frozen :class:`Fact` and :class:`FactChange`, which callers have always used.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypedDict

if TYPE_CHECKING:
    from memstrata.search.embedders import Embedder

__all__ = [
    "Fact",
    "FactChange",
    "FactChangeRow",
    "FactDump",
    "FactRow",
    "FactStoreContract",
    "VectorRow",
]


class FactRow(TypedDict):
    """One row of the facts table, as every backend returns it."""

    id: int
    content: str
    category: str
    subject: str
    key: str | None
    value: str | None
    source: str
    target: str | None
    session_id: str | None
    confidence: float
    status: str
    superseded_by: int | None
    created_at: float
    updated_at: float
    last_recalled_at: float | None
    recall_count: int


class FactChangeRow(TypedDict):
    """One row of the history: ``before``/``after`` are the JSON text of the fact's state."""

    id: int
    fact_id: int
    action: str
    before: str | None
    after: str | None
    origin: str
    session_id: str | None
    at: float


class VectorRow(TypedDict):
    """One stored embedding of a fact: unit float32 bytes of ``dims`` dimensions."""

    model: str
    fact_id: int
    dims: int
    vector: bytes
    created_at: float


FACT_COLUMNS: tuple[str, ...] = tuple(FactRow.__annotations__)


@dataclass(frozen=True)
class Fact:
    """One stored fact; ``score`` is set by searches (higher is better)."""

    id: int
    content: str
    category: str
    subject: str
    key: str | None
    value: str | None
    source: str
    target: str | None
    session_id: str | None
    confidence: float
    status: str
    superseded_by: int | None
    created_at: float
    updated_at: float
    last_recalled_at: float | None
    recall_count: int
    score: float | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], score: float | None = None) -> Fact:
        """Build a fact from a stored row (any mapping with the :class:`FactRow` keys)."""
        return cls(
            id=int(row["id"]),
            content=str(row["content"]),
            category=str(row["category"]),
            subject=str(row["subject"]),
            key=row["key"],
            value=row["value"],
            source=str(row["source"]),
            target=row["target"],
            session_id=row["session_id"],
            confidence=float(row["confidence"]),
            status=str(row["status"]),
            superseded_by=None if row["superseded_by"] is None else int(row["superseded_by"]),
            created_at=float(row["created_at"]),
            updated_at=float(row["updated_at"]),
            last_recalled_at=(
                None if row["last_recalled_at"] is None else float(row["last_recalled_at"])
            ),
            recall_count=int(row["recall_count"]),
            score=score,
        )

    @property
    def is_slot(self) -> bool:
        """True when the fact fills a key/value slot."""
        return self.key is not None

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain dict (JSON-able)."""
        return asdict(self)

    def state(self) -> dict[str, Any]:
        """What history records of a fact: the fields a change can differ in."""
        return {
            "content": self.content,
            "category": self.category,
            "subject": self.subject,
            "key": self.key,
            "value": self.value,
            "status": self.status,
            "superseded_by": self.superseded_by,
        }

    # The 0.1 name of :meth:`state`.
    _state = state


@dataclass(frozen=True)
class FactChange:
    """One history row: ``action`` is add, supersede, delete or purge.

    ``before`` and ``after`` hold the fact's content, category, subject, slot and status
    around the change (None where the fact did not exist or no longer does).
    """

    id: int
    fact_id: int
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    origin: str
    session_id: str | None
    at: float

    def to_dict(self) -> dict[str, Any]:
        """Every field as a plain dict (JSON-able)."""
        return asdict(self)


@dataclass
class FactDump:
    """Every row of a facts store, for copying it into another (``memstrata migrate``).

    Ids are the source's: the receiving store numbers its own rows and maps
    ``superseded_by``, history and vectors onto them.
    """

    facts: list[FactRow] = field(default_factory=list)
    history: list[FactChangeRow] = field(default_factory=list)
    vectors: list[VectorRow] = field(default_factory=list)


class FactStoreContract(Protocol):
    """The public API of a facts store (see the module doc); every backend has it."""

    embedder: Embedder | None
    # Typo correction of searches and recall (memstrata.query.spelling).
    typos: bool

    @property
    def location(self) -> str:
        """Where the facts live: a file path, or a DSN (password hidden) and tenant."""
        ...

    # -- writes ----------------------------------------------------------------------------

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
    ) -> Fact: ...

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
    ) -> Fact: ...

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
    ) -> Fact: ...

    def forget(
        self,
        fact_id: int,
        *,
        origin: str = "api",
        session_id: str | None = None,
        purge: bool = False,
    ) -> Fact: ...

    def mark_recalled(self, ids: Iterable[int], at: float | None = None) -> None: ...

    # -- reads -----------------------------------------------------------------------------

    def get(self, fact_id: int) -> Fact: ...

    def list(
        self,
        *,
        category: str | None = None,
        subject: str | None = None,
        status: str | None = "live",
        source: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Fact]: ...

    def count(self, *, category: str | None = None, status: str | None = "live") -> int: ...

    def slots(
        self, *, subject: str = "user", categories: Sequence[str] = ("identity", "preference")
    ) -> builtins.list[Fact]: ...

    def find_text(
        self, text: str, *, source: str | None = None, target: str | None = None
    ) -> builtins.list[Fact]: ...

    def find_one(self, text: str) -> Fact: ...

    def history(
        self, fact_id: int | None = None, *, limit: int = 50
    ) -> builtins.list[FactChange]: ...

    # -- search and recall -----------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        category: str | None = None,
        subject: str | None = None,
        limit: int = 10,
    ) -> builtins.list[Fact]: ...

    def recall(
        self,
        message: str,
        *,
        limit: int = 5,
        exclude: Iterable[int] = (),
        categories: Sequence[str] | None = None,
    ) -> builtins.list[Fact]: ...

    # -- vectors ---------------------------------------------------------------------------

    def pending_vectors(self, embedder: Embedder | None = None) -> int: ...

    def index_vectors(
        self,
        embedder: Embedder | None = None,
        *,
        limit: int | None = None,
        batch: int = ...,
        progress: Callable[[int], None] | None = None,
    ) -> int: ...

    # -- copying ---------------------------------------------------------------------------

    def dump(self) -> FactDump: ...

    def load(self, dump: FactDump) -> dict[int, int]: ...

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
