"""The session store's public API and every rule of it, written once for all backends.

:class:`BaseSessionStore` validates arguments, encodes values, numbers titles, walks
lineage, shapes listings and ranks searches; a backend gives it transactions
(:meth:`BaseSessionStore._transaction`) whose primitives
(:class:`~memstrata.store.backend.Transaction`) alone hold SQL, and its maintenance
methods. :class:`~memstrata.store.sqlite.store.SessionStore` (one SQLite file, the
default) and :class:`~memstrata.store.postgres.store.PostgresSessionStore` (a tenant of
a PostgreSQL database) are the two shipped; ``docs/architecture.md`` shows how to add one.

The method names follow Hermes' ``SessionDB`` (``append_message``, ``search_messages``,
``get_compression_tip``, ``list_sessions_rich``) so that code written against Hermes ports
with little change.
"""

from __future__ import annotations

import abc
import hashlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from memstrata.closing import Closing
from memstrata.errors import (
    AmbiguousSessionError,
    SessionNotFoundError,
    SessionStoreError,
)
from memstrata.query.compile import compile_query
from memstrata.query.filters import Filters, make_filters
from memstrata.query.paging import MAX_PAGE, SQL_INTEGERS
from memstrata.query.spelling import may_correct, respell
from memstrata.store import lineage, listing, titles
from memstrata.store.backend import HIDDEN_KINDS, ListingFilter, Transaction
from memstrata.store.codec import (
    TOKEN_COLUMNS,
    MessageValues,
    decode_model_config,
    message_values,
    prune_cutoff,
    session_values,
    text_field,
    timestamp_bounds,
    usage_values,
)
from memstrata.store.contract import (
    Durability,
    MessageHit,
    MessageRow,
    MessageWindow,
    SessionHit,
    SessionListing,
    SessionRow,
)
from memstrata.store.hits import hit_dicts
from memstrata.store.rank import (
    CANDIDATES,
    MESSAGE_CANDIDATES,
    SESSION_HIT_DECAY,
    SESSION_TOP_HITS,
    RankedQuery,
    aggregate_sessions,
    check_paging,
    check_session_scoring,
    session_results,
)
from memstrata.store.rank import rank_query as rank_in

if TYPE_CHECKING:
    from memstrata.store.vectors import Embedder

# Prefixes longer than this are not searched (exact ids of any length still are).
MAX_ID_CHARS = 1_000
# A prune deletes this many sessions per transaction, so live agents never wait long.
PRUNE_BATCH = 100


def not_found(session_id: str) -> SessionNotFoundError:
    """The error for an unknown id, saying how to get a valid one."""
    return SessionNotFoundError(
        f"No session {session_id!r}. Create it with create_session() first, or find the id "
        "with `memstrata sessions list`."
    )


