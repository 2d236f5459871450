"""The shared contract suite (memstrata.testing.store_contract) on every shipped backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import PG_DSN
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing.store_contract import StoreContractSuite


class TestSQLiteStore(StoreContractSuite):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SessionStore]:
        with SessionStore(tmp_path / "state.db") as sqlite_store:
            yield sqlite_store


@pytest.mark.postgres
class TestPostgresStore(StoreContractSuite):
    @pytest.fixture
    def store(self) -> Iterator[object]:
        from memstrata.store.postgres import PostgresSessionStore

        with PostgresSessionStore(
            PG_DSN, namespace=f"t-{uuid.uuid4().hex[:16]}", pool_size=2
        ) as pg:
            try:
                yield pg
            finally:
                pg.delete_namespace()
