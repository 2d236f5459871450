"""The L2 session store on PostgreSQL, for deployments that serve many users.

``PostgresSessionStore`` is a backend of :class:`~memstrata.store.base.BaseSessionStore`,
so it has the public methods, return shapes and errors of the SQLite store and code
written against one runs on the other. What differs is underneath: a psycopg connection
pool instead of one file, a tenant (``namespace``) that scopes every row and every query,
and the three full-text indexes as a generated ``tsvector`` column, a ``pg_trgm``
expression index and a CJK bigram ``tsvector`` (see :mod:`memstrata.store.postgres.search`).

    with PostgresSessionStore("postgresql://127.0.0.1:5432/app", namespace="alice") as store:
        store.create_session("s1", source="cli")
        store.append_messages("s1", [{"role": "user", "content": "hi"}])
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, cast

from memstrata.config import Config
from memstrata.errors import MemstrataError, NamespaceError, SessionStoreError
from memstrata.store.base import BaseSessionStore
from memstrata.store.postgres import maintenance, ranking
from memstrata.store.postgres import pgvector as _pgvector
from memstrata.store.postgres.database import Conn, Database, Durability
from memstrata.store.postgres.transaction import PostgresTransaction

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


def configured(
    cfg: Config,
    dsn: str | None,
    namespace: str | None,
    durability: Durability | None,
    *,
    error: type[MemstrataError],
    subject: str = "",
) -> tuple[str, str, Durability]:
    """The DSN, tenant and durability a PostgreSQL store opens with: the arguments where
    given, else the configuration. ``error`` is raised when neither names a DSN;
    ``subject`` says which store (" for the facts store")."""
    chosen = dsn if dsn is not None else str(cfg.get("store.dsn"))
    if not chosen:
        raise error(
            f"No PostgreSQL DSN{subject}: pass one, or set it with "
            "`memstrata config set store.dsn postgresql://user@host:5432/db`."
        )
    ns = validate_namespace(namespace if namespace is not None else cfg.get("store.namespace"))
    mode = durability if durability is not None else cfg.get("store.durability")
    return chosen, ns, cast(Durability, mode)


class PostgresSessionStore(BaseSessionStore):
    """The L2 session store on PostgreSQL, scoped to one tenant (``namespace``).

    ``dsn`` is a libpq connection string (``postgresql://user@host:5432/db``); the schema
    is created or upgraded on open. ``pool_size`` (default ``store.pool_size``) bounds
    the connections this process keeps; ``durability`` overrides ``store.durability``.
    Hybrid searches compare vectors in the server when it has pgvector;
    ``pgvector=False`` keeps them in the client (:attr:`vector_search` says which).
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
        pgvector: bool = True,
    ) -> None:
        cfg = config if config is not None else Config.load()
        self.typos = bool(cfg.get("search.typos"))
        chosen_dsn, self._namespace, mode = configured(
            cfg, dsn, namespace, durability, error=SessionStoreError
        )
        size = pool_size if pool_size is not None else cfg.get("store.pool_size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SessionStoreError(
                f"pool_size must be a positive integer, got {size!r} (store.pool_size)."
            )
        self._db = Database(
            chosen_dsn,
            size=size,
            durability=mode,
            connect_timeout=connect_timeout,
        )
        # Planner statistics, the visibility map and GIN pending lists, kept by the store
        # itself when the server's autovacuum is off for its tables (and the tenant's
        # share of the statistics whoever keeps them, see maintenance.GROWN_ROWS).
        self._keeper = maintenance.Keeper(self._db.direct, self._namespace)
        try:
            self._vectors = _pgvector.ServerVectors(
                self._db.direct, self._namespace, wanted=pgvector
            )
        except BaseException:
            self.close()
            raise

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
    def vector_search(self) -> _pgvector.Mode:
        """Where hybrid searches compare vectors: "server" (pgvector, one statement per
        search) or "client" (the stored vectors are read and compared here)."""
        return self._vectors.mode

    @property
    def durability(self) -> Durability:
        """The durability mode in effect ("normal" or "full")."""
        return self._db.durability

    def close(self) -> None:
        """Close every pooled connection (idempotent), after the statistics pass that
        may be running (see :meth:`keep_statistics`)."""
        self._keeper.close()
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

    @contextmanager
    def _transaction(
        self, *, write: bool = False, snapshot: bool = False, single: bool = False
    ) -> Iterator[PostgresTransaction]:
        # Reads and writes share the pool; a snapshot is a REPEATABLE READ transaction;
        # single: see Database.connection.
        outermost = self._db.held() is None
        with self._db.connection(snapshot=snapshot and not write, single=single) as conn:
            tx = PostgresTransaction(conn, self._namespace, self._vectors)
            yield tx
        if tx.recounted:
            ranking.changed(self._namespace)  # committed (or joined to an outer transaction)
        if write and outermost:
            self._keeper.wrote(tx.inserted)

    def _append_transaction(self) -> AbstractContextManager[PostgresTransaction]:
        # An append's insert is one statement (the turn's rows and the session's counters,
        # see messages._APPEND), atomic on its own: no BEGIN and COMMIT around it.
        return self._transaction(write=True, single=True)

    def store_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes]) -> int:
        """Store unit vectors as the base store does; the first vectors of a size get
        their HNSW index when the server compares vectors (outside any transaction)."""
        stored = super().store_vectors(model, dims, vectors)
        if self._db.held() is None:
            self._vectors.ensure_index(dims)
        return stored

    def delete_namespace(self) -> dict[str, int]:
        """Delete every row of this tenant (sessions, messages, meta, summaries, memory, history,
        facts).

        For removing a user's data for good; other tenants are untouched. Returns the
        rows deleted per table.
        """
        deleted: dict[str, int] = {}
        with self.connection() as conn:
            # Messages first: they reference sessions; the rest is independent.
            for table in (
                "message_vectors",
                "messages",
                "summary_cache",
                "query_expansions",
                "state_meta",
                "curated_memory",
                "curated_memory_history",
            ):
                cur = conn.execute(f"DELETE FROM {table} WHERE namespace = %s", (self._namespace,))
                deleted[table] = int(cur.rowcount)
            # The facts of the tenant (memstrata.providers.facts.postgres), when that
            # store ever ran in this database: its tables are created on its first use.
            deleted.update({"fact_vectors": 0, "fact_history": 0, "facts": 0})
            facts = conn.execute("SELECT to_regclass('facts') IS NOT NULL AS here").fetchone()
            if facts is not None and facts["here"]:
                for table in ("fact_vectors", "fact_history"):
                    cur = conn.execute(
                        f"DELETE FROM {table} WHERE namespace = %s", (self._namespace,)
                    )
                    deleted[table] = int(cur.rowcount)
                conn.execute(
                    "UPDATE facts SET superseded_by = NULL WHERE namespace = %s "
                    "AND superseded_by IS NOT NULL",
                    (self._namespace,),
                )
                cur = conn.execute("DELETE FROM facts WHERE namespace = %s", (self._namespace,))
                deleted["facts"] = int(cur.rowcount)
            # Children first would need ordering; clearing the parent links avoids it.
            conn.execute(
                "UPDATE sessions SET parent_session_id = NULL WHERE namespace = %s "
                "AND parent_session_id IS NOT NULL",
                (self._namespace,),
            )
            cur = conn.execute("DELETE FROM sessions WHERE namespace = %s", (self._namespace,))
            deleted["sessions"] = int(cur.rowcount)
        ranking.changed(self._namespace)
        return deleted

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
        return maintenance.reindex(self._db, self._namespace, progress)

    def index_counts(self) -> dict[str, int]:
        """Rows of this tenant each search index covers, and its cached summaries."""
        with self.connection(snapshot=True) as conn:
            return maintenance.index_counts(conn, self._namespace)

    def analyze(self) -> None:
        """Refresh the query planner's statistics on the store's tables (``ANALYZE``)."""
        maintenance.analyze(self._db)

    def optimize(self) -> None:
        """Refresh planner statistics and flush the GIN indexes' pending lists."""
        maintenance.optimize(self._db)

    def keep_statistics(self) -> list[str]:
        """VACUUM and ANALYZE the tables search depends on if the server's autovacuum is
        off for them and they changed enough (its own thresholds); return what ran.

        The store does this by itself every few hundred writes, on a thread of its own;
        call it after a bulk load done another way.
        """
        self._keeper.wait()
        return maintenance.keep_statistics(self._db.direct)

    def vacuum(self) -> None:
        """VACUUM the store's tables, giving dead rows' space back for reuse."""
        maintenance.vacuum(self._db)

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


if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract

    # mypy proves here that the backend keeps the whole public contract.
    _keeps_contract: type[SessionStoreContract] = PostgresSessionStore
