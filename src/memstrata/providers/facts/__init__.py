"""The bundled ``facts`` provider: categorised facts with slots, history and recall."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.providers.facts.provider import FactsProvider
    from memstrata.providers.facts.store import FactStore

__all__ = [
    "FactStore",
    "FactsProvider",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FactStore": "memstrata.providers.facts.store",
        "FactsProvider": "memstrata.providers.facts.provider",
    },
)
