"""One PostgreSQL transaction, scoped to one tenant, with every primitive of the store contract.

The primitives are grouped by the table they work on: sessions (with titles, lineage
links, listings, meta and caches), messages (with recall windows and vectors), and
search. :class:`~memstrata.store.postgres.store.PostgresSessionStore` opens one per unit
of work.
"""

from __future__ import annotations

from typing import Any

import psycopg

from memstrata.store.postgres.messages import MessageRows
from memstrata.store.postgres.pgvector import ServerVectorRows, ServerVectors
from memstrata.store.postgres.search import Sampled, SearchRows
from memstrata.store.postgres.sessions import SessionRows


class PostgresTransaction(ServerVectorRows, SessionRows, MessageRows, SearchRows):
    """The primitives on one pooled connection, for the rows of tenant ``ns``
    (``server_vectors``: how the store compares vectors, see
    :mod:`memstrata.store.postgres.pgvector`)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        ns: str,
        server_vectors: ServerVectors | None = None,
    ) -> None:
        self.conn = conn
        self.ns = ns
        self.server_vectors = server_vectors
        self.inserted = 0
        # Whether this transaction changed the tenant's message counters other than by
        # appending (see memstrata.store.postgres.ranking.changed).
        self.recounted = False
        self.sampled = Sampled()
