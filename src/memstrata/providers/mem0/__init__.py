"""The bundled ``mem0`` provider: mem0 as the external memory, configured offline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.providers.mem0.provider import Mem0Provider

__all__ = [
    "Mem0Provider",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Mem0Provider": "memstrata.providers.mem0.provider",
    },
)
