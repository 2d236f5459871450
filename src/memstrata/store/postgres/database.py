"""Connection discipline for the PostgreSQL stores: a pool, transactions, clear errors.

The twin of :mod:`memstrata.store.sqlite.database` for SQLite:

* one ``psycopg_pool.ConnectionPool`` per store, shared by the threads of a process;
  connections are in autocommit mode, so every unit of work is an explicit transaction;
* :meth:`Database.connection` lends a connection inside a transaction; opened again on
  the same thread it joins the outer transaction (as SQLite's nested ``write()``); a
  unit of work that is one statement (an append) may run as its own transaction;
* durability is ``synchronous_commit`` per connection, set when the pool opens it;
* psycopg's errors become :mod:`memstrata.errors` ones that say what to do, and the
  schema is migrated (:mod:`memstrata.store.postgres.schema`) when the pool opens.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from memstrata.errors import SessionNotFoundError, SessionStoreError, StorageError
from memstrata.scanner.redaction import redact_dsn, redact_text
from memstrata.store.postgres import schema

Durability = Literal["normal", "full"]
Conn = psycopg.Connection[Any]

# "normal" matches the SQLite store's promise (never corrupts, survives any client crash;
# a server crash may lose the last commits) and lets the server group commits; "full"
# waits for every commit to reach the server's disk.
SYNCHRONOUS_COMMIT: dict[str, str] = {"normal": "off", "full": "on"}


def redact(dsn: str) -> str:
    """The DSN with its password hidden, for error messages and logs."""
    return redact_dsn(dsn)


# A server that answers does so in milliseconds; one that does not should not keep a
# command waiting: the error comes within about this long (libpq's minimum is 1 s).
FAIL_FAST_S = 2.0


def unreachable(dsn: str, exc: BaseException) -> StorageError:
    """The one-line error every command prints when the server cannot be reached."""
    text = " ".join(str(exc).split())
    # libpq repeats the address ("connection to server at ... failed: X"): keep X.
    reason = text.rsplit(" failed: ", 1)[-1] if " failed: " in text else text
    reason = reason.split(" Is the server running")[0].rstrip(". ") or type(exc).__name__
    return StorageError(
        f"Cannot connect to PostgreSQL at {redact(dsn)}: {reason}. Start the server or fix "
        "store.dsn (host, port, user, database); `memstrata help postgres` shows the setup."
    )


def connect(dsn: str, *, timeout: float = FAIL_FAST_S, **kwargs: Any) -> Conn:
    """One direct connection, or :func:`unreachable`'s error within about ``timeout``.

    A pool retries a refused connection until its own timeout, logging each attempt; a
    first direct connection fails once, at once, with libpq's reason.
    """
    try:
        return psycopg.connect(dsn, connect_timeout=max(1, round(timeout)), **kwargs)
    except psycopg.OperationalError as exc:
        raise unreachable(dsn, exc) from None


@contextmanager
def _isolation(conn: Conn, snapshot: bool) -> Iterator[None]:
    """With ``snapshot``, the transactions started inside begin REPEATABLE READ (psycopg
    writes it into their BEGIN); the connection's default is restored afterwards, or the
    connection is closed (so the pool drops it) when it cannot be."""
    if not snapshot:
        yield
        return
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        yield
    finally:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.isolation_level = None
        else:
            conn.close()


class Database:
    """A pool of connections to one PostgreSQL database, migrated on open.

    ``size`` bounds the connections kept; ``connect_timeout`` (seconds) bounds the wait
    for the first one, so an unreachable server fails fast with the fix.
    """

    def __init__(
        self, dsn: str, *, size: int, durability: Durability, connect_timeout: float
    ) -> None:
        if durability not in SYNCHRONOUS_COMMIT:
            raise SessionStoreError(f"durability must be 'normal' or 'full', not {durability!r}.")
        self.dsn = redact(dsn)
        self.durability: Durability = durability
        self._local = threading.local()
        self._closed = False
        # The schema is checked and migrated on one direct connection first, so a
        # stopped server fails at once with one line instead of a pool's retries.
        with connect(dsn, timeout=min(connect_timeout, FAIL_FAST_S), autocommit=True) as first:
            schema.migrate(first)
        # A connection of its own for the statistics the store keeps when autovacuum is
        # off (memstrata.store.postgres.maintenance.Keeper): never one of the pool's.
        self._direct_args = (dsn, connect_timeout)
        self._pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(1, int(connect_timeout)),
            },
            # Set per connection rather than through libpq "options", which would
            # replace any options (a search_path, say) the DSN carries.
            configure=self._configure,
            open=False,
            name="memstrata",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise StorageError(
                f"Cannot connect to PostgreSQL at {self.dsn} within {connect_timeout:g} s. "
                "Check that the server runs and the DSN (host, port, user, database) is "
                "right; `psql DSN` should connect."
            ) from exc

    def _configure(self, conn: Conn) -> None:
        conn.execute(
            "SELECT set_config('synchronous_commit', %s, false)",
            (SYNCHRONOUS_COMMIT[self.durability],),
        )

    def direct(self) -> Conn:
        """A new connection outside the pool, in autocommit mode (the caller closes it)."""
        dsn, timeout = self._direct_args
        conn: Conn = connect(dsn, timeout=timeout, autocommit=True, row_factory=dict_row)
        return conn

    def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        self._closed = True
        self._pool.close()

    @contextmanager
    def autocommit(self) -> Iterator[Conn]:
        """A pooled connection outside any transaction (for VACUUM and the like)."""
        if self._closed:
            raise StorageError("This store is closed; open a new one.")
        with self._pool.connection() as conn:
            yield conn

    def held(self) -> Conn | None:
        """The connection of the transaction this thread is inside, if any."""
        held: Conn | None = getattr(self._local, "conn", None)
        return held

    @contextmanager
    def connection(self, *, snapshot: bool = False, single: bool = False) -> Iterator[Conn]:
        """One pooled connection inside a transaction: commit on return, roll back on error.

        Opened inside another on the same thread, it joins the outer transaction.
        ``snapshot`` makes the transaction REPEATABLE READ, so several reads see one
        state of the database. ``single``: the block's one write is a single statement,
        atomic on its own, and its reads need no common snapshot: it runs without BEGIN
        and COMMIT, two round trips fewer (one client appending turn by turn: 1.23x, 8 at
        once 1.03x: benchmarks/results/store_postgres_append_ab_single.md).
        """
        held: Conn | None = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        if self._closed:
            raise StorageError("This store is closed; open a new one.")
        try:
            with self._pool.connection() as conn:
                self._local.conn = conn
                try:
                    if single:
                        yield conn  # autocommit: the statement is its own transaction
                    else:
                        # A snapshot starts with BEGIN ISOLATION LEVEL REPEATABLE READ: one
                        # statement, not BEGIN and then SET TRANSACTION.
                        with _isolation(conn, snapshot), conn.transaction():
                            yield conn
                finally:
                    self._local.conn = None
        except PoolTimeout as exc:
            raise StorageError(
                "No PostgreSQL connection became free in time: raise store.pool_size, or "
                "check the server's max_connections."
            ) from exc
        except psycopg.errors.ForeignKeyViolation as exc:
            # The session went between the existence check and the insert (another
            # process deleted it): the same error as when it was never there.
            raise SessionNotFoundError(
                "The session was deleted by another process meanwhile; nothing was written. "
                "Create it again with create_session() if it is still wanted."
            ) from exc
        except psycopg.errors.DataError as exc:
            raise SessionStoreError(
                f"PostgreSQL refused a value ({exc}); nothing was written. Check the numbers "
                "and text passed (integers must fit in 64 bits)."
            ) from exc
        except psycopg.errors.ProgramLimitExceeded as exc:
            # A value past one of the server's limits (an index row, a lexeme): bad input,
            # not a server down. The message may quote the whole value: cut it.
            said = redact_text(str(exc).splitlines()[0])
            raise SessionStoreError(
                f"PostgreSQL refused a value past one of its limits "
                f"({said[:200]}{'...' if len(said) > 200 else ''}); the transaction was "
                "rolled back. Shorten the text or number passed."
            ) from exc
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            raise StorageError(
                f"PostgreSQL aborted the transaction to resolve a conflict ({exc}); it was "
                "rolled back, so retrying the call is safe."
            ) from exc
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"PostgreSQL failed: {redact_text(str(exc))}. Check that the server at "
                f"{self.dsn} is up; "
                "the transaction was rolled back, so retrying is safe."
            ) from exc
