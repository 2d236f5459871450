"""L0, the system prompt built once per session, and the fence around per-turn recall."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.prompt.builder import PromptBuilder, PromptContext
    from memstrata.prompt.fencing import (
        StreamingContextScrubber,
        build_memory_context_block,
        sanitize_context,
    )

__all__ = [
    "PromptBuilder",
    "PromptContext",
    "StreamingContextScrubber",
    "build_memory_context_block",
    "sanitize_context",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PromptBuilder": "memstrata.prompt.builder",
        "PromptContext": "memstrata.prompt.builder",
        "StreamingContextScrubber": "memstrata.prompt.fencing",
        "build_memory_context_block": "memstrata.prompt.fencing",
        "sanitize_context": "memstrata.prompt.fencing",
    },
)
