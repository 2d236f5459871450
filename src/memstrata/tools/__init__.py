"""The tools a model calls (``memory``, ``session_search``, ``remember``) and the one edge that
turns a tool call's arguments into model-facing JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.memory.tool import MemoryTool
    from memstrata.tools.remember import RememberTool
    from memstrata.tools.session_search import SessionSearchTool
    from memstrata.tools.toolbox import Toolbox, dispatch_tool

__all__ = [
    "MemoryTool",
    "RememberTool",
    "SessionSearchTool",
    "Toolbox",
    "dispatch_tool",
]

# Imported on first use, so importing one module of the package stays cheap.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MemoryTool": "memstrata.memory.tool",
        "RememberTool": "memstrata.tools.remember",
        "SessionSearchTool": "memstrata.tools.session_search",
        "Toolbox": "memstrata.tools.toolbox",
        "dispatch_tool": "memstrata.tools.toolbox",
    },
)
