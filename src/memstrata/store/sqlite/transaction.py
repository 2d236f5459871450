"""One SQLite transaction with every primitive of the store contract.

The primitives are grouped by the table they work on: sessions (with titles, lineage
links, listings, meta and caches), messages (with recall windows and vectors), and
search. :class:`~memstrata.store.sqlite.store.SessionStore` opens one per unit of work.
"""

from __future__ import annotations

import sqlite3

from memstrata.store.sqlite.messages import MessageRows
from memstrata.store.sqlite.search import SearchRows
from memstrata.store.sqlite.sessions import SessionRows


class SQLiteTransaction(SessionRows, MessageRows, SearchRows):
    """The primitives on one connection, inside the transaction the store opened."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
