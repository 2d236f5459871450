"""The bounds of the numbers a query passes to SQL: a page of results (a limit, an
offset) and the ids of rows, shared by every store.

A limit reaches SQL as an integer, and SQLite and PostgreSQL hold 64-bit integers: a
limit of ``10**30`` (a user asking for "everything") raised ``OverflowError`` deep in
a query. Stores that check their arguments refuse a page past :data:`MAX_PAGE` and say
so; stores that read any number as a limit (the facts store, the curated memory's
history) hold it within the bound, which no store's rows reach. An id outside
:data:`SQL_INTEGERS` names no row: looked up, it is not found.
"""

from __future__ import annotations

from typing import Final, SupportsInt

# Far beyond the rows of any store, and far below 2**63 after the arithmetic a search
# does on a page (offset plus limit, twice that for its candidates).
MAX_PAGE: Final = 1_000_000_000


def clamp_page(value: SupportsInt, low: int = 0) -> int:
    """``value`` as an integer held within ``low`` and :data:`MAX_PAGE`."""
    return max(low, min(MAX_PAGE, int(value)))


# The integers SQLite and PostgreSQL (bigint) hold: every row id is one of them.
SQL_INTEGERS: Final = range(-(2**63), 2**63)
