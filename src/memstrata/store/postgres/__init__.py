"""memstrata on PostgreSQL: the session store and curated memory, shared by many machines.

Needs the ``postgres`` extra (``pip install 'memstrata[postgres]'``). Every row belongs
to a namespace (a tenant: a user or an agent) and every query is scoped to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstrata.store.postgres.store import PostgresSessionStore, validate_namespace

if TYPE_CHECKING:
    from memstrata.memory.postgres import PostgresMemory

__all__ = ["PostgresMemory", "PostgresSessionStore", "validate_namespace"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the memory layer pulls in the scanner and formats.
    if name == "PostgresMemory":
        from memstrata.memory.postgres import PostgresMemory

        return PostgresMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
