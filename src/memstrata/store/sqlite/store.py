"""L2: the session store — every session and message, searchable, in one SQLite file.

``SessionStore`` follows the method names of Hermes' ``SessionDB`` so that code written
against Hermes ports with little change, and fixes what users hit with it: the connection
discipline lives in :mod:`memstrata.store.sqlite.database`, lineage is recorded when a
child session is created (:mod:`memstrata.store.sqlite.lineage`), titles live in
:mod:`memstrata.store.sqlite.titles`, index health in :mod:`memstrata.store.sqlite.index` and value
encoding in :mod:`memstrata.store.codec`.

    with SessionStore() as store:
        store.create_session("s1", source="cli")
        store.append_messages("s1", [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": "hello"}])
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, cast

from memstrata.closing import Closing
from memstrata.config import Config, ensure_home
from memstrata.errors import (
    IndexError_,
    SessionStoreError,
)
from memstrata.store.codec import (
    TOKEN_COLUMNS,
    decode_model_config,
    prune_cutoff,
    session_values,
    text_field,
    timestamp_bounds,
    usage_values,
)
from memstrata.store.sqlite import index as store_index
from memstrata.store.sqlite import lineage as store_lineage
from memstrata.store.sqlite import messages as store_messages
from memstrata.store.sqlite import migrations, titles
from memstrata.store.sqlite import sessions as store_sessions
from memstrata.store.sqlite.database import Database, Durability

DB_FILENAME = "state.db"


class SessionStore(Closing):
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
        with self._db.write() as conn:
            store_sessions.upsert(conn, values, clean_title)
        return session_id

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row as a dict (``model_config`` decoded when it is JSON), or None."""
        with self._db.read() as conn:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        session = dict(row)
        return decode_model_config(session)

    def _update(self, session_id: str, sql: str, params: Sequence[Any]) -> int:
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return conn.execute(sql, params).rowcount

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool:
        """End a live session; the first end_reason wins. True if it ended now."""
        when = float(ended_at) if ended_at is not None else time.time()
        return bool(
            self._update(
                session_id,
                "UPDATE sessions SET ended_at = ?, end_reason = ? "
                "WHERE id = ? AND ended_at IS NULL",
                (when, text_field(end_reason, "end_reason"), session_id),
            )
        )

    def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at`` and ``end_reason`` so the session is live again."""
        self._update(
            session_id,
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?",
            (session_id,),
        )

    def update_system_prompt(self, session_id: str, prompt: str | None) -> None:
        """Store the system prompt the session was (re)built with."""
        self._update(
            session_id,
            "UPDATE sessions SET system_prompt = ? WHERE id = ?",
            (text_field(prompt, "system_prompt"), session_id),
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
        sets = ", ".join(f"{c} = {c} + ?" for c in TOKEN_COLUMNS)
        cost = (
            "estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + ?"
            if estimated_cost_usd is not None
            else "estimated_cost_usd = estimated_cost_usd"
        )
        self._update(
            session_id,
            f"UPDATE sessions SET {sets}, api_call_count = api_call_count + ?, {cost} WHERE id = ?",
            [*params, session_id],
        )

    def set_session_archived(self, session_id: str, archived: bool = True) -> None:
        """Hide a conversation from listings (or show it again); nothing is deleted."""
        self._update(
            session_id, "UPDATE sessions SET archived = ? WHERE id = ?", (int(archived), session_id)
        )

    # -- titles ------------------------------------------------------------------------

    def set_session_title(self, session_id: str, title: str | None) -> str | None:
        """Set the sanitised title (None or blank clears it) and return it.

        Raises :class:`~memstrata.errors.TitleConflictError` when another session holds
        it, unless that session is a compression ancestor: then the title moves here.
        """
        with self._db.write() as conn:
            return titles.set_title(conn, session_id, title)

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None."""
        with self._db.read() as conn:
            return store_sessions.title_of(conn, session_id)

    def resolve_session_by_title(self, title: str) -> str | None:
        """The id titled ``title``, preferring its newest ``"title #N"``; None if none."""
        with self._db.read() as conn:
            return titles.resolve_by_title(conn, title)

    def get_next_title_in_lineage(self, title: str) -> str:
        """``"X"`` → ``"X #2"`` (one above the highest number in use)."""
        with self._db.read() as conn:
            return titles.next_title_in_lineage(conn, title)

    # -- lineage -----------------------------------------------------------------------

    def get_compression_tip(self, session_id: str) -> str:
        """The newest compression continuation of ``session_id`` (itself if none)."""
        with self._db.read() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_lineage.compression_chain(conn, session_id)[-1]

    def get_lineage_root(self, session_id: str) -> str:
        """The session whose listing entry stands for ``session_id``."""
        with self._db.read() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_lineage.lineage_root(conn, session_id)

    def get_compression_chain(self, session_id: str) -> list[str]:
        """The compressed conversation ``session_id`` is part of, oldest session first.

        Its compression ancestors, itself, then its continuations up to the tip: the
        sessions a listing row stands for (delegates and branches are not included).
        """
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot for the walk up and the walk down
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            ancestors = store_lineage.compression_ancestors(conn, session_id)
            head = ancestors[-1] if ancestors else session_id
            chain = store_lineage.compression_chain(conn, head)
            # A continuation the chain does not pass through (a race in older data)
            # still shows with the sessions that lead to it.
            return chain if session_id in chain else [*reversed(ancestors), session_id]

    def get_lineage_ids(self, session_id: str) -> list[str]:
        """Every session of ``session_id``'s conversation (continuations and delegates)."""
        with self._db.read() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_lineage.lineage_ids(conn, session_id)

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
        """One row per conversation (see :func:`memstrata.store.sqlite.lineage.list_sessions_rich`).

        Keys: id (the compression tip), root_id, title, source, model, started_at,
        last_active, message_count (over the lineage), preview, ended_at, end_reason,
        session_ids.
        """
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot across the listing's queries
            return store_lineage.list_sessions_rich(
                conn,
                source=source,
                exclude_sources=exclude_sources,
                limit=limit,
                offset=offset,
                include_archived=include_archived,
                order_by_last_active=order_by_last_active,
            )

    def resolve_session_id(self, prefix: str) -> str:
        """An exact id, or the one id starting with ``prefix``."""
        with self._db.read() as conn:
            return store_sessions.resolve_prefix(conn, prefix)

    def delete_session(self, session_id: str) -> list[str]:
        """Delete a session, its messages (from every index) and its delegate sessions.

        Other children (continuations, branches) are orphaned and become roots. Returns
        the ids deleted.
        """
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_sessions.delete(conn, [session_id])

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
        with self._db.read() as conn:
            ids = store_sessions.prune_candidates(conn, cutoff, source)
            if dry_run:
                return [*ids, *store_lineage.delegate_descendants(conn, ids)]
        deleted: list[str] = []
        # Small transactions so live agents are never kept waiting for long.
        for part in store_sessions.chunks(ids, 100):
            with self._db.write() as conn:
                # Another process may have deleted some meanwhile.
                alive = [i for i in part if store_sessions.exists(conn, i)]
                deleted += store_sessions.delete(conn, alive) if alive else []
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
        with self._db.write() as conn:
            return store_sessions.delete_messages(conn, ids)[0]

    def clear_summary_cache(self, session_ids: Iterable[str] | None = None) -> int:
        """Drop cached conversation summaries; return how many rows went.

        With ``session_ids``, only the summaries of conversations whose tip or root is
        one of them (pass :meth:`get_lineage_ids` to cover a whole conversation); with
        None, every cached summary.
        """
        with self._db.write() as conn:
            if session_ids is None:
                return conn.execute("DELETE FROM summary_cache").rowcount
            ids = sorted({text_field(i, "session id") or "" for i in session_ids})
            removed = 0
            for part in store_sessions.chunks(ids):
                marks = store_sessions.marks(len(part))
                removed += conn.execute(
                    f"DELETE FROM summary_cache WHERE tip_session_id IN ({marks}) "
                    f"OR root_session_id IN ({marks})",
                    [*part, *part],
                ).rowcount
            return removed

    def clear_query_expansions(self) -> int:
        """Drop every cached query expansion (past questions and their sub-queries).

        :func:`memstrata.ops.forget.forget` calls this: a forgotten phrase may have been typed
        into an earlier search, and a cached expansion costs one model call to rebuild.
        """
        with self._db.write() as conn:
            return conn.execute("DELETE FROM query_expansions").rowcount

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
        sql = "SELECT id FROM messages WHERE 1 = 1"
        params: list[Any] = []
        for op, bound in timestamp_bounds(since, until):
            sql += f" AND timestamp {op} ?"
            params.append(bound)
        with self._db.read() as conn:
            if session_ids is None:
                return [int(r[0]) for r in conn.execute(sql + " ORDER BY id", params)]
            found: list[int] = []
            wanted = sorted(set(session_ids))
            for part in store_sessions.chunks(wanted):
                clause = f" AND session_id IN ({store_sessions.marks(len(part))})"
                found += [int(r[0]) for r in conn.execute(sql + clause, [*params, *part])]
            return sorted(found)

    # -- state_meta ----------------------------------------------------------------------

    def set_meta(self, key: str, value: str | None) -> None:
        """Store a key/value pair in ``state_meta``."""
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO state_meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (text_field(key, "key"), text_field(value, "value")),
            )

    def get_meta(self, key: str) -> str | None:
        """The value stored under ``key``, or None."""
        with self._db.read() as conn:
            row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
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
        is accepted for ``tool_name``) in one transaction; return their ids in order."""
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_messages.insert_messages(conn, session_id, messages)

    def get_messages(
        self, session_id: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The session's live messages ordered by id (archived ones too if asked)."""
        with self._db.read() as conn:
            return store_messages.get_messages(conn, session_id, include_inactive=include_inactive)

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]:
        """The live messages as OpenAI chat dicts (role, content, tool_calls, ...)."""
        return store_messages.as_conversation(self.get_messages(session_id))

    def get_messages_around(self, message_id: int, window: int = 5) -> dict[str, Any]:
        """A message and up to ``window`` neighbours each side.

        Returns ``{session_id, anchor, messages, messages_before, messages_after, window}``
        where ``messages_before``/``messages_after`` count the rows beyond the window.
        """
        with self._db.read() as conn:
            conn.execute("BEGIN")
            return store_messages.around(conn, message_id, window)

    def archive_messages(
        self, session_id: str, ids: Iterable[int] | None = None, compacted: bool = True
    ) -> int:
        """Soft-archive live messages (all when ``ids`` is None); return how many.

        ``compacted=True`` (compaction) keeps them searchable; ``False`` (rewind/undo)
        hides them from search. Nothing leaves the indexes.
        """
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            return store_messages.archive(
                conn, session_id, None if ids is None else list(ids), compacted
            )

    def archive_and_compact(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """In-place compaction in one transaction: archive the live rows, insert ``messages``."""
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            store_messages.archive(conn, session_id, None, True)
            ids = store_messages.insert_messages(conn, session_id, messages)
            store_messages.recount(conn, session_id)
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
        with self._db.write() as conn:
            if not store_sessions.exists(conn, session_id):
                raise store_sessions.not_found(session_id)
            store_messages.delete_rows(conn, session_id, active_only=active_only)
            ids = store_messages.insert_messages(conn, session_id, messages)
            store_messages.recount(conn, session_id)
            return ids

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
        """Full-text search over every message; see
        :func:`memstrata.store.sqlite.fulltext.search_messages`."""
        from memstrata.store.sqlite import fulltext  # imported late: search builds on the store

        return fulltext.search_messages(
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
            if store_sessions.vector_key(conn) is not None:
                table = store_sessions.VECTOR_TABLE
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
        wal = Path(f"{self.path}-wal")
        return {
            "path": str(self.path),
            "durability": self.durability,
            "journal_mode": self._db.journal_mode,
            **counts,
            "db_bytes": os.path.getsize(self.path) if self.path.exists() else 0,
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        }


def _message_ids(values: Iterable[int]) -> list[int]:
    """Message ids as ints; anything else is refused with the fix."""
    if isinstance(values, str | bytes):
        raise SessionStoreError("message_ids must be a list of integer message ids.")
    ids: list[int] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SessionStoreError(
                f"Message ids are integers (got {value!r}); `memstrata sessions show` lists them."
            )
        ids.append(value)
    return ids
