"""L1, curated memory: ``MEMORY.md`` / ``USER.md`` entries, their history, write approval
and the curator. ``core`` holds every rule; ``files`` and ``postgres`` are its backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.memory.approval import PendingWrites
    from memstrata.memory.core import CuratedMemory
    from memstrata.memory.curator import CurationReport, Curator
    from memstrata.memory.files import FileMemory, WriteResult
    from memstrata.memory.history import MemoryChange, MemoryHistory

__all__ = [
    "CuratedMemory",
    "CurationReport",
    "Curator",
    "FileMemory",
    "MemoryChange",
    "MemoryHistory",
    "PendingWrites",
    "WriteResult",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CuratedMemory": "memstrata.memory.core",
        "CurationReport": "memstrata.memory.curator",
        "Curator": "memstrata.memory.curator",
        "FileMemory": "memstrata.memory.files",
        "MemoryChange": "memstrata.memory.history",
        "MemoryHistory": "memstrata.memory.history",
        "PendingWrites": "memstrata.memory.approval",
        "WriteResult": "memstrata.memory.files",
    },
)
