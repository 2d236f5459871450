"""What a session-store backend implements: the primitives, the only code that holds SQL.

:class:`~memstrata.store.base.BaseSessionStore` holds every rule of the store (argument
checks, value encoding, title numbering, lineage walks, listings, recall). It opens one
:class:`Transaction` per unit of work and calls the primitives below on it. A primitive
does one thing to the rows of one tenant and knows no rule: which columns an upsert
may fill, which session a chain continues to, how a hit is ranked, all live above it.

A new backend (SQLite and PostgreSQL ship) is a subclass of ``BaseSessionStore`` that
opens transactions (:meth:`~memstrata.store.base.BaseSessionStore._transaction`) and a
subclass of ``Transaction`` that implements these methods; ``tests/test_store_contract.py``
is the suite it must pass. Rows go in and out as plain dicts with the ``sessions`` and
``messages`` columns (see :mod:`memstrata.store.contract`); message content is decoded
(structured content as a list or dict, ``tool_calls`` as a list).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from memstrata.query.compile import CompiledQuery
    from memstrata.query.filters import Filters
    from memstrata.store.codec import MessageValues

# Upsert columns: on conflict the first writer's non-null value wins.
FILLED_ON_CONFLICT = (
    "user_id",
    "model",
    "model_config",
    "system_prompt",
    "parent_session_id",
    "lineage_kind",
    "title",
)
# How a search orders what it finds: by relevance, or newest or oldest first.
Order = Literal["rank", "newest", "oldest"]
# Kinds of child session that belong to their parent's conversation instead of being
# listed on their own (see memstrata.store.lineage).
HIDDEN_KINDS = ("compression", "delegate")

# The end of a session's lineage-kind CASE, after each backend's explicit markers: a
# child started after its parent ended for compression continues it; one started while
# the parent ran was delegated; any other child branched. Plain SQL, the same everywhere.
KIND_BY_TIMING = """    WHEN s.source = 'subagent' THEN 'delegate'
    WHEN p.ended_at IS NOT NULL AND s.started_at >= p.ended_at
         AND p.end_reason = 'compression' THEN 'compression'
    WHEN p.ended_at IS NULL OR s.started_at < p.ended_at THEN 'delegate'
    ELSE 'branch'"""


@dataclass(frozen=True)
class Dialect:
    """How a backend writes a parameter and an ``IN`` test, so that SQL whose shape is the
    same on every backend is built once."""

    mark: str
    # ``in_list(column, values)``: the SQL of ``column IN values`` and its parameters.
    in_list: Callable[[str, Sequence[Any]], tuple[str, list[Any]]]

    def window(
        self,
        table: str,
        hide_live: Sequence[str],
        below: int | None,
        above: int | None,
    ) -> tuple[str, list[Any]]:
        """`` AND …`` clauses over messages (as ``table``) hiding the live rows of the
        ``hide_live`` sessions and keeping ids between ``above`` and ``below``."""
        where = ""
        params: list[Any] = []
        if hide_live:
            test, values = self.in_list(f"{table}session_id", hide_live)
            where += f" AND NOT ({table}active = 1 AND {test})"
            params += values
        if below is not None:
            where += f" AND {table}id < {self.mark}"
            params.append(below)
        if above is not None:
            where += f" AND {table}id > {self.mark}"
            params.append(above)
        return where, params

    def updates(self, values: Mapping[str, Any], add: Mapping[str, float]) -> list[str]:
        """The ``SET`` items that write ``values`` and add ``add`` to their columns."""
        return [f"{c} = {self.mark}" for c in values] + [
            f"{c} = COALESCE({c}, 0) + {self.mark}" for c in add
        ]


@dataclass
class Candidate:
    """A message a search found, with its per-index scores and its fused score."""

    id: int
    session_id: str
    timestamp: float
    bm25: dict[str, float] = field(default_factory=dict)
    score: float = 0.0


@dataclass(frozen=True)
class ListingFilter:
    """Which conversations a listing shows: by source, and archived ones or not."""

    source: str | None = None
    exclude_sources: tuple[str, ...] = ()
    include_archived: bool = False

    def clauses(self, dialect: Dialect) -> tuple[list[str], list[Any]]:
        """The ``WHERE`` clauses (over sessions as ``s``) and their parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        if not self.include_archived:
            clauses.append("s.archived = 0")
        if self.source is not None:
            clauses.append(f"s.source = {dialect.mark}")
            params.append(self.source)
        if self.exclude_sources:
            test, values = dialect.in_list("s.source", self.exclude_sources)
            clauses.append(f"NOT ({test})")
            params.extend(values)
        return clauses, params


