"""The bundled ``facts`` provider: categorised facts with slots, history and recall,
in ``facts.db`` or in the PostgreSQL tenant of the session store (:func:`open_facts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.providers.facts.contract import FactStoreContract
    from memstrata.providers.facts.opening import open_facts
    from memstrata.providers.facts.postgres import PostgresFactStore
    from memstrata.providers.facts.provider import FactsProvider
    from memstrata.providers.facts.store import FactStore

__all__ = [
    "FactStore",
    "FactStoreContract",
    "FactsProvider",
    "PostgresFactStore",
    "open_facts",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FactStore": "memstrata.providers.facts.store",
        "FactStoreContract": "memstrata.providers.facts.contract",
        "FactsProvider": "memstrata.providers.facts.provider",
        "PostgresFactStore": "memstrata.providers.facts.postgres",
        "open_facts": "memstrata.providers.facts.opening",
    },
)
