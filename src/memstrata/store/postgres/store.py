"""The L2 session store on PostgreSQL, for deployments that serve many users.

``PostgresSessionStore`` keeps the public methods, return shapes and errors of
:class:`memstrata.store.sqlite.store.SessionStore`, so code written against one runs on the other.
What differs is underneath: a psycopg connection pool instead of one file, a tenant
(``namespace``) that scopes every row and every query, and the three full-text indexes
as a generated ``tsvector`` column, a ``pg_trgm`` expression index and a CJK bigram
``tsvector`` (see :mod:`memstrata.store.postgres.search`).

    with PostgresSessionStore("postgresql://127.0.0.1:5432/app", namespace="alice") as store:
        store.create_session("s1", source="cli")
        store.append_messages("s1", [{"role": "user", "content": "hi"}])
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, cast

from memstrata.closing import Closing
from memstrata.config import Config
from memstrata.errors import NamespaceError, SessionStoreError
from memstrata.store.codec import (
    TOKEN_COLUMNS,
    decode_model_config,
    prune_cutoff,
    session_values,
    text_field,
    timestamp_bounds,
    usage_values,
)
from memstrata.store.postgres import lineage, maintenance, messages, sessions
from memstrata.store.postgres.codec import pg_text, session_row
from memstrata.store.postgres.database import Conn, Database, Durability
from memstrata.store.sqlite.messages import as_conversation
from memstrata.store.sqlite.titles import sanitize_title

# A tenant name: a user id, an agent name, an e-mail address; never empty, no spaces.
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/+=-]{0,127}$")
_CONNECT_TIMEOUT_S = 10.0


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` if it is a valid tenant name; raise :class:`NamespaceError`."""
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise NamespaceError(
            f"Invalid namespace {namespace!r}: use 1-128 characters, letters, digits and "
            "_ . : @ / + = -, starting with a letter or digit (for example a user id)."
        )
    return namespace