@dataclass(frozen=True)
class Edge:
    """A compression continuation: the child, its parent and what ranks it as the tip."""

    id: str
    parent: str
    end_reason: str | None
    ended_at: float | None
    started_at: float | None
    last_active: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Edge:
        """The edge of a ``sessions`` row (any backend's mapping-like row)."""
        return cls(
            row["id"],
            row["parent_session_id"],
            row["end_reason"],
            row["ended_at"],
            row["started_at"],
            row["last_active"],
        )


@dataclass(frozen=True)
class HitRow:
    """What a search hit needs from the rows: the message, its session, its neighbours."""

    id: int
    session_id: str
    role: str
    text: str
    tool_name: str | None
    tool_calls: str | None
    timestamp: float
    source: str | None
    model: str | None
    session_started: float | None
    context: tuple[dict[str, Any], ...] = ()


class Transaction(abc.ABC):
    """One transaction on one tenant's rows (committed or rolled back by the store)."""

    # -- sessions ------------------------------------------------------------------------

    @abc.abstractmethod
    def session_exists(self, session_id: str, *, lock: bool = False) -> bool:
        """True when the session exists; ``lock`` holds its row until the transaction ends
        (it serialises writers of one session where the database allows several)."""

    @abc.abstractmethod
    def session_rows(self, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The ``sessions`` rows of these ids (unknown ids left out), by id."""

    @abc.abstractmethod
    def upsert_session(self, values: Mapping[str, Any]) -> None:
        """Insert the session, or fill its :data:`FILLED_ON_CONFLICT` columns still null."""

    @abc.abstractmethod
    def update_session(
        self, session_id: str, values: Mapping[str, Any], add: Mapping[str, float], live: bool
    ) -> int:
        """Set ``values`` and add ``add`` (a null counts as 0) on one session, not both
        empty; with ``live`` only if it has not ended. Returns the rows changed (0 or 1)."""

    @abc.abstractmethod
    def titled(self, title: str, *, numbered: bool = False) -> list[dict[str, Any]]:
        """``{id, title, started_at}`` of sessions titled ``title`` (and, with ``numbered``,
        titled ``title #...``)."""

    @abc.abstractmethod
    def write_title(self, session_id: str, title: str | None) -> None:
        """Store the title; raise :class:`~memstrata.errors.TitleConflictError` when the
        unique index refuses it (another writer just took it)."""

    @abc.abstractmethod
    def namespace_counts(self) -> list[dict[str, Any]]:
        """Every tenant of the database, by name: ``{namespace, sessions, messages,
        memory_rows, last_active}``. A backend holding one tenant returns one row whose
        ``namespace`` is None."""

    @abc.abstractmethod
    def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` ids starting with ``prefix`` (taken literally), newest first."""

    @abc.abstractmethod
    def delete_sessions(self, session_ids: Sequence[str]) -> None:
        """Delete the sessions with their messages, from every index and vector table."""

    @abc.abstractmethod
    def ended_before(self, cutoff: float, source: str | None) -> list[str]:
        """Sessions (of ``source``, if given) that ended before ``cutoff``, oldest end first."""

    # -- lineage -------------------------------------------------------------------------

    @abc.abstractmethod
    def parent_kind(self, session_id: str) -> tuple[str | None, str | None]:
        """``(parent id, kind)`` of a child session; ``(None, None)`` for a root or an orphan.

        The kind is the recorded ``lineage_kind``, else the markers and timestamp rule
        documented in :mod:`memstrata.store.lineage`.
        """

    @abc.abstractmethod
    def continuations(self, parent: str | None) -> list[Edge]:
        """Compression continuations of ``parent``; with None, of every session."""

    @abc.abstractmethod
    def children(self, parents: Sequence[str], kinds: Sequence[str]) -> list[str]:
        """Children of these sessions of one of ``kinds``, oldest first (then by id)."""

    @abc.abstractmethod
    def with_parent(self, session_ids: Sequence[str]) -> list[str]:
        """Those of ``session_ids`` that have a parent session."""

    @abc.abstractmethod
    def listed_by_start(self, where: ListingFilter, limit: int, offset: int) -> list[str]:
        """A page of listed sessions (roots, branches, resets passing ``where``), newest
        start first."""

    @abc.abstractmethod
    def listed_by_activity(
        self, where: ListingFilter
    ) -> Generator[tuple[str, str | None, float], None, None]:
        """``(id, kind, activity)`` of roots and listed children passing ``where`` and of
        every compression continuation, most recent activity first, read lazily."""

    @abc.abstractmethod
    def is_listed(self, session_id: str, where: ListingFilter) -> bool:
        """True when the session is listed on its own and passes ``where``."""

    @abc.abstractmethod
    def first_user_content(self, session_id: str) -> Any:
        """The content of the session's first user message, or None."""

    # -- messages ------------------------------------------------------------------------

    @abc.abstractmethod
    def insert_messages(self, session_id: str, rows: Sequence[MessageValues]) -> list[int] | None:
        """Insert live rows (at least one, validated and encoded) and add them to the
        session's counters (``message_count``, ``tool_call_count``, ``last_active``);
        their ids, or None when the session does not exist (nothing written)."""

    @abc.abstractmethod
    def messages(self, session_id: str, *, include_inactive: bool) -> list[dict[str, Any]]:
        """The session's messages by id (archived ones too with ``include_inactive``)."""

    @abc.abstractmethod
    def message(self, message_id: int) -> dict[str, Any] | None:
        """One message of any session, archived or not."""

    @abc.abstractmethod
    def neighbours(
        self, session_id: str, message_id: int, count: int, *, before: bool
    ) -> list[dict[str, Any]]:
        """Up to ``count`` messages of the session just before (nearest first) or after
        ``message_id``, archived ones included."""

    @abc.abstractmethod
    def count_beyond(self, session_id: str, first: int, last: int) -> tuple[int, int]:
        """How many of the session's messages have ids below ``first`` and above ``last``."""

    @abc.abstractmethod
    def archive_messages(self, session_id: str, ids: Sequence[int] | None, compacted: bool) -> int:
        """Set live rows (``ids``, or all) to archived; ``compacted`` keeps them searchable."""

    @abc.abstractmethod
    def delete_session_messages(self, session_id: str, *, active_only: bool) -> int:
        """Delete the session's rows (the live ones only, if asked)."""

    @abc.abstractmethod
    def delete_messages(self, message_ids: Sequence[int]) -> tuple[int, list[str]]:
        """Delete these messages (vectors too); how many went and their sessions."""

    @abc.abstractmethod
    def recount(self, session_id: str) -> None:
        """Recompute the session's counters from its rows."""

    @abc.abstractmethod
    def message_ids(
        self, since: float | None, until: float | None, session_ids: Sequence[str] | None
    ) -> list[int]:
        """Ids of messages timestamped in ``[since, until]`` (of these sessions), by id."""

    # -- meta and caches -----------------------------------------------------------------

    @abc.abstractmethod
    def get_meta(self, key: str) -> str | None:
        """The ``state_meta`` value under ``key``."""

    @abc.abstractmethod
    def set_meta(self, key: str, value: str | None) -> None:
        """Store a ``state_meta`` value (insert or replace)."""

    @abc.abstractmethod
    def clear_summaries(self, session_ids: Sequence[str] | None) -> int:
        """Delete cached summaries of conversations whose tip or root is one of these
        (all with None); how many went."""

    @abc.abstractmethod
    def clear_expansions(self) -> int:
        """Delete every cached query expansion; how many went."""

    # -- search --------------------------------------------------------------------------

    # True when :meth:`candidates` ranks a lone phrase (``CompiledQuery.lone_phrase``) in
    # the final order (equal scores: the newer message first), so that a page of results
    # needs only ``offset + limit`` candidates.
    phrase_pages: bool = False

    @abc.abstractmethod
    def candidates(
        self, compiled: CompiledQuery, filters: Filters, k: int, order: Order
    ) -> list[Candidate]:
        """Messages matching ``compiled`` and ``filters``: the best ``k`` by relevance
        (``order`` "rank", scored by the backend's full-text ranking, best first) or the
        ``k`` newest or oldest ("newest", "oldest")."""

    @abc.abstractmethod
    def held_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` (lowercase Latin words, CJK bigrams) that some message of
        the store holds as its word index reads them (stemmed: ``received`` is held by
        ``receive``) or its CJK index, in any row, visible or not: the vocabulary a typo
        or a homophone slip is corrected against."""

    @abc.abstractmethod
    def written_between(
        self, spans: Sequence[tuple[float, float]], filters: Filters, k: int
    ) -> list[Candidate]:
        """The newest ``k`` messages passing ``filters`` timestamped inside any span."""

    @abc.abstractmethod
    def timestamp_range(self) -> tuple[float | None, float | None]:
        """The oldest and newest message timestamps."""

    @abc.abstractmethod
    def hit_rows(
        self, message_ids: Sequence[int], filters: Filters, *, context: bool
    ) -> dict[int, HitRow]:
        """The rows search hits are shaped from; ``context`` adds the previous and next
        message of the same session (visible under ``filters``)."""

    @abc.abstractmethod
    def texts(self, message_ids: Sequence[int]) -> dict[int, str]:
        """The searchable text of messages (content, tool name, tool calls), lowercased."""

    @abc.abstractmethod
    def passing(self, message_ids: Sequence[int], filters: Filters) -> list[Candidate]:
        """Those of these messages that pass ``filters``, as unscored candidates."""

    # -- recall: what a past conversation shows ----------------------------------------

    @abc.abstractmethod
    def visible(
        self,
        session_ids: Sequence[str],
        hide_live: Sequence[str],
        *,
        below: int | None = None,
        above: int | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Messages of these sessions that recall may show, by id (newest first if asked):
        live and compaction-archived rows, not rewound ones, not the live rows of the
        ``hide_live`` sessions; with ids below ``below`` / above ``above``."""

    @abc.abstractmethod
    def count_visible(
        self,
        session_ids: Sequence[str],
        hide_live: Sequence[str],
        *,
        below: int | None = None,
        above: int | None = None,
    ) -> int:
        """How many messages :meth:`visible` would return without a limit."""

    @abc.abstractmethod
    def visible_size(
        self, session_ids: Sequence[str], hide_live: Sequence[str]
    ) -> tuple[int, int, int]:
        """``(count, newest id, characters of content and tool calls)`` of those messages,
        without reading them out."""

    @abc.abstractmethod
    def cached_summary(
        self, tip_session_id: str, message_count: int, last_message_id: int, query: str
    ) -> str | None:
        """The cached summary of a conversation state for a (normalised) query."""

    @abc.abstractmethod
    def put_summary(self, entry: Mapping[str, Any]) -> None:
        """Cache a summary (``tip_session_id, root_session_id, message_count,
        last_message_id, query, model, summary, created_at``), replacing older ones of the
        same conversation and query."""

    @abc.abstractmethod
    def cached_expansion(self, model: str, query: str) -> str | None:
        """The cached sub-queries (JSON) of a normalised question under ``model``."""

    @abc.abstractmethod
    def put_expansion(self, model: str, query: str, subqueries: str, created_at: float) -> None:
        """Cache the sub-queries (JSON) of a question (insert or replace)."""

    # -- message vectors (hybrid recall) -------------------------------------------------

    @abc.abstractmethod
    def count_unvectored(self, model: str) -> int:
        """Messages with no vector of ``model``."""

    @abc.abstractmethod
    def unvectored(self, model: str, after: int, limit: int) -> list[tuple[int, str, str | None]]:
        """``(id, plain text, tool name)`` of up to ``limit`` messages above id ``after``
        with no vector of ``model``, by id."""

    @abc.abstractmethod
    def put_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes], at: float) -> int:
        """Store vectors (float32 blobs; empty for a message with nothing to embed) of the
        messages that still exist; how many were stored."""

    @abc.abstractmethod
    def session_vectors(
        self, model: str, session_ids: Sequence[str], limit: int
    ) -> dict[int, bytes]:
        """Vectors of ``model`` of the ``limit`` newest vectored messages of these sessions."""

    @abc.abstractmethod
    def recent_vectors(self, model: str, limit: int) -> dict[int, bytes]:
        """Vectors of ``model`` of the ``limit`` newest vectored messages of the store."""

    @abc.abstractmethod
    def vectors_of(self, model: str, message_ids: Sequence[int]) -> dict[int, bytes]:
        """Vectors of ``model`` of these messages (those that have one)."""

    def server_cosines(
        self, model: str, query_vector: Sequence[float], message_ids: Sequence[int]
    ) -> dict[int, float] | None:
        """Cosines of ``query_vector`` computed by the database: with the vectors of
        ``model`` of these messages and of the messages nearest to it by the database's
        own index. None (the default) when the backend has no such search: the caller
        reads the stored vectors (:func:`memstrata.store.rank.stored_vectors`) instead."""
        return None
