"""L1.5, memory providers: the contract, the manager, plugin discovery and the bundled
``facts`` and ``mem0`` providers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata
    from memstrata.providers.builtin import BuiltinMemoryProvider
    from memstrata.providers.manager import MemoryManager

__all__ = [
    "BuiltinMemoryProvider",
    "MemoryManager",
    "MemoryProvider",
    "MemoryWriteMetadata",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BuiltinMemoryProvider": "memstrata.providers.builtin",
        "MemoryManager": "memstrata.providers.manager",
        "MemoryProvider": "memstrata.providers.base",
        "MemoryWriteMetadata": "memstrata.providers.base",
    },
)
