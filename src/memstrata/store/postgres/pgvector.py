"""Hybrid vectors compared by the server when it has the pgvector extension.

Without pgvector, a hybrid search on PostgreSQL reads the vectors it compares (``bytea``,
1.5 KB each for 384 dimensions: those of the keyword candidates, of the candidate
sessions and of the newest messages) and computes the cosines in the client, as SQLite
does (:func:`memstrata.store.rank.stored_vectors`). That path needs nothing on the
server and stays the portable fallback.

When ``CREATE EXTENSION vector`` succeeds (or the extension is already there), each
vector is also kept as a pgvector ``vector`` in the ``embedding`` column of
``message_vectors``, with one HNSW index per vector size (an expression index,
``embedding::vector(n)``, partial on ``dims = n``, so models of several sizes share the
table). A search then sends the question's vector once and one statement returns the
cosines of the keyword candidates and of the :data:`NEAREST` messages of the tenant
nearest to the question by the index (where a message the keywords missed is found); no
stored vector crosses the network.

Nothing here runs inside the migration lock: the column is added with a short lock
timeout, the vectors written before are copied in small batches (each its own
transaction) and the index is built ``CONCURRENTLY`` by the first store that takes its
advisory lock; until the index of a size is valid, searches of that size take the
client path. A vector written by a process that does not fill the column (an older
memstrata) is compared in the client when it is a keyword candidate and copied by the
next store that opens the tenant.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from memstrata.store.postgres.schema import VECTOR_INDEX_LOCK, schema_lock
from memstrata.store.vectors import cosines, decode_vector

logger = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
Mode = Literal["server", "client"]

# How many of the tenant's messages nearest the question (by the HNSW index) a search
# compares besides its keyword candidates: the server path's twin of the client path's
# session scan and newest messages (memstrata.store.vectors.VECTOR_SCAN, VECTOR_RECENT).
NEAREST = 100
# Candidate list of the HNSW search (pgvector's hnsw.ef_search, default 40): at least
# NEAREST, or fewer rows come back. With pgvector 0.8+ the scan goes on past other
# tenants' rows (hnsw.iterative_scan) until NEAREST of this tenant are found.
EF_SEARCH = 200
# Vectors copied into the new column per transaction when a store opens.
COPY_BATCH = 500
# An index build must not wait forever behind a writer; ALTER TABLE neither.
LOCK_TIMEOUT = "5s"
# Memory of the connection that builds an HNSW index: a graph that fits builds many
# times faster (pgvector's advice); set for that one connection only.
BUILD_MEMORY = "512MB"

INSTALL_HINT = (
    "install pgvector on the server (https://github.com/pgvector/pgvector; Debian and "
    "Ubuntu: apt install postgresql-<version>-pgvector) and let the store's user run "
    "CREATE EXTENSION vector"
)


@dataclass(frozen=True)
class Table:
    """A table of vectors: ``message_vectors`` (sessions) or ``fact_vectors`` (facts)."""

    name: str
    key: str
    # Whether searches read it through HNSW indexes (the facts' cosines are exact over
    # the newest VECTOR_SCAN facts, see ServerFactRows).
    hnsw: bool


MESSAGES = Table("message_vectors", "message_id", hnsw=True)
FACTS = Table("fact_vectors", "fact_id", hnsw=False)


def index_name(dims: int) -> str:
    """The HNSW index of the vectors of ``dims`` dimensions."""
    return f"idx_message_vectors_hnsw_{int(dims)}"


def literal(blob: bytes, dims: int) -> str | None:
    """``blob`` (float32 bytes) as pgvector's text form, or None when it does not hold
    ``dims`` floats (the empty placeholder of a message with nothing to embed)."""
    if dims <= 0 or len(blob) != 4 * dims:
        return None
    return "[" + ",".join(repr(x) for x in decode_vector(blob)) + "]"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class ServerVectors:
    """Whether and how a store's searches compare vectors in the server.

    Set up when the store opens (see the module's text): ``mode`` is "server" when the
    extension, the column and at least the setup succeeded, "client" otherwise, with
    ``reason`` saying why. ``wanted=False`` (the store's ``pgvector=False``) keeps the
    client path without touching the extension; the column is still filled when it
    exists, so that other stores of the database can use it.
    """

    def __init__(
        self,
        direct: Callable[[], Conn],
        namespace: str,
        *,
        wanted: bool,
        table: Table = MESSAGES,
    ) -> None:
        self._direct = direct
        self._ns = namespace
        self.table = table
        self.mode: Mode = "client"
        self.reason = ""
        self.column = False
        self._indexed: set[int] = set()
        self._lock = threading.Lock()
        with direct() as conn:
            self.column = _has_column(conn, table)
            if not wanted:
                self.reason = "turned off (pgvector=False)"
                return
            self.reason = self._install(conn)
            if self.reason:
                logger.info("Hybrid vectors compared in the client: %s.", self.reason)
                return
            self.column = True
            self.mode = "server"
            copy_vectors(conn, namespace, table)
            for dims in _sizes(conn, namespace) if table.hnsw else []:
                self._build(conn, dims)

    def _install(self, conn: Conn) -> str:
        """Why the server path cannot be used ("" when the extension and column are
        there, created now if need be)."""
        where = _extension_schema(conn)
        if where is None:
            available = conn.execute(
                "SELECT 1 AS here FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
            if available is None:
                return f"the server has no pgvector; {INSTALL_HINT}"
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                # Another process may have created it meanwhile (a unique violation).
                if _extension_schema(conn) is None:
                    return f"the server has no pgvector ({_first_line(exc)}); {INSTALL_HINT}"
            where = _extension_schema(conn)
        row = conn.execute("SELECT current_schemas(false) AS path").fetchone()
        path = list(row["path"] or []) if row is not None else []
        if where not in path:
            return (
                f"the vector extension is in schema {where!r}, which this connection's "
                f"search_path ({', '.join(path) or 'empty'}) leaves out; add it to the "
                "search_path (store.dsn options) to compare vectors in the server"
            )
        table = self.table.name
        if _has_column(conn, self.table):
            return ""
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS embedding vector")
                # Kept in the row (the bytes of the client path go out of line instead):
                # a search reads the embeddings of its candidates, and nothing else.
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN")
        except psycopg.Error as exc:
            return f"the embedding column could not be added ({_first_line(exc)})"
        # The rows still to copy, found without reading the table (empty once copied).
        try:
            conn.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_{table}_uncopied "
                f"ON {table} (namespace) WHERE embedding IS NULL AND octet_length(vector) > 0"
            )
        except psycopg.Error as exc:
            logger.warning("pgvector: the index of vectors to copy was not built: %s", exc)
        return ""

    @property
    def server(self) -> bool:
        """True when searches compare vectors in the server."""
        return self.mode == "server"

    def indexed(self, conn: Conn, dims: int) -> bool:
        """True when the HNSW index of ``dims`` is built and valid (cached once seen)."""
        if dims in self._indexed:
            return True
        row = conn.execute(
            "SELECT i.indisvalid AS ok FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
            (index_name(dims),),
        ).fetchone()
        if row is not None and row["ok"]:
            self._indexed.add(dims)
            return True
        return False

    def ensure_index(self, dims: int) -> None:
        """Build the HNSW index of ``dims`` when it is missing (after vectors of a new
        size were written), on a connection of its own, unless another process builds it."""
        if not self.server or not self.table.hnsw or dims <= 0 or dims in self._indexed:
            return
        with self._lock, self._direct() as conn:
            self._build(conn, dims)

    def _build(self, conn: Conn, dims: int) -> None:
        if self.indexed(conn, dims):
            return
        with schema_lock(conn, VECTOR_INDEX_LOCK) as got:
            if not got:
                return  # another store builds it; searches stay in the client meanwhile
            row = conn.execute(
                "SELECT i.indisvalid AS ok FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                (index_name(dims),),
            ).fetchone()
            if row is not None and not row["ok"]:
                # Left invalid by an interrupted build.
                conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index_name(dims)}")
            conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
            try:
                conn.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index_name(dims)} "
                    f"ON message_vectors USING hnsw ((embedding::vector({int(dims)})) "
                    f"vector_ip_ops) WHERE dims = {int(dims)}"
                )
            except psycopg.Error as exc:
                logger.warning("pgvector: the index of %d-dims vectors failed: %s", dims, exc)
            finally:
                conn.execute("RESET maintenance_work_mem")
        self.indexed(conn, dims)


def _extension_schema(conn: Conn) -> str | None:
    row = conn.execute(
        "SELECT n.nspname AS schema FROM pg_extension e "
        "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    return str(row["schema"]) if row is not None else None


def _has_column(conn: Conn, table: Table) -> bool:
    row = conn.execute(
        "SELECT 1 AS here FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attname = 'embedding' AND NOT attisdropped",
        (table.name,),
    ).fetchone()
    return row is not None


def _sizes(conn: Conn, namespace: str) -> list[int]:
    """Vector sizes among a thousand of the tenant's vectors, read by the primary key
    (one model in nearly every store; a size written later gets its index when it is
    written)."""
    rows = conn.execute(
        "SELECT DISTINCT dims FROM (SELECT dims FROM message_vectors WHERE namespace = %s "
        "LIMIT 1000) tenant_rows WHERE dims > 0",
        (namespace,),
    ).fetchall()
    return sorted(int(r["dims"]) for r in rows)


def copy_vectors(
    conn: Conn, namespace: str, table: Table = MESSAGES, batch: int = COPY_BATCH
) -> int:
    """Fill the ``embedding`` column of the tenant's vectors written without it, ``batch``
    rows per transaction; return how many were copied."""
    copied = 0
    after: tuple[str, int] = ("", -1)
    while True:
        with conn.transaction():
            rows = conn.execute(
                f"SELECT model, {table.key} AS key, dims, vector FROM {table.name} "
                "WHERE namespace = %s AND embedding IS NULL AND octet_length(vector) > 0 "
                f"AND (model, {table.key}) > (%s, %s) ORDER BY model, {table.key} LIMIT %s",
                (namespace, after[0], after[1], batch),
            ).fetchall()
            if not rows:
                return copied
            after = (str(rows[-1]["model"]), int(rows[-1]["key"]))
            copied += fill(
                conn,
                namespace,
                table,
                ((r["model"], int(r["key"]), int(r["dims"]), bytes(r["vector"])) for r in rows),
            )


def fill(
    conn: Conn, namespace: str, table: Table, rows: Iterable[tuple[str, int, int, bytes]]
) -> int:
    """Set ``embedding`` of these ``(model, key, dims, vector bytes)`` rows (NULL where
    the bytes hold no vector of ``dims``); how many got one."""
    items = [(literal(blob, dims), namespace, model, key) for model, key, dims, blob in rows]
    with conn.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table.name} SET embedding = %s::vector WHERE namespace = %s "
            f"AND model = %s AND {table.key} = %s",
            items,
        )
    return sum(text is not None for text, *_ in items)


@contextmanager
def nearest_settings(conn: Conn) -> Iterator[None]:
    """The planner settings of :func:`cosines_sql`'s statement, for it alone (restored
    after it; an error rolls the transaction and them back).

    The nearest messages must come from the HNSW index whatever the statistics say (the
    store may run with autovacuum off): with sorts off, the index scan is the only plan
    that returns rows in distance order. Its work is bounded by pgvector itself
    (``hnsw.ef_search``, and ``hnsw.max_scan_tuples`` when the iterative scan goes past
    other tenants' rows), where ordering a tenant's rows would grow with the tenant.
    """
    row = conn.execute(
        "SELECT current_setting('enable_sort') AS sort, "
        "set_config('hnsw.ef_search', %s, true), "
        "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        "set_config('enable_sort', 'off', true)",
        (str(EF_SEARCH),),
    ).fetchone()
    yield
    conn.execute("SELECT set_config('enable_sort', %s, true)", (row["sort"] if row else "on",))


def cosines_sql(dims: int) -> str:
    """The statement of :meth:`ServerVectorRows.server_cosines` for vectors of ``dims``
    (parameters ``q``, ``ns``, ``model``, ``nearest``, ``ids``). The size is written into
    the text (an int): the planner must see the partial index's predicate and expression
    as they were declared to use the index."""
    n = int(dims)
    return f"""
        WITH nearest AS (
            SELECT message_id, embedding::vector({n}) <#> %(q)s::vector({n}) AS distance
            FROM message_vectors
            WHERE dims = {n} AND namespace = %(ns)s AND model = %(model)s
            ORDER BY embedding::vector({n}) <#> %(q)s::vector({n})
            LIMIT %(nearest)s
        )
        SELECT message_id, -distance AS cos, NULL::bytea AS blob FROM nearest
        UNION ALL
        SELECT message_id,
               CASE WHEN embedding IS NOT NULL
                    THEN -(embedding::vector({n}) <#> %(q)s::vector({n})) END,
               CASE WHEN embedding IS NULL THEN vector END
        FROM message_vectors
        WHERE dims = {n} AND namespace = %(ns)s AND model = %(model)s
          AND message_id = ANY(%(ids)s)
"""


class ServerVectorRows:
    """The vector primitives of :class:`~memstrata.store.postgres.transaction.PostgresTransaction`
    that use the ``embedding`` column when the store set ``server_vectors``."""

    conn: Conn
    ns: str
    server_vectors: ServerVectors | None = None
    # From MessageRows, which the transaction class also derives from.
    live_ids: Callable[[Iterable[int]], set[int]]

    def put_vectors(self, model: str, dims: int, vectors: Mapping[int, bytes], at: float) -> int:
        """Store vectors as the client path does, and as ``embedding`` where the column
        exists."""
        state = self.server_vectors
        if state is None or not state.column:
            stored: int = super().put_vectors(model, dims, vectors, at)  # type: ignore[misc]
            return stored
        alive = self.live_ids(vectors)
        rows = [
            (self.ns, model, mid, dims, blob, at, literal(blob, dims))
            for mid, blob in vectors.items()
            if mid in alive
        ]
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO message_vectors(namespace, model, message_id, dims, vector, "
                "created_at, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s::vector) "
                "ON CONFLICT (namespace, model, message_id) DO UPDATE SET dims = EXCLUDED.dims, "
                "vector = EXCLUDED.vector, created_at = EXCLUDED.created_at, "
                "embedding = EXCLUDED.embedding",
                rows,
            )
        return len(rows)

    def server_cosines(
        self, model: str, query_vector: Sequence[float], message_ids: Sequence[int]
    ) -> dict[int, float] | None:
        """Cosines of the query with the vectors of ``model`` of these messages and of
        the tenant's :data:`NEAREST` nearest, in one statement; None when the server
        path is off or the index of this size is not built yet."""
        state = self.server_vectors
        dims = len(query_vector)
        if state is None or not state.server or not state.indexed(self.conn, dims):
            return None
        norm = math.sqrt(sum(float(x) * float(x) for x in query_vector))
        if norm == 0.0:
            return {}
        query = "[" + ",".join(repr(float(x) / norm) for x in query_vector) + "]"
        with nearest_settings(self.conn):
            rows = self.conn.execute(
                cosines_sql(dims),
                {
                    "q": query,
                    "ns": self.ns,
                    "model": model,
                    "nearest": NEAREST,
                    "ids": [int(i) for i in message_ids],
                },
            ).fetchall()
        return _cosines_of(rows, "message_id", query_vector)


class ServerFactRows:
    """The vector primitives of the facts store's transaction
    (:class:`~memstrata.providers.facts.postgres.PostgresFactTransaction`) that use the
    ``embedding`` column of ``fact_vectors`` when the store set ``server_vectors``.

    A facts search compares the newest ``VECTOR_SCAN`` (20,000) vectors of the tenant
    and rescales the cosines over that set (:func:`memstrata.store.vectors.relative`), so
    the server computes exactly those cosines (no approximate index, the same figures as
    the client) and sends 16 bytes a fact instead of 1.5 KB.
    """

    conn: Conn
    ns: str
    server_vectors: ServerVectors | None = None

    def fill_embeddings(self, rows: Sequence[tuple[str, int, int, bytes]]) -> None:
        """Set ``embedding`` of vectors just written, ``(model, fact id, dims, bytes)``,
        where the column exists."""
        state = self.server_vectors
        if state is not None and state.column and rows:
            fill(self.conn, self.ns, FACTS, rows)

    def server_cosines(
        self, model: str, query_vector: Sequence[float], scan: int
    ) -> dict[int, float] | None:
        """Cosines of the query with the newest ``scan`` vectors of ``model``, computed by
        the server; None when the server path is off."""
        state = self.server_vectors
        if state is None or not state.server:
            return None
        norm = math.sqrt(sum(float(x) * float(x) for x in query_vector))
        if norm == 0.0:
            return {}
        n = len(query_vector)
        rows = self.conn.execute(
            f"SELECT fact_id, CASE WHEN embedding IS NOT NULL AND dims = {n} "
            f"THEN -(embedding::vector({n}) <#> %(q)s::vector({n})) END AS cos, "
            "CASE WHEN embedding IS NULL THEN vector END AS blob FROM fact_vectors "
            "WHERE namespace = %(ns)s AND model = %(model)s ORDER BY fact_id DESC "
            "LIMIT %(scan)s",
            {
                "q": "[" + ",".join(repr(float(x) / norm) for x in query_vector) + "]",
                "ns": self.ns,
                "model": model,
                "scan": max(0, int(scan)),
            },
        ).fetchall()
        return _cosines_of(rows, "fact_id", query_vector)


def _cosines_of(
    rows: Sequence[Mapping[str, Any]], key: str, query_vector: Sequence[float]
) -> dict[int, float]:
    """Row id (``key``) -> cosine from a server statement's rows: the server's ``cos``
    where the row's ``embedding`` is filled, else the client's from its ``blob`` (a
    vector written before the column existed and not copied yet)."""
    sims: dict[int, float] = {}
    uncopied: dict[int, bytes] = {}
    for r in rows:
        if r["cos"] is not None:
            sims[int(r[key])] = float(r["cos"])
        elif r["blob"] is not None:
            uncopied[int(r[key])] = bytes(r["blob"])
    if uncopied:
        sims.update(cosines(uncopied, query_vector))
    return sims
