"""The audit history of curated memory on PostgreSQL: rows of ``curated_memory_history``.

The twin of :mod:`memstrata.memory.history` for :class:`~memstrata.store.postgres.PostgresMemory`:
the same :class:`~memstrata.memory.history.MemoryChange` objects (who, why, when, the
exact UTF-8 bytes of the target before and after), the same ``get`` / ``list`` /
``count`` and the same errors, so ``memory.history`` and ``memory.undo`` read the same
on both backends:

    with PostgresMemory(dsn, namespace="alice") as memory:
        result = memory.add("memory", "Deploys go through staging first.")
        print(memory.history.get(result.change_id).who)   # "api"
        memory.undo(result.change_id)                      # the row holds what it held

Unlike the file backend, a row is inserted by :func:`record` inside the transaction of
the write it records, while that target's row lock is held: the change and its history
row commit together or not at all, so no change ever lacks its row. Rows are never
updated (a trigger refuses it) and only deleted with the whole tenant
(``PostgresSessionStore.delete_namespace``). Every query is scoped to one namespace: a
tenant never sees another tenant's changes, and ids are numbered per tenant.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

import psycopg
from psycopg.rows import tuple_row

from memstrata.memory.history import MemoryChange, _with_undos, change_from_row, no_such_change
from memstrata.query.paging import clamp_page

__all__ = ["PostgresMemoryHistory", "record"]

# Class of the advisory lock that numbers a tenant's changes (the second key is the
# namespace's hash): "memh" in ASCII, a 32-bit key apart from the migration lock's.
_ID_LOCK_CLASS: Final = 0x6D656D68

_COLUMNS: Final = "id, at, target, action, who, why, before, after, undoes"

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]


def record(
    conn: psycopg.Connection[Any],
    namespace: str,
    *,
    target: str,
    action: str,
    who: str,
    why: str,
    before: bytes | None,
    after: bytes | None,
    undoes: int | None = None,
) -> int:
    """Append one change in the caller's transaction and return its id.

    The next id of the tenant is taken under a transaction-level advisory lock: writers
    of the two targets hold different row locks, so without it two could read the same
    highest id. The lock is held until commit, so ids follow the order of the commits.
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_ID_LOCK_CLASS, namespace))
    # Tuple rows whatever the connection's row factory (the session store's are dicts).
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(
            "INSERT INTO curated_memory_history "
            "(namespace, id, at, target, action, who, why, before, after, undoes) "
            "SELECT %s, coalesce(max(id), 0) + 1, %s, %s, %s, %s, %s, %s, %s, %s "
            "FROM curated_memory_history WHERE namespace = %s RETURNING id",
            (namespace, time.time(), target, action, who, why, before, after, undoes, namespace),
        ).fetchone()
    assert row is not None  # INSERT ... SELECT of an aggregate inserts exactly one row
    return int(row[0])


class PostgresMemoryHistory:
    """The append-only change log of one namespace's curated memory rows.

    Made by :class:`~memstrata.store.postgres.PostgresMemory` (``memory.history``), which lends
    it its connections; it satisfies :class:`~memstrata.memory.history.ChangeLog`.
    """

    def __init__(self, connect: Connect, namespace: str) -> None:
        self._connect = connect
        self.namespace = namespace

    def get(self, change_id: int) -> MemoryChange:
        """The change ``change_id``; InvalidMemoryArgument naming the fix if there is none."""
        with self._connect() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM curated_memory_history WHERE namespace = %s AND id = %s",
                (self.namespace, int(change_id)),
            ).fetchone()
        if row is None:
            raise no_such_change(change_id, empty=self.count() == 0)
        return change_from_row(row)

    def list(self, *, target: str | None = None, limit: int = 50) -> builtins.list[MemoryChange]:
        """The newest changes first, optionally of one target."""
        sql = f"SELECT {_COLUMNS} FROM curated_memory_history WHERE namespace = %s"
        params: builtins.list[Any] = [self.namespace]
        if target is not None:
            sql += " AND target = %s"
            params.append(target)
        sql += " ORDER BY id DESC LIMIT %s"
        params.append(clamp_page(limit, 1))
        with self._connect() as conn:
            return [change_from_row(row) for row in conn.execute(sql, params).fetchall()]

    def count(self) -> int:
        """How many changes are recorded."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM curated_memory_history WHERE namespace = %s",
                (self.namespace,),
            ).fetchone()
        return int(row[0]) if row is not None else 0

    def purge(self, change_ids: Sequence[int]) -> builtins.list[int]:
        """Delete these changes of this tenant and every undo of them (``memstrata
        forget``); the ids deleted. Undos go first: they reference their change."""
        if not change_ids:
            return []
        with self._connect() as conn:
            links = conn.execute(
                "SELECT id, undoes FROM curated_memory_history WHERE namespace = %s",
                (self.namespace,),
            ).fetchall()
            doomed = _with_undos({int(i) for i in change_ids}, [(int(a), b) for a, b in links])
            conn.execute(
                "DELETE FROM curated_memory_history WHERE namespace = %s AND id = ANY(%s)",
                (self.namespace, sorted(doomed)),
            )
        return sorted(doomed)
