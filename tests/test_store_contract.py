"""The shared contract suite (memstrata.testing.store_contract) on every shipped backend.

The ``store`` fixture of conftest gives each case a fresh SQLite file and a fresh
PostgreSQL tenant, so the suite runs once per backend.
"""

from __future__ import annotations

from memstrata.testing.store_contract import StoreContractSuite


class TestEveryBackend(StoreContractSuite):
    pass