class PostgresSessionStore(Closing):
    """The L2 session store on PostgreSQL, scoped to one tenant (``namespace``).

    ``dsn`` is a libpq connection string (``postgresql://user@host:5432/db``); the schema
    is created or upgraded on open. ``pool_size`` (default ``store.pool_size``) bounds
    the connections this process keeps; ``durability`` overrides ``store.durability``.
    Safe to share between threads; any number of processes and machines may use one
    database, each tenant seeing only its own rows.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        namespace: str | None = None,
        config: Config | None = None,
        pool_size: int | None = None,
        durability: Durability | None = None,
        connect_timeout: float = _CONNECT_TIMEOUT_S,
    ) -> None:
        cfg = config if config is not None else Config.load()
        chosen_dsn = dsn if dsn is not None else str(cfg.get("store.dsn"))
        if not chosen_dsn:
            raise SessionStoreError(
                "No PostgreSQL DSN: pass one, or set it with "
                "`memstrata config set store.dsn postgresql://user@host:5432/db`."
            )
        self._namespace = validate_namespace(
            namespace if namespace is not None else cfg.get("store.namespace")
        )
        mode = durability if durability is not None else cfg.get("store.durability")
        size = pool_size if pool_size is not None else cfg.get("store.pool_size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SessionStoreError(
                f"pool_size must be a positive integer, got {size!r} (store.pool_size)."
            )
        self._db = Database(
            chosen_dsn,
            size=size,
            durability=cast(Durability, mode),
            connect_timeout=connect_timeout,
        )

    # -- lifecycle and connections ------------------------------------------------

    @property
    def namespace(self) -> str:
        """The tenant whose rows this store reads and writes."""
        return self._namespace

    @property
    def dsn(self) -> str:
        """The connection string, with any password replaced by ``***``."""
        return self._db.dsn

    @property
    def durability(self) -> Durability:
        """The durability mode in effect ("normal" or "full")."""
        return self._db.durability

    def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        self._db.close()

    def connection(self, *, snapshot: bool = False) -> AbstractContextManager[Conn]:
        """One pooled connection inside a transaction: commit on return, roll back on error.

        Rows are dicts. A ``connection()`` opened inside another on the same thread joins
        the outer transaction. ``snapshot`` makes the transaction REPEATABLE READ, so
        several reads see one state of the database. Queries must filter on
        :attr:`namespace` themselves.
        """
        return self._db.connection(snapshot=snapshot)

    def write(self) -> AbstractContextManager[Conn]:
        """The SQLite store's name for one write transaction: :meth:`connection`."""
        return self.connection()

    def _require(self, conn: Conn, session_id: str, *, lock: bool = False) -> None:
        sessions.require(conn, self._namespace, session_id, lock=lock)

    # -- sessions -------------------------------------------------------------------

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
        """Create a session, or fill the still-empty fields of an existing one (upsert)."""
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
        clean = {k: pg_text(v) if isinstance(v, str) else v for k, v in values.items()}
        clean_title = sanitize_title(title)
        with self.connection() as conn:
            sessions.upsert(conn, self._namespace, clean, clean_title)
        return session_id

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row as a dict (``model_config`` decoded when it is JSON), or None."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT * FROM sessions WHERE namespace = %s AND id = %s",
                (self._namespace, session_id),
            ).fetchone()
        if row is None:
            return None
        session = session_row(row)
        return decode_model_config(session)

    def _update(self, session_id: str, sql: str, params: Sequence[Any]) -> int:
        with self.connection() as conn:
            self._require(conn, session_id)
            return int(conn.execute(sql, [*params, self._namespace, session_id]).rowcount)

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool:
        """End a live session; the first end_reason wins. True if it ended now."""
        when = float(ended_at) if ended_at is not None else time.time()
        return bool(
            self._update(
                session_id,
                "UPDATE sessions SET ended_at = %s, end_reason = %s "
                "WHERE namespace = %s AND id = %s AND ended_at IS NULL",
                (when, pg_text(text_field(end_reason, "end_reason"))),
            )
        )

    def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at`` and ``end_reason`` so the session is live again."""
        self._update(
            session_id,
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL "
            "WHERE namespace = %s AND id = %s",
            (),
        )

    def update_system_prompt(self, session_id: str, prompt: str | None) -> None:
        """Store the system prompt the session was (re)built with."""
        self._update(
            session_id,
            "UPDATE sessions SET system_prompt = %s WHERE namespace = %s AND id = %s",
            (pg_text(text_field(prompt, "system_prompt")),),
        )

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
        sets = ", ".join(f"{c} = {c} + %s" for c in TOKEN_COLUMNS)
        cost = ""
        if estimated_cost_usd is not None:
            cost = ", estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + %s"
        self._update(
            session_id,
            f"UPDATE sessions SET {sets}, api_call_count = api_call_count + %s{cost} "
            "WHERE namespace = %s AND id = %s",
            params,
        )

    def set_session_archived(self, session_id: str, archived: bool = True) -> None:
        """Hide a conversation from listings (or show it again); nothing is deleted."""
        self._update(
            session_id,
            "UPDATE sessions SET archived = %s WHERE namespace = %s AND id = %s",
            (int(archived),),
        )

    # -- titles ------------------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> str | None:
        """Set the sanitised title (None or blank clears it) and return it.

        Raises :class:`~memstrata.errors.TitleConflictError` when another session of the
        tenant holds it, unless that session is a compression ancestor.
        """
        with self.connection() as conn:
            return sessions.set_title(conn, self._namespace, session_id, title)

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None."""
        with self.connection() as conn:
            return sessions.title_of(conn, self._namespace, session_id)

    def resolve_session_by_title(self, title: str) -> str | None:
        """The id titled ``title``, preferring its newest ``"title #N"``; None if none."""
        with self.connection() as conn:
            return sessions.resolve_by_title(conn, self._namespace, title)

    def get_next_title_in_lineage(self, title: str) -> str:
        """``"X"`` → ``"X #2"`` (one above the highest number in use)."""
        with self.connection() as conn:
            return sessions.next_title_in_lineage(conn, self._namespace, title)

    # -- lineage -----------------------------------------------------------------------

    def get_compression_tip(self, session_id: str) -> str:
        """The newest compression continuation of ``session_id`` (itself if none)."""
        with self.connection() as conn:
            self._require(conn, session_id)
            return lineage.compression_chain(conn, self._namespace, session_id)[-1]

    def get_lineage_root(self, session_id: str) -> str:
        """The session whose listing entry stands for ``session_id``."""
        with self.connection() as conn:
            self._require(conn, session_id)
            return lineage.lineage_root(conn, self._namespace, session_id)

    def get_compression_chain(self, session_id: str) -> list[str]:
        """The compressed conversation ``session_id`` is part of, oldest session first.

        Its compression ancestors, itself, then its continuations up to the tip (as the
        SQLite store's method).
        """
        ns = self._namespace
        with self.connection(snapshot=True) as conn:
            self._require(conn, session_id)
            ancestors = lineage.compression_ancestors(conn, ns, session_id)
            head = ancestors[-1] if ancestors else session_id
            chain = lineage.compression_chain(conn, ns, head)
            # A continuation the chain does not pass through (a race in older data)
            # still shows with the sessions that lead to it.
            return chain if session_id in chain else [*reversed(ancestors), session_id]

    def get_lineage_ids(self, session_id: str) -> list[str]:
        """Every session of ``session_id``'s conversation (continuations and delegates)."""
        with self.connection() as conn:
            self._require(conn, session_id)
            return lineage.lineage_ids(conn, self._namespace, session_id)

    def list_sessions_rich(
        self,
        *,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_archived: bool = False,
        order_by_last_active: bool = True,
    ) -> list[dict[str, Any]]:
        """One row per conversation, as
        :meth:`memstrata.store.sqlite.store.SessionStore.list_sessions_rich`."""
        with self.connection(snapshot=True) as conn:
            return lineage.list_sessions_rich(
                conn,
                self._namespace,
                source=source,
                exclude_sources=exclude_sources,
                limit=limit,
                offset=offset,
                include_archived=include_archived,
                order_by_last_active=order_by_last_active,
            )

    def resolve_session_id(self, prefix: str) -> str:
        """An exact id, or the one id starting with ``prefix``."""
        with self.connection() as conn:
            return sessions.resolve_prefix(conn, self._namespace, prefix)

    def delete_session(self, session_id: str) -> list[str]:
        """Delete a session, its messages and its delegate sessions; return the ids deleted."""
        with self.connection() as conn:
            self._require(conn, session_id, lock=True)
            return sessions.delete(conn, self._namespace, [session_id])

    def prune_sessions(
        self,
        *,
        older_than: float | timedelta,
        source: str | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete sessions that ended more than ``older_than`` ago (a float counts days)."""
        cutoff = prune_cutoff(older_than)
        ns = self._namespace
        with self.connection(snapshot=True) as conn:
            ids = sessions.prune_candidates(conn, ns, cutoff, source)
            if dry_run:
                return [*ids, *lineage.delegate_descendants(conn, ns, ids)]
        deleted: list[str] = []
        # Small transactions so live agents are never kept waiting for long.
        for start in range(0, len(ids), 100):
            with self.connection() as conn:
                part = ids[start : start + 100]
                alive = [i for i in part if sessions.exists(conn, ns, i)]
                deleted += sessions.delete(conn, ns, alive) if alive else []
        return deleted

    def list_message_ids(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        session_ids: Iterable[str] | None = None,
    ) -> list[int]:
        """Ids of the tenant's messages (archived ones too) timestamped in ``[since, until]``.

        Both bounds are inclusive Unix timestamps and optional; ``session_ids`` limits
        the result to those sessions. Ordered by id.
        """
        sql = "SELECT id FROM messages WHERE namespace = %s"
        params: list[Any] = [self._namespace]
        for op, bound in timestamp_bounds(since, until):
            sql += f" AND timestamp {op} %s"
            params.append(bound)
        if session_ids is not None:
            sql += " AND session_id = ANY(%s)"
            params.append(sorted(set(session_ids)))
        with self.connection() as conn:
            return [int(r["id"]) for r in conn.execute(sql + " ORDER BY id", params).fetchall()]

    # -- state_meta ----------------------------------------------------------------------

    def set_meta(self, key: str, value: str | None) -> None:
        """Store a key/value pair in the tenant's ``state_meta``."""
        with self.connection() as conn:
            conn.execute(
                "INSERT INTO state_meta(namespace, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value",
                (
                    self._namespace,
                    pg_text(text_field(key, "key")),
                    pg_text(text_field(value, "value")),
                ),
            )

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT value FROM state_meta WHERE namespace = %s AND key = %s",
                (self._namespace, key),
            ).fetchone()
        return row["value"] if row else None

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
        """Append one message and return its id (see :meth:`append_messages`)."""
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
        """Append several messages in one transaction; return their ids in order."""
        # Validated and encoded before a connection is taken: a bad message costs no
        # round trip, and the transaction holds its locks only for the inserts.
        rows = messages_mod.prepare(self._namespace, session_id, list(messages))
        with self.connection() as conn:
            self._require(conn, session_id)
            return messages_mod.insert_prepared(conn, self._namespace, session_id, rows)

    def get_messages(
        self, session_id: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The session's live messages ordered by id (archived ones too if asked)."""
        with self.connection() as conn:
            return messages_mod.get_messages(
                conn, self._namespace, session_id, include_inactive=include_inactive
            )

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]:
        """The live messages as OpenAI chat dicts (role, content, tool_calls, ...)."""
        return as_conversation(self.get_messages(session_id))

    def get_messages_around(self, message_id: int, window: int = 5) -> dict[str, Any]:
        """A message and up to ``window`` neighbours each side (see the SQLite store)."""
        with self.connection(snapshot=True) as conn:
            return messages_mod.around(conn, self._namespace, message_id, window)

    def archive_messages(
        self, session_id: str, ids: Iterable[int] | None = None, compacted: bool = True
    ) -> int:
        """Soft-archive live messages (all when ``ids`` is None); return how many."""
        with self.connection() as conn:
            self._require(conn, session_id, lock=True)
            return messages_mod.archive(
                conn, self._namespace, session_id, None if ids is None else list(ids), compacted
            )

    def archive_and_compact(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """In-place compaction in one transaction: archive the live rows, insert ``messages``."""
        ns = self._namespace
        with self.connection() as conn:
            self._require(conn, session_id, lock=True)
            messages_mod.archive(conn, ns, session_id, None, True)
            ids = messages_mod.insert_messages(conn, ns, session_id, messages)
            messages_mod.recount(conn, ns, session_id)
            return ids

    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        active_only: bool = False,
    ) -> list[int]:
        """Delete the session's messages (live ones only if asked) and insert ``messages``."""
        ns = self._namespace
        with self.connection() as conn:
            self._require(conn, session_id, lock=True)
            messages_mod.delete_rows(conn, ns, session_id, active_only=active_only)
            ids = messages_mod.insert_messages(conn, ns, session_id, messages)
            messages_mod.recount(conn, ns, session_id)
            return ids

    def delete_messages(self, message_ids: Iterable[int]) -> int:
        """Delete the tenant's messages with these ids (others are ignored); return how many.

        The sessions' counters are recomputed; the rows leave every index.
        """
        ids = list(message_ids)
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise SessionStoreError("message_ids must be integers (ids from get_messages).")
        if not ids:
            return 0
        with self.connection() as conn:
            return messages_mod.delete_by_id(conn, self._namespace, ids)

    def clear_summary_cache(self, session_ids: Iterable[str] | None = None) -> int:
        """Drop cached conversation summaries (of these sessions, or all); return how many."""
        with self.connection() as conn:
            if session_ids is None:
                cur = conn.execute(
                    "DELETE FROM summary_cache WHERE namespace = %s", (self._namespace,)
                )
            else:
                wanted = list(session_ids)
                cur = conn.execute(
                    "DELETE FROM summary_cache WHERE namespace = %s "
                    "AND (tip_session_id = ANY(%s) OR root_session_id = ANY(%s))",
                    (self._namespace, wanted, wanted),
                )
            return int(cur.rowcount)

    def delete_namespace(self) -> dict[str, int]:
        """Delete every row of this tenant (sessions, messages, meta, summaries, memory, history).

        For removing a user's data for good; other tenants are untouched. Returns the
        rows deleted per table.
        """
        deleted: dict[str, int] = {}
        with self.connection() as conn:
            # Messages first: they reference sessions; the rest is independent.
            for table in (
                "messages",
                "summary_cache",
                "state_meta",
                "curated_memory",
                "curated_memory_history",
            ):
                cur = conn.execute(f"DELETE FROM {table} WHERE namespace = %s", (self._namespace,))
                deleted[table] = int(cur.rowcount)
            # Children first would need ordering; clearing the parent links avoids it.
            conn.execute(
                "UPDATE sessions SET parent_session_id = NULL WHERE namespace = %s "
                "AND parent_session_id IS NOT NULL",
                (self._namespace,),
            )
            cur = conn.execute("DELETE FROM sessions WHERE namespace = %s", (self._namespace,))
            deleted["sessions"] = int(cur.rowcount)
        return deleted

    # -- search ----------------------------------------------------------------------------

    def search_messages(
        self,
        query: str,
        *,
        role_filter: Sequence[str] | str | None = None,
        source_filter: Sequence[str] | str | None = None,
        exclude_sources: Sequence[str] | None = None,
        exclude_session_ids: Iterable[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        sort: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_inactive: bool = False,
    ) -> list[dict[str, Any]]:
        """Full-text search over the tenant's messages; see :mod:`memstrata.store.postgres.search`.

        Same arguments, semantics and hit shape as the SQLite store's ``search_messages``.
        """
        from memstrata.store.postgres import search

        return search.search_messages(
            self,
            query,
            role_filter=role_filter,
            source_filter=source_filter,
            exclude_sources=exclude_sources,
            exclude_session_ids=exclude_session_ids,
            since=since,
            until=until,
            sort=sort,
            limit=limit,
            offset=offset,
            include_inactive=include_inactive,
        )

    # -- maintenance ---------------------------------------------------------------------

    def check_indexes(self) -> list[str]:
        """Problems with the search indexes (missing or invalid); [] when healthy.

        The word and trigram indexes are derived by the server itself; the CJK column is
        written with each row, so rows whose bigrams disagree with their text are counted.
        """
        with self.connection() as conn:
            return maintenance.check(conn, self._namespace)

    def reindex(self, progress: maintenance.Progress | None = None) -> dict[str, int]:
        """Recompute the tenant's CJK bigrams and rebuild the search indexes.

        ``progress(stage, done, total)`` is called per stage. Returns the rows each
        index covers for this tenant.
        """
        return maintenance.reindex(self, progress)

    def index_counts(self) -> dict[str, int]:
        """Rows of this tenant each search index covers, and its cached summaries."""
        with self.connection(snapshot=True) as conn:
            return maintenance.index_counts(conn, self._namespace)

    def analyze(self) -> None:
        """Refresh the query planner's statistics on the store's tables (``ANALYZE``)."""
        maintenance.analyze(self)

    def optimize(self) -> None:
        """Refresh planner statistics and flush the GIN indexes' pending lists."""
        maintenance.optimize(self)

    def vacuum(self) -> None:
        """VACUUM the store's tables, giving dead rows' space back for reuse."""
        maintenance.vacuum(self)

    def integrity_check(self) -> dict[str, Any]:
        """``{ok, sqlite, indexes, fix}`` as the SQLite store returns it.

        ``sqlite`` holds ``["ok"]`` when the server answers and the schema is complete
        (the key keeps its name so callers of either store read the same shape).
        """
        with self.connection() as conn:
            return maintenance.integrity(conn, self._namespace)

    def stats(self) -> dict[str, Any]:
        """Counts and sizes of this tenant, as the SQLite store's ``stats`` (no file keys)."""
        with self.connection(snapshot=True) as conn:
            counts = maintenance.counts(conn, self._namespace)
        return {
            "dsn": self.dsn,
            "namespace": self._namespace,
            "durability": self.durability,
            **counts,
        }


# ``messages`` is also the name of the argument of several methods above.
messages_mod = messages