class BaseSessionStore(Closing, abc.ABC):
    """The L2 session store: sessions, their messages and full-text search over them.

    Safe to share between threads. Every method is one transaction: several calls see
    other writers' commits in between, one call never a half-written state.

    ``typos`` (``search.typos`` of the configuration the store opened with; settable)
    turns typo correction of natural queries on or off for every search of the store.
    """

    typos: bool = True

    # -- what a backend provides ---------------------------------------------------------

    @abc.abstractmethod
    def _transaction(
        self, *, write: bool = False, snapshot: bool = False
    ) -> AbstractContextManager[Transaction]:
        """One transaction: committed on return, rolled back on error. A write takes the
        write lock up front; ``snapshot`` makes every read of a read transaction see one
        state of the database."""

    def _append_transaction(self) -> AbstractContextManager[Transaction]:
        """The transaction of :meth:`append_messages`, whose only write is one
        ``insert_messages``: a write transaction, unless the backend makes that insert
        atomic on its own."""
        return self._transaction(write=True)

    @property
    @abc.abstractmethod
    def durability(self) -> Durability:
        """The durability mode in effect ("normal" or "full")."""

    @abc.abstractmethod
    def check_indexes(self) -> list[str]:
        """Problems with the full-text indexes; [] when healthy."""

    @abc.abstractmethod
    def reindex(self, progress: Any = None) -> dict[str, int]:
        """Rebuild the full-text indexes; ``progress(stage, done, total)`` is called per
        stage. Returns the rows each index holds."""

    @abc.abstractmethod
    def optimize(self) -> None:
        """Merge index segments and refresh the planner's statistics."""

    @abc.abstractmethod
    def analyze(self) -> None:
        """Refresh the query planner's statistics."""

    @abc.abstractmethod
    def vacuum(self) -> None:
        """Give the space of deleted rows back."""

    @abc.abstractmethod
    def integrity_check(self) -> dict[str, Any]:
        """``{ok, sqlite, indexes, fix}``: the database's own check and the index check;
        ``fix`` says what to run when not ok."""

    @abc.abstractmethod
    def index_counts(self) -> dict[str, int]:
        """Rows each full-text index, the vector table and the summary cache hold."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counts and sizes for ``memstrata sessions stats``."""

    @contextmanager
    def secure_deletes(self) -> Iterator[None]:
        """While inside, deleted content leaves the storage rather than only being marked
        free (where the backend can tell the difference; see the SQLite store)."""
        yield

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
    ) -> str:
        """Create a session, or fill the still-empty fields of an existing one.

        An upsert: the first writer's non-null values win. ``lineage_kind`` records why a
        child exists: one of ``compression``, ``branch``, ``delegate``, ``reset``.
        """
        values = session_values(
            session_id,
            source=source,
            user_id=user_id,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            parent_session_id=parent_session_id,
            lineage_kind=lineage_kind,
            started_at=started_at,
        )
        clean_title = titles.sanitize_title(title)
        with self._transaction(write=True) as tx:
            parent = values.get("parent_session_id")
            if parent is not None and not tx.session_exists(parent):
                raise SessionNotFoundError(
                    f"Parent session {parent!r} does not exist: create it first."
                )
            tx.upsert_session(values)
            if (
                clean_title is not None
                and tx.session_rows([session_id])[session_id]["title"] is None
            ):
                titles.set_title(tx, session_id, clean_title)
        return session_id

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session row as a dict (``model_config`` decoded when it is JSON), or None."""
        with self._transaction() as tx:
            row = tx.session_rows([session_id]).get(session_id)
        return None if row is None else cast(SessionRow, decode_model_config(dict(row)))

    def _update(
        self,
        session_id: str,
        values: Mapping[str, Any],
        *,
        add: Mapping[str, float] | None = None,
        only_live: bool = False,
    ) -> int:
        with self._transaction(write=True) as tx:
            self._require(tx, session_id)
            if not values and not add:
                return 0
            return tx.update_session(session_id, values, add or {}, only_live)

    @staticmethod
    def _require(tx: Transaction, session_id: str, *, lock: bool = False) -> None:
        if not tx.session_exists(session_id, lock=lock):
            raise not_found(session_id)

    @staticmethod
    def _insert(tx: Transaction, session_id: str, rows: Sequence[MessageValues]) -> list[int]:
        """Insert ``rows`` (none: nothing to do) into the session; not_found when there is
        none. The backend learns it from the statement that counts the rows (on a
        server, one round trip less per append than asking first)."""
        if not rows:
            return []
        ids = tx.insert_messages(session_id, rows)
        if ids is None:
            raise not_found(session_id)
        return ids

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool:
        """End a live session; the first end_reason wins. True if it ended now."""
        when = float(ended_at) if ended_at is not None else time.time()
        reason = text_field(end_reason, "end_reason")
        return bool(
            self._update(session_id, {"ended_at": when, "end_reason": reason}, only_live=True)
        )

    def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at`` and ``end_reason`` so the session is live again."""
        self._update(session_id, {"ended_at": None, "end_reason": None})

    def update_system_prompt(self, session_id: str, prompt: str | None) -> None:
        """Store the system prompt the session was (re)built with."""
        self._update(session_id, {"system_prompt": text_field(prompt, "system_prompt")})

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
    ) -> None:
        """Add one API call's usage to the session's counters."""
        params = usage_values(
            (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens),
            api_calls,
            estimated_cost_usd,
        )
        columns = (*TOKEN_COLUMNS, "api_call_count", "estimated_cost_usd")
        # The cost column is added to only when a cost was given: NULL means unknown.
        self._update(session_id, {}, add=dict(zip(columns, params, strict=False)))

    def set_session_archived(self, session_id: str, archived: bool = True) -> None:
        """Hide a conversation from listings (or show it again); nothing is deleted."""
        self._update(session_id, {"archived": int(archived)})

    # -- titles --------------------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> str | None:
        """Set the sanitised title (None or blank clears it) and return it.

        Raises :class:`~memstrata.errors.TitleConflictError` when another session holds
        it, unless that session is a compression ancestor: then the title moves here.
        """
        clean = titles.sanitize_title(title)
        with self._transaction(write=True) as tx:
            if not tx.session_exists(session_id):
                raise SessionNotFoundError(
                    f"No session {session_id!r}: `memstrata sessions list` shows the ids."
                )
            return titles.set_title(tx, session_id, clean)

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None."""
        with self._transaction() as tx:
            row = tx.session_rows([session_id]).get(session_id)
        return None if row is None else row["title"]

    def resolve_session_by_title(self, title: str) -> str | None:
        """The id titled ``title``, preferring its newest ``"title #N"``; None if none."""
        with self._transaction() as tx:
            return titles.resolve_by_title(tx, title)

    def get_next_title_in_lineage(self, title: str) -> str:
        """``"X"`` → ``"X #2"`` (one above the highest number in use)."""
        with self._transaction() as tx:
            return titles.next_title_in_lineage(tx, title)

    # -- lineage -------------------------------------------------------------------------

    def get_compression_tip(self, session_id: str) -> str:
        """The newest compression continuation of ``session_id`` (itself if none)."""
        with self._transaction() as tx:
            self._require(tx, session_id)
            return lineage.compression_chain(tx, session_id)[-1]

    def get_lineage_root(self, session_id: str) -> str:
        """The session whose listing entry stands for ``session_id``."""
        with self._transaction() as tx:
            self._require(tx, session_id)
            return lineage.lineage_root(tx, session_id)

    def get_compression_chain(self, session_id: str) -> list[str]:
        """The compressed conversation ``session_id`` is part of, oldest session first.

        Its compression ancestors, itself, then its continuations up to the tip: the
        sessions a listing row stands for (delegates and branches are not included).
        """
        with self._transaction(snapshot=True) as tx:
            self._require(tx, session_id)
            return lineage.conversation_chain(tx, session_id)

    def get_lineage_ids(self, session_id: str) -> list[str]:
        """Every session of ``session_id``'s conversation (continuations and delegates)."""
        with self._transaction() as tx:
            self._require(tx, session_id)
            return lineage.lineage_ids(tx, session_id)

    def live_session_ids(self, current_session_id: str | None) -> list[str]:
        """The current session and its descendants through compression and delegate links.

        Their live rows are the model's present context, which recall leaves out.
        Ancestors are not included: what compression removed lives there and must stay
        findable. [] without a current session.
        """
        if not current_session_id:
            return []
        with self._transaction(snapshot=True) as tx:
            return self._live(tx, current_session_id)

    @staticmethod
    def _live(tx: Transaction, current_session_id: str | None) -> list[str]:
        if not current_session_id:
            return []
        found = lineage.descendants(
            tx, [current_session_id], HIDDEN_KINDS, bound=lineage.MAX_HOPS * 10 - 1
        )
        return [current_session_id, *found]

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
    ) -> list[SessionListing]:
        """One row per conversation, each compression chain shown as its tip.

        Keys: id (the compression tip), root_id, title, source, model, started_at,
        last_active, message_count (over the lineage), preview, ended_at, end_reason,
        session_ids. Delegates and continuations are not listed on their own.
        ``active_since``/``active_until`` (Unix seconds, inclusive) keep the conversations
        whose newest activity falls in that span.
        """
        check_paging(limit, offset, None)
        bounds = (active_since, active_until)
        if any(b is not None for b in bounds):
            if not order_by_last_active:
                raise SessionStoreError(
                    "active_since/active_until select by activity: drop "
                    "order_by_last_active=False to use them."
                )
            if any(not isinstance(b, int | float) or b != b for b in bounds if b is not None):
                raise SessionStoreError(
                    "active_since/active_until must be Unix timestamps (numbers of seconds)."
                )
            if (
                active_since is not None
                and active_until is not None
                and active_since > active_until
            ):
                raise SessionStoreError(
                    "active_since is after active_until: swap them or drop one."
                )
        where = ListingFilter(source, tuple(exclude_sources or ()), include_archived)
        with self._transaction(snapshot=True) as tx:
            rows = listing.list_conversations(
                tx,
                where,
                limit=limit,
                offset=offset,
                by_activity=order_by_last_active,
                since=active_since,
                until=active_until,
            )
        return cast(list[SessionListing], rows)

    def resolve_session_id(self, prefix: str) -> str:
        """An exact id, or the one id starting with ``prefix``."""
        if not isinstance(prefix, str) or not prefix:
            raise SessionNotFoundError("Give a session id or a prefix of one.")
        with self._transaction() as tx:
            if tx.session_exists(prefix):
                return prefix
            if len(prefix) > MAX_ID_CHARS:
                raise SessionNotFoundError(
                    f"No session id starts with this {len(prefix):,}-character text: give an "
                    "id from `memstrata sessions list`."
                )
            ids = tx.ids_starting_with(prefix, 6)
        if not ids:
            raise SessionNotFoundError(
                f"No session id starts with {prefix!r}: `memstrata sessions list` shows the ids."
            )
        if len(ids) > 1:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            raise AmbiguousSessionError(
                f"{prefix!r} matches several sessions ({shown}): type more characters of the id."
            )
        return ids[0]

    def resolve_session(self, ref: str) -> str:
        """The session ``ref`` names: an exact id, a unique id prefix, or an exact title
        (its newest ``"title #N"`` continuation).

        A trailing ellipsis (a cell a terminal cut short, pasted back) is dropped and the
        rest read as a prefix. Raises :class:`SessionNotFoundError` when nothing matches and
        :class:`AmbiguousSessionError` when a prefix matches several sessions and no title
        matches exactly.
        """
        if not isinstance(ref, str) or not ref.strip():
            raise SessionNotFoundError("Give a session id, a prefix of one, or a title.")
        ref = ref.strip()
        cut = ref.removesuffix("…").removesuffix("...")
        try:
            return self.resolve_session_id(cut or ref)
        except SessionNotFoundError:
            found = self.resolve_session_by_title(ref)
            if found is None:
                raise SessionNotFoundError(
                    f"No session has the id, id prefix or title {ref!r}: "
                    "`memstrata sessions list` shows both."
                ) from None
            return found
        except AmbiguousSessionError:
            found = self.resolve_session_by_title(ref)
            if found is None:
                raise
            return found

    def list_namespaces(self) -> list[dict[str, Any]]:
        """Every tenant of the database with its counts (``{namespace, sessions, messages,
        memory_rows, last_active}``), by name; a SQLite file is one row, namespace None."""
        with self._transaction(snapshot=True) as tx:
            return tx.namespace_counts()

    def short_ids(self, session_ids: Iterable[str], min_chars: int = 8) -> dict[str, str]:
        """The shortest prefix (at least ``min_chars``) of each id that no other session
        of the store starts with, so a table can show it and every command resolves it."""
        shown: dict[str, str] = {}
        with self._transaction(snapshot=True) as tx:
            for sid in session_ids:
                # Uniqueness only grows with length: bisect on the prefix length.
                low, high = min(min_chars, len(sid)), len(sid)
                while low < high:
                    mid = (low + high) // 2
                    if tx.ids_starting_with(sid[:mid], 2) == [sid]:
                        high = mid
                    else:
                        low = mid + 1
                shown[sid] = sid[:high]
        return shown

    # -- deletion ------------------------------------------------------------------------

    @staticmethod
    def _delete(tx: Transaction, session_ids: Sequence[str]) -> list[str]:
        doomed = [*session_ids, *lineage.delegate_descendants(tx, session_ids)]
        if doomed:
            tx.delete_sessions(doomed)
        return doomed

    def delete_session(self, session_id: str) -> list[str]:
        """Delete a session, its messages (from every index) and its delegate sessions.

        Other children (continuations, branches) are orphaned and become roots. Returns
        the ids deleted.
        """
        with self._transaction(write=True) as tx:
            self._require(tx, session_id, lock=True)
            return self._delete(tx, [session_id])

    def prune_sessions(
        self,
        *,
        older_than: float | timedelta,
        source: str | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete sessions that ended more than ``older_than`` ago (a float counts days).

        Live sessions are never pruned, nor the compressed start of a conversation whose
        tip is live or recent; delegates go with their parent. Returns the ids
        deleted (or that would be, with ``dry_run``).
        """
        cutoff = prune_cutoff(older_than)
        with self._transaction(snapshot=True) as tx:
            ended = tx.ended_before(cutoff, source)
            candidates = set(ended)
            ids = [i for i in ended if lineage.compression_chain(tx, i)[-1] in candidates]
            if dry_run:
                return [*ids, *lineage.delegate_descendants(tx, ids)]
        deleted: list[str] = []
        # Small transactions so live agents are never kept waiting for long.
        for start in range(0, len(ids), PRUNE_BATCH):
            with self._transaction(write=True) as tx:
                # Another process may have deleted some meanwhile.
                alive = [i for i in ids[start : start + PRUNE_BATCH] if tx.session_exists(i)]
                deleted += self._delete(tx, alive)
        return deleted

    def delete_messages(self, message_ids: Iterable[int]) -> int:
        """Delete messages by id from the store, every full-text index and any vectors.

        The sessions they belonged to are recounted (message_count, tool_call_count,
        last_active) in the same transaction; ids that do not exist are ignored. Returns
        how many messages were deleted. Cached summaries are not touched: see
        :meth:`clear_summary_cache` (or :func:`memstrata.ops.forget.forget`, which does both).
        """
        ids = _message_ids(message_ids)
        if not ids:
            return 0
        with self._transaction(write=True) as tx:
            deleted, sessions = tx.delete_messages(sorted(set(ids)))
            for session_id in sessions:
                tx.recount(session_id)
            return deleted

    def clear_summary_cache(self, session_ids: Iterable[str] | None = None) -> int:
        """Drop cached conversation summaries; return how many rows went.

        With ``session_ids``, only the summaries of conversations whose tip or root is
        one of them (pass :meth:`get_lineage_ids` to cover a whole conversation); with
        None, every cached summary.
        """
        ids = None
        if session_ids is not None:
            ids = sorted({text_field(i, "session id") or "" for i in session_ids})
        with self._transaction(write=True) as tx:
            return tx.clear_summaries(ids)

    def clear_query_expansions(self) -> int:
        """Drop every cached query expansion (past questions and their sub-queries).

        :func:`memstrata.ops.forget.forget` calls this: a forgotten phrase may have been
        typed into an earlier search, and a cached expansion costs one model call to rebuild.
        """
        with self._transaction(write=True) as tx:
            return tx.clear_expansions()

    def list_message_ids(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        session_ids: Iterable[str] | None = None,
    ) -> list[int]:
        """Ids of the messages (archived ones too) timestamped in ``[since, until]``.

        Both bounds are inclusive Unix timestamps and optional; ``session_ids`` limits
        the result to those sessions. Ordered by id.
        """
        timestamp_bounds(since, until)  # validates the bounds
        wanted = None if session_ids is None else sorted(set(session_ids))
        with self._transaction() as tx:
            return tx.message_ids(since, until, wanted)

    # -- state_meta ----------------------------------------------------------------------

    def set_meta(self, key: str, value: str | None) -> None:
        """Store a key/value pair in ``state_meta``."""
        clean_key = text_field(key, "key") or ""
        clean_value = text_field(value, "value")
        with self._transaction(write=True) as tx:
            tx.set_meta(clean_key, clean_value)

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        with self._transaction() as tx:
            return tx.get_meta(key)

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
    ) -> int:
        """Append one message and return its id.

        The session must exist (:class:`~memstrata.errors.SessionNotFoundError` otherwise).
        Structured content (list or dict) round-trips; ``tool_calls`` is stored as JSON and
        adds its number of calls to ``tool_call_count``. Use :meth:`append_messages` for a
        whole turn: one transaction instead of one per message.
        """
        message = {
            "role": role,
            "content": content,
            "tool_name": tool_name,
            "tool_calls": tool_calls,
            "tool_call_id": tool_call_id,
            "timestamp": timestamp,
            "token_count": token_count,
            "finish_reason": finish_reason,
            "reasoning": reasoning,
            "api_content": api_content,
        }
        return self.append_messages(session_id, [message])[0]

    def append_messages(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Append several messages (keys as :meth:`append_message`'s arguments; ``name``
        is accepted for ``tool_name``) in one transaction; return their ids in order.

        Every message is validated before the first row is written, so a bad message
        leaves the session untouched.
        """
        # Validated and encoded before the transaction: a bad message costs no lock.
        rows = [message_values(m, i) for i, m in enumerate(messages)]
        with self._append_transaction() as tx:
            if not rows:
                self._require(tx, session_id)  # nothing to insert says nothing of it
            return self._insert(tx, session_id, rows)

    def get_messages(self, session_id: str, *, include_inactive: bool = False) -> list[MessageRow]:
        """The session's live messages ordered by id (archived ones too if asked)."""
        with self._transaction() as tx:
            rows = tx.messages(session_id, include_inactive=include_inactive)
        return cast(list[MessageRow], rows)

    def get_message(self, message_id: int) -> MessageRow | None:
        """One message by id (of any session, archived or not), or None."""
        if isinstance(message_id, bool) or not isinstance(message_id, int):
            raise SessionStoreError(f"A message id is an integer, got {message_id!r}.")
        if not -(2**63) <= message_id < 2**63:
            return None  # no database integer holds it
        with self._transaction() as tx:
            return cast(MessageRow | None, tx.message(message_id))

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]:
        """The live messages as OpenAI chat dicts (role, content, tool_calls, ...)."""
        return as_conversation(self.get_messages(session_id))

    def get_messages_around(self, message_id: int, window: int = 5) -> MessageWindow:
        """A message and up to ``window`` neighbours each side.

        Returns ``{session_id, anchor, messages, messages_before, messages_after, window}``
        where ``messages_before``/``messages_after`` count the rows beyond the window.
        Archived rows are included (and flagged by ``active``): scrolling through a hit
        in a compacted part of a conversation must show its context.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise SessionStoreError("window must be zero or more.")
        window = min(window, MAX_PAGE)  # more than any session holds: all of it
        missing = SessionStoreError(
            f"No message {message_id}: it may have been deleted; search again for fresh ids."
        )
        if isinstance(message_id, bool) or not isinstance(message_id, int):
            raise missing
        with self._transaction(snapshot=True) as tx:
            anchor = tx.message(message_id) if message_id in SQL_INTEGERS else None
            if anchor is None:
                raise missing
            sid = str(anchor["session_id"])
            before = tx.neighbours(sid, message_id, window, before=True)
            after = tx.neighbours(sid, message_id, window, before=False)
            first = int(before[-1]["id"]) if before else message_id
            last = int(after[-1]["id"]) if after else message_id
            counts = tx.count_beyond(sid, first, last)
        return {
            "session_id": sid,
            "anchor": cast(MessageRow, anchor),
            "messages": cast(list[MessageRow], [*reversed(before), anchor, *after]),
            "messages_before": counts[0],
            "messages_after": counts[1],
            "window": window,
        }

    def archive_messages(
        self, session_id: str, ids: Iterable[int] | None = None, compacted: bool = True
    ) -> int:
        """Soft-archive live messages (all when ``ids`` is None); return how many.

        ``compacted=True`` (compaction) keeps them searchable; ``False`` (rewind/undo)
        hides them from search. Nothing leaves the indexes.
        """
        wanted = None if ids is None else _message_ids(ids)
        with self._transaction(write=True) as tx:
            self._require(tx, session_id, lock=True)
            changed = tx.archive_messages(session_id, wanted, compacted)
            tx.recount(session_id)
            return changed

    def archive_and_compact(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """In-place compaction in one transaction: archive the live rows, insert ``messages``."""
        rows = [message_values(m, i) for i, m in enumerate(messages)]
        with self._transaction(write=True) as tx:
            self._require(tx, session_id, lock=True)
            tx.archive_messages(session_id, None, True)
            ids = self._insert(tx, session_id, rows)
            tx.recount(session_id)
            return ids

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        active_only: bool = False,
    ) -> list[int]:
        """Delete the session's messages (live ones only if asked) and insert ``messages``.

        Destructive: the deleted rows leave every index. One transaction.
        """
        rows = [message_values(m, i) for i, m in enumerate(messages)]
        with self._transaction(write=True) as tx:
            self._require(tx, session_id, lock=True)
            tx.delete_session_messages(session_id, active_only=active_only)
            ids = self._insert(tx, session_id, rows)
            tx.recount(session_id)
            return ids

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
    ) -> list[MessageHit]:
        """Full-text search over every message, best match first (or newest/oldest first
        with ``sort``); never a syntax error, whatever the query.

        A natural-language query ORs its content words, a misspelt word that no message
        holds searching the English word one edit away that one does (``educaton``:
        ``education``); ``AND``/``OR``/``NOT``, ``"phrases"`` and ``prefix*`` keep their
        meaning and are taken as written (see ``docs/search.md``), and
        an explicit query that finds fewer than ``limit`` messages adds those of its words
        after its own. Filters (a list or a comma-separated string each) apply inside the
        search. Archived compaction rows are found; rewound rows only with
        ``include_inactive``. With ``dates`` (the default) a natural-language query that
        names calendar dates ranks the messages written then higher. The traffic of
        ``session_search`` (its call and result) is left out unless
        ``include_tool_traffic``: it quotes what it found.

        Each hit has ``id, session_id, role, snippet`` (matches between ``>>>`` and
        ``<<<``), ``timestamp, tool_name, source, model, session_started, score`` (higher
        is better) and ``context``: the previous and next message of the same session as
        ``{role, content}`` with content cut to 200 characters.
        """
        check_paging(limit, offset, sort, query)
        filters = make_filters(
            role_filter=role_filter,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            exclude_session_ids=exclude_session_ids,
            since=since,
            until=until,
            include_inactive=include_inactive,
            include_tool_traffic=include_tool_traffic,
        )
        k = max(MESSAGE_CANDIDATES, offset + limit)
        with self._transaction(snapshot=True) as tx:
            if sort in ("newest", "oldest"):
                # Typos as a ranked search corrects them (rank_query does it there).
                compiled = compile_query(self._respell_in(tx, query)[0])
                if compiled.is_empty:
                    return []
                cands = tx.candidates(
                    compiled, filters, k, "newest" if sort == "newest" else "oldest"
                )
            else:
                ranked = rank_in(
                    tx, query, filters, k=k, dates=dates, want=offset + limit, typos=self.typos
                )
                compiled, cands = ranked.compiled, ranked.candidates
            hits = hit_dicts(tx, compiled, cands[offset : offset + limit], filters)
        return cast(list[MessageHit], hits)

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
        top_hits: int = SESSION_TOP_HITS,
        hit_decay: float = SESSION_HIT_DECAY,
        dates: bool = True,
        speakers: bool = False,
        embedder: Embedder | None = None,
        subqueries: Sequence[str] = (),
    ) -> list[SessionHit]:
        """Rank sessions for ``query``: each scores its best ``top_hits`` messages, the i-th
        weighted ``hit_decay ** i``.

        The evidence options: ``dates`` (on) boosts messages written inside a date the
        question names; ``speakers`` (off) boosts transcript lines of a person it names;
        ``embedder`` adds hybrid recall from the vectors that
        :func:`memstrata.search.embedders.index_pending` stored; ``subqueries`` (from
        :func:`memstrata.search.expansion.expand_query`) add their candidates.

        With ``by_lineage`` the sessions of one lineage (a root and every descendant
        through compression and delegate links) are pooled and reported once, under the
        session holding the best hit, with ``lineage_root`` set. Each result has
        ``session_id, lineage_root, score, hit_count, match_message_id, matched_role,
        snippet, timestamp, source, model, title, session_started`` and ``message_ids``
        (its best hits, best first).
        """
        check_paging(limit, 0, None, query)
        check_session_scoring(top_hits, hit_decay)
        filters = make_filters(
            role_filter=role_filter,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            exclude_session_ids=exclude_session_ids,
            since=since,
            until=until,
            include_inactive=include_inactive,
            include_tool_traffic=include_tool_traffic,
        )
        with self._transaction(snapshot=True) as tx:
            found = rank_in(
                tx,
                query,
                filters,
                dates=dates,
                speakers=speakers,
                embedder=embedder,
                subqueries=subqueries,
                want=limit,
                by_session=True,
                typos=self.typos,
            )
            sids = {c.session_id for c in found.candidates}
            roots = lineage.lineage_roots(tx, sids) if by_lineage else {s: s for s in sids}
            ranked = aggregate_sessions(
                found.candidates, roots, top_hits=top_hits, decay=hit_decay
            )[:limit]
            best = [group[0] for _, group in ranked]
            hits = {h["id"]: h for h in hit_dicts(tx, found.compiled, best, filters, context=False)}
            rows = tx.session_rows([c.session_id for c in best])
        titles_by_id = {sid: row["title"] for sid, row in rows.items()}
        return cast(
            list[SessionHit],
            session_results(
                ranked,
                hits,
                titles_by_id,
                by_lineage=by_lineage,
                top_hits=top_hits,
                hit_decay=hit_decay,
            ),
        )

    def rank(
        self,
        query: str | None,
        filters: Filters | None = None,
        *,
        k: int = CANDIDATES,
        dates: bool = True,
        speakers: bool = False,
        embedder: Embedder | None = None,
        subqueries: Sequence[str] = (),
    ) -> RankedQuery:
        """The ranked candidates of ``query`` (messages, best first) with every evidence
        option applied: what :meth:`search_messages` and :meth:`search_sessions` build on."""
        with self._transaction(snapshot=True) as tx:
            return rank_in(
                tx,
                query,
                filters or Filters(),
                k=k,
                dates=dates,
                speakers=speakers,
                embedder=embedder,
                subqueries=subqueries,
                typos=self.typos,
            )

    def respell(self, query: str | None) -> tuple[str | None, dict[str, str]]:
        """``query`` with its typos corrected against this store's words, and the
        corrections (misspelt word -> the word searched), as every search applies them
        (:mod:`memstrata.query.spelling`; none when :attr:`typos` is off): for a caller
        that shows the query or cuts text around its words."""
        if not self.typos or not query or not may_correct(query):
            return query, {}
        with self._transaction(snapshot=True) as tx:
            return self._respell_in(tx, query)

    def _respell_in(self, tx: Transaction, query: str | None) -> tuple[str | None, dict[str, str]]:
        """:meth:`respell` inside the transaction ``tx``."""
        return respell(query, tx.held_words) if self.typos else (query, {})

    # -- recall: conversations as session_search shows them ------------------------------

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
    ) -> tuple[list[dict[str, Any]], int]:
        """The best ``limit`` conversations (lineages) for ``query`` and how many had hits.

        The live rows of the current conversation (see :meth:`live_session_ids`) are left
        out. Each result: ``root``, ``best`` (the best hit, as :meth:`search_messages`
        gives it), ``message_ids`` (its best hits), ``chain`` (the compressed
        conversation holding the best hit, oldest first), ``meta`` (title, source,
        started_at, last_active of the chain), ``live`` (the hidden sessions), and
        ``message_count``, ``last_message_id``, ``chars`` of what recall may show of it.
        One snapshot for all of it. ``typos=False``: the query's typos are not corrected
        (a caller that corrected them with :meth:`respell` already), whatever
        :attr:`typos` says.
        """
        out: list[dict[str, Any]] = []
        with self._transaction(snapshot=True) as tx:
            live = tuple(self._live(tx, current_session_id))
            filters = replace(filters, hide_live=live)
            found = rank_in(
                tx,
                query,
                filters,
                dates=dates,
                embedder=embedder,
                subqueries=subqueries,
                want=limit,
                by_session=True,
                typos=self.typos and typos,
            )
            roots = lineage.lineage_roots(tx, {c.session_id for c in found.candidates})
            ranked = aggregate_sessions(found.candidates, roots)[:limit]
            best = [group[0] for _, group in ranked]
            hits = {h["id"]: h for h in hit_dicts(tx, found.compiled, best, filters, context=False)}
            for (root, group), top in zip(ranked, best, strict=True):
                hit = hits.get(top.id)
                if hit is None:
                    continue
                chain = lineage.conversation_chain(tx, top.session_id)
                count, last_id, chars = tx.visible_size(chain, live)
                out.append(
                    {
                        "root": root,
                        "best": hit,
                        "message_ids": [c.id for c in group[:5]],
                        "chain": chain,
                        "meta": _chain_meta(tx.session_rows(chain), chain),
                        "live": live,
                        "message_count": count,
                        "last_message_id": last_id,
                        "chars": chars,
                    }
                )
            searched = len({roots.get(c.session_id, c.session_id) for c in found.candidates})
        return out, searched

    def visible_messages(
        self,
        session_ids: Sequence[str],
        *,
        hide_live: Sequence[str] = (),
        below: int | None = None,
        above: int | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Messages of these sessions that recall may show, ordered by id (newest first
        if asked): live and compaction-archived rows, not rewound ones, and not the live
        rows of the ``hide_live`` sessions (the current conversation's context)."""
        with self._transaction() as tx:
            return tx.visible(
                list(session_ids),
                list(hide_live),
                below=below,
                above=above,
                newest_first=newest_first,
                limit=limit,
            )

    def count_visible(
        self,
        session_ids: Sequence[str],
        *,
        hide_live: Sequence[str] = (),
        below: int | None = None,
        above: int | None = None,
    ) -> int:
        """How many messages :meth:`visible_messages` would return without a limit."""
        with self._transaction() as tx:
            return tx.count_visible(list(session_ids), list(hide_live), below=below, above=above)

    # -- caches --------------------------------------------------------------------------

    def get_cached_summary(
        self, tip_session_id: str, message_count: int, last_message_id: int, query: str
    ) -> str | None:
        """The summary cached for this state of a conversation and this query, or None."""
        with self._transaction() as tx:
            return tx.cached_summary(
                tip_session_id, message_count, last_message_id, cache_key(query)
            )

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
    ) -> None:
        """Cache a summary; older ones of the same conversation and query are dropped."""
        entry = {
            "tip_session_id": tip_session_id,
            "root_session_id": root_session_id,
            "message_count": message_count,
            "last_message_id": last_message_id,
            "query": cache_key(query),
            "model": model,
            "summary": summary,
            "created_at": time.time(),
        }
        with self._transaction(write=True) as tx:
            tx.put_summary(entry)

    def get_cached_expansion(self, model: str, query: str) -> str | None:
        """The cached sub-queries (JSON) of a normalised question under ``model``."""
        with self._transaction() as tx:
            return tx.cached_expansion(cache_key(model), cache_key(query))

    def cache_expansion(self, model: str, query: str, subqueries: str) -> None:
        """Cache the sub-queries (JSON) of a normalised question under ``model``."""
        with self._transaction(write=True) as tx:
            tx.put_expansion(cache_key(model), cache_key(query), subqueries, time.time())

    # -- message vectors -----------------------------------------------------------------

    def count_unvectored(self, model: str) -> int:
        """Messages without a vector of ``model`` yet."""
        with self._transaction() as tx:
            return tx.count_unvectored(model)

    def unvectored_messages(
        self, model: str, *, after: int = 0, limit: int = 64
    ) -> list[tuple[int, str, str | None]]:
        """``(id, text, tool name)`` of up to ``limit`` messages after id ``after`` that
        have no vector of ``model``, oldest first."""
        with self._transaction() as tx:
            return tx.unvectored(model, after, limit)

    def store_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes]) -> int:
        """Store unit vectors (float32 blobs; b"" for a message with nothing to embed) of
        the messages that still exist; how many were stored."""
        with self._transaction(write=True) as tx:
            return tx.put_vectors(model, dims, vectors, time.time())


