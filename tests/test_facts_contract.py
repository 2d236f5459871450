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

from conftest import yield_facts
from memstrata.testing.facts_contract import FactStoreContractSuite

BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("pgvector", marks=pytest.mark.pgvector),
]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
class TestEveryBackend(FactStoreContractSuite):
    @pytest.fixture
    def facts(self, backend: str, tmp_path: Path) -> Iterator[Any]:
        yield from yield_facts(backend, tmp_path / "a")

    @pytest.fixture
    def empty_facts(self, backend: str, tmp_path: Path) -> Iterator[Any]:
        yield from yield_facts(backend, tmp_path / "b")
