"""L2, the session store: sessions, messages and their full-text indexes, on SQLite
(``store.sqlite``, the default) or PostgreSQL (``store.postgres``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.store.contract import SessionStoreContract
    from memstrata.store.sqlite.store import SessionStore

__all__ = [
    "SessionStore",
    "SessionStoreContract",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SessionStore": "memstrata.store.sqlite.store",
        "SessionStoreContract": "memstrata.store.contract",
    },
)
