"""The query language both stores compile from: natural text and explicit syntax, CJK
bigrams, the dates a question names, the two readings of a transcript-shaped query, result
filters, and the bound of a page of results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.query.compile import CompiledQuery, compile_query

__all__ = [
    "CompiledQuery",
    "compile_query",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CompiledQuery": "memstrata.query.compile",
        "compile_query": "memstrata.query.compile",
    },
)
