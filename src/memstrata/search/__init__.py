"""Recall over the session store: ``session_search`` (discover, read, scroll), query-focused
summaries, excerpts, query expansion and embedders for hybrid recall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.search.recall import session_search

__all__ = [
    "session_search",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "session_search": "memstrata.search.recall",
    },
)
