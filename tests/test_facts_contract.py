"""The shared facts-store suite (memstrata.testing.facts_contract) on every shipped backend.

Each case gets a fresh SQLite file, or a fresh PostgreSQL tenant whose rows are deleted
afterwards (on the test server, and on a server with pgvector, which compares the
vectors itself), so the suite runs once per backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import PG_DSN, fresh_namespace, pgvector_dsn
from memstrata.providers.facts.store import FactStore
from memstrata.testing.facts_contract import FactStoreContractSuite

BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("pgvector", marks=pytest.mark.pgvector),
]


def open_facts(kind: str, folder: Path) -> Any:
    if kind == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        return FactStore(folder / "facts.db")
    from memstrata.providers.facts.postgres import PostgresFactStore

    if kind == "pgvector":
        store = PostgresFactStore(pgvector_dsn(), namespace=fresh_namespace())
        assert store._vectors.server, store._vectors.reason
        return store
    return PostgresFactStore(PG_DSN, namespace=fresh_namespace())


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _yield_store(kind: str, folder: Path) -> Iterator[Any]:
    store = open_facts(kind, folder)
    try:
        yield store
    finally:
        if kind != "sqlite":
            store.delete_namespace()
        store.close()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
class TestEveryBackend(FactStoreContractSuite):
    @pytest.fixture
    def facts(self, backend: str, tmp_path: Path) -> Iterator[Any]:
        yield from _yield_store(backend, tmp_path / "a")

    @pytest.fixture
    def empty_facts(self, backend: str, tmp_path: Path) -> Iterator[Any]:
        yield from _yield_store(backend, tmp_path / "b")
