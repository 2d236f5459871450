"""Context compression and session splitting (the cross-cutting layer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.compress.compressor import CompressionResult, ContextCompressor
    from memstrata.compress.split import compact_session, split_session
    from memstrata.compress.steps import CompressionSettings

__all__ = [
    "CompressionResult",
    "CompressionSettings",
    "ContextCompressor",
    "compact_session",
    "split_session",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CompressionResult": "memstrata.compress.compressor",
        "CompressionSettings": "memstrata.compress.steps",
        "ContextCompressor": "memstrata.compress.compressor",
        "compact_session": "memstrata.compress.split",
        "split_session": "memstrata.compress.split",
    },
)
