"""The session-store contract: the whole public API of L2 and the rows it returns.

Everything above the store (search, tools, compression, the agent, import and export, the
CLI and the MCP server) talks to a store through :class:`SessionStoreContract` alone, so
it runs unchanged on SQLite, on PostgreSQL, and on any backend written later.
:class:`~memstrata.store.base.BaseSessionStore` implements the contract once over a small
set of per-backend primitives (:class:`~memstrata.store.backend.Transaction`); a backend
that subclasses it satisfies the contract by construction, and
:mod:`memstrata.testing.store_contract` checks that it behaves so.

The result rows are :class:`~typing.TypedDict`\\ s: the same keys on every backend (the
contract suite checks them at run time, mypy where the rows are used). The protocol is
named ``SessionStoreContract`` because ``SessionStore`` has always been the SQLite
store's public name, which existing code imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, TypedDict

if TYPE_CHECKING:
    from memstrata.query.filters import Filters
    from memstrata.store.rank import RankedQuery
    from memstrata.store.vectors import Embedder

__all__ = [
    "ContextLine",
    "Durability",
    "MessageHit",
    "MessageRow",
    "MessageWindow",
    "SessionHit",
    "SessionListing",
    "SessionRow",
    "SessionStoreContract",
]

Durability = Literal["normal", "full"]


class SessionRow(TypedDict):
    """One session, as :meth:`SessionStoreContract.get_session` returns it."""

    id: str
    source: str
    user_id: str | None
    model: str | None
    # Decoded from JSON when it is JSON, else the stored text.
    model_config: Any
    system_prompt: str | None
    parent_session_id: str | None
    lineage_kind: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    last_active: float | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    estimated_cost_usd: float | None
    api_call_count: int
    title: str | None
    archived: int


class MessageRow(TypedDict):
    """One stored message, as :meth:`SessionStoreContract.get_messages` returns it."""

    id: int
    session_id: str
    role: str
    # Text as stored; structured content (a list of parts) comes back decoded.
    content: Any
    tool_name: str | None
    tool_calls: Any
    tool_call_id: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    api_content: Any
    # 0 once archived (compaction or rewind); archived rows are kept and searchable.
    active: int
    compacted: int


class ContextLine(TypedDict):
    """A neighbour of a hit: the previous or next message of its session."""

    role: str
    content: str


class _HitFields(TypedDict):
    id: int
    session_id: str
    role: str
    # The matched text with matches between ``>>>`` and ``<<<``.
    snippet: str
    timestamp: float
    tool_name: str | None
    source: str
    model: str | None
    session_started: float
    score: float


class MessageHit(_HitFields, total=False):
    """One :meth:`SessionStoreContract.search_messages` result; ``context`` is left out
    where a caller asks for hits without their neighbours."""

    context: list[ContextLine]


class SessionHit(TypedDict):
    """One :meth:`SessionStoreContract.search_sessions` result."""

    session_id: str
    # Set with ``by_lineage``: the root of the lineage the session belongs to.
    lineage_root: str | None
    score: float
    hit_count: int
    match_message_id: int
    matched_role: str
    snippet: str
    timestamp: float
    source: str
    model: str | None
    title: str | None
    session_started: float
    message_ids: list[int]


class SessionListing(TypedDict):
    """One conversation of :meth:`SessionStoreContract.list_sessions_rich`."""

    # The compression tip: the session a user resumes.
    id: str
    root_id: str
    title: str | None
    source: str
    model: str | None
    started_at: float
    last_active: float | None
    message_count: int
    preview: str
    ended_at: float | None
    end_reason: str | None
    # The compression chain, root first.
    session_ids: list[str]


class MessageWindow(TypedDict):
    """A message and its neighbours: :meth:`SessionStoreContract.get_messages_around`."""

    session_id: str
    anchor: MessageRow
    messages: list[MessageRow]
    # Rows of the session beyond the window on each side.
    messages_before: int
    messages_after: int
    window: int


class SessionStoreContract(Protocol):
    """The public API of a session store, whatever holds the rows.

    Every method is one transaction: several calls see other writers' commits in
    between, one call never a half-written state. Errors are
    :class:`~memstrata.errors.SessionStoreError` and its subclasses.
    """

    # Typo correction of natural queries (memstrata.query.spelling): search.typos.
    typos: bool

    # -- sessions ------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        source: str = "cli",
        user_id: str | None = None,
        model: str | None = None,
        model_config: Mapping[str, Any] | str | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        lineage_kind: str | None = None,
        started_at: float | None = None,
        title: str | None = None,
    ) -> str: ...

    def get_session(self, session_id: str) -> SessionRow | None: ...

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool: ...

    def reopen_session(self, session_id: str) -> None: ...

    def update_system_prompt(self, session_id: str, prompt: str | None) -> None: ...

    def update_token_counts(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_calls: int = 1,
    ) -> None: ...

    def set_session_archived(self, session_id: str, archived: bool = True) -> None: ...

    def delete_session(self, session_id: str) -> list[str]: ...

    def prune_sessions(
        self,
        *,
        older_than: float | timedelta,
        source: str | None = None,
        dry_run: bool = False,
    ) -> list[str]: ...

    def resolve_session_id(self, prefix: str) -> str: ...

    def resolve_session(self, ref: str) -> str:
        """An exact id, a unique id prefix (a cut ``…`` cell too) or an exact title."""
        ...

    def list_namespaces(self) -> list[dict[str, Any]]:
        """Every tenant of the database with its counts; a SQLite file is one, named None."""
        ...

    def short_ids(self, session_ids: Iterable[str], min_chars: int = 8) -> dict[str, str]:
        """The shortest unique prefix of each id, for tables."""
        ...

    # -- titles and lineage --------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> str | None: ...

    def get_session_title(self, session_id: str) -> str | None: ...

    def resolve_session_by_title(self, title: str) -> str | None: ...

    def get_next_title_in_lineage(self, title: str) -> str: ...

    def get_compression_tip(self, session_id: str) -> str: ...

    def get_lineage_root(self, session_id: str) -> str: ...

    def get_compression_chain(self, session_id: str) -> list[str]: ...

    def get_lineage_ids(self, session_id: str) -> list[str]: ...

    def live_session_ids(self, current_session_id: str | None) -> list[str]: ...

    def list_sessions_rich(
        self,
        *,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_archived: bool = False,
        order_by_last_active: bool = True,
        active_since: float | None = None,
        active_until: float | None = None,
    ) -> list[SessionListing]: ...

    # -- messages ------------------------------------------------------------------------

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | list[Any] | dict[str, Any] | None = None,
        *,
        tool_name: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | str | None = None,
        tool_call_id: str | None = None,
        timestamp: float | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        api_content: str | list[Any] | dict[str, Any] | None = None,
    ) -> int: ...

    def append_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]: ...

    def get_messages(
        self, session_id: str, *, include_inactive: bool = False
    ) -> list[MessageRow]: ...

    def get_message(self, message_id: int) -> MessageRow | None: ...

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]: ...

    def get_messages_around(self, message_id: int, window: int = 5) -> MessageWindow: ...

    def archive_messages(
        self, session_id: str, ids: Iterable[int] | None = None, compacted: bool = True
    ) -> int: ...

    def archive_and_compact(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]: ...

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        active_only: bool = False,
    ) -> list[int]: ...

    def delete_messages(self, message_ids: Iterable[int]) -> int: ...

    def list_message_ids(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        session_ids: Iterable[str] | None = None,
    ) -> list[int]: ...

    def visible_messages(
        self,
        session_ids: Sequence[str],
        *,
        hide_live: Sequence[str] = (),
        below: int | None = None,
        above: int | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]: ...

    def count_visible(
        self,
        session_ids: Sequence[str],
        *,
        hide_live: Sequence[str] = (),
        below: int | None = None,
        above: int | None = None,
    ) -> int: ...

    # -- search --------------------------------------------------------------------------

    def search_messages(
        self,
        query: str | None,
        *,
        role_filter: str | Iterable[str] | None = None,
        source_filter: str | Iterable[str] | None = None,
        exclude_sources: str | Iterable[str] | None = None,
        exclude_session_ids: str | Iterable[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        sort: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_inactive: bool = False,
        dates: bool = True,
        include_tool_traffic: bool = False,
    ) -> list[MessageHit]: ...

    def search_sessions(
        self,
        query: str | None,
        *,
        limit: int = 10,
        role_filter: str | Iterable[str] | None = None,
        source_filter: str | Iterable[str] | None = None,
        exclude_sources: str | Iterable[str] | None = None,
        exclude_session_ids: str | Iterable[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        include_inactive: bool = False,
        include_tool_traffic: bool = False,
        by_lineage: bool = False,
        top_hits: int = ...,
        hit_decay: float = ...,
        dates: bool = True,
        speakers: bool = False,
        embedder: Embedder | None = None,
        subqueries: Sequence[str] = (),
    ) -> list[SessionHit]: ...

    def rank(
        self,
        query: str | None,
        filters: Filters | None = None,
        *,
        k: int = ...,
        dates: bool = True,
        speakers: bool = False,
        embedder: Embedder | None = None,
        subqueries: Sequence[str] = (),
    ) -> RankedQuery: ...

    def respell(self, query: str | None) -> tuple[str | None, dict[str, str]]: ...

    def find_conversations(
        self,
        query: str,
        filters: Filters,
        *,
        limit: int,
        current_session_id: str | None = None,
        dates: bool = True,
        embedder: Embedder | None = None,
        subqueries: Sequence[str] = (),
        typos: bool = True,
    ) -> tuple[list[dict[str, Any]], int]: ...

    # -- caches: summaries, query expansions, vectors, metadata --------------------------

    def get_cached_summary(
        self, tip_session_id: str, message_count: int, last_message_id: int, query: str
    ) -> str | None: ...

    def cache_summary(
        self,
        *,
        tip_session_id: str,
        root_session_id: str,
        message_count: int,
        last_message_id: int,
        query: str,
        model: str,
        summary: str,
    ) -> None: ...

    def clear_summary_cache(self, session_ids: Iterable[str] | None = None) -> int: ...

    def get_cached_expansion(self, model: str, query: str) -> str | None: ...

    def cache_expansion(self, model: str, query: str, subqueries: str) -> None: ...

    def clear_query_expansions(self) -> int: ...

    def count_unvectored(self, model: str) -> int: ...

    def unvectored_messages(
        self, model: str, *, after: int = 0, limit: int = 64
    ) -> list[tuple[int, str, str | None]]: ...

    def store_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes]) -> int: ...

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str | None) -> None: ...

    # -- maintenance ---------------------------------------------------------------------

    @property
    def durability(self) -> Durability: ...

    def check_indexes(self) -> list[str]: ...

    def reindex(self, progress: Any = None) -> dict[str, int]: ...

    def optimize(self) -> None: ...

    def analyze(self) -> None: ...

    def vacuum(self) -> None: ...

    def integrity_check(self) -> dict[str, Any]: ...

    def index_counts(self) -> dict[str, int]: ...

    def stats(self) -> dict[str, Any]: ...

    def secure_deletes(self) -> AbstractContextManager[None]: ...

    def write(self) -> AbstractContextManager[Any]:
        """One write transaction: store calls made inside it on the same thread join it,
        so several calls commit together or not at all."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
