"""The SQLite backend of the session store: one file in WAL mode, FTS5 indexes kept by
triggers, and the full-text search over them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.store.sqlite.store import SessionStore

__all__ = [
    "SessionStore",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SessionStore": "memstrata.store.sqlite.store",
    },
)