def _chain_meta(rows: Mapping[str, Mapping[str, Any]], chain: Sequence[str]) -> dict[str, Any]:
    known = [rows[s] for s in chain if s in rows]
    title = next((r["title"] for r in reversed(known) if r["title"]), None)
    actives = [r["last_active"] for r in known if r["last_active"] is not None]
    return {
        "title": title,
        "source": known[0]["source"] if known else None,
        "started_at": known[0]["started_at"] if known else None,
        "last_active": max(actives) if actives else None,
    }


def as_conversation(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat message dicts (role, content, tool_calls, tool_call_id, name)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
        if message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        if message.get("tool_name") and message["role"] == "tool":
            item["name"] = message["tool_name"]
        out.append(item)
    return out


# A cached summary or expansion is found by its query (and model): PostgreSQL indexes
# that key with the row, and an index row past about 2,700 bytes fails the write (a
# pasted dialogue as a session_search query could not cache its summaries). A key past
# CACHE_KEY_BYTES is its start and a digest of the whole, on both backends (a long query
# cached under its whole text before is missed once).
CACHE_KEY_BYTES = 1000


def cache_key(text: str) -> str:
    """``text`` as a cache key of at most CACHE_KEY_BYTES bytes (itself when short)."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= CACHE_KEY_BYTES:
        return text
    return text[:200] + " #sha256:" + hashlib.sha256(raw).hexdigest()


def _message_ids(values: Iterable[int]) -> list[int]:
    """Message ids as ints, leaving out those past SQL's 64-bit integers (no row has
    one, and SQLite's driver raises OverflowError on them); anything else is refused
    with the fix."""
    if isinstance(values, str | bytes):
        raise SessionStoreError("message_ids must be a list of integer message ids.")
    ids: list[int] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SessionStoreError(
                f"Message ids are integers (got {value!r}); `memstrata sessions show` lists them."
            )
        if value in SQL_INTEGERS:
            ids.append(value)
    return ids


# The search methods as functions of a store, for code that prefers them:
# ``memstrata.search_messages(store, "query")`` is ``store.search_messages("query")``.
search_messages = BaseSessionStore.search_messages
search_sessions = BaseSessionStore.search_sessions


def rank_query(
    store: BaseSessionStore,
    query: str | None,
    filters: Filters | None = None,
    *,
    k: int = CANDIDATES,
    dates: bool = True,
    speakers: bool = False,
    embedder: Embedder | None = None,
    subqueries: Sequence[str] = (),
) -> RankedQuery:
    """The ranked candidates of ``query`` in ``store`` (see :meth:`BaseSessionStore.rank`)."""
    if not isinstance(store, BaseSessionStore):
        raise SessionStoreError(
            f"rank_query takes a session store, not {type(store).__name__}: pass the "
            "SessionStore or PostgresSessionStore (a connection is no longer accepted)."
        )
    return store.rank(
        query,
        filters,
        k=k,
        dates=dates,
        speakers=speakers,
        embedder=embedder,
        subqueries=subqueries,
    )
