"""memstrata: layered, prompt-cache-friendly long-term memory for LLM agents.

The layers and their main types:

- L0 prompt assembly and per-turn recall fencing: ``build_memory_context_block``,
  ``sanitize_context``, ``StreamingContextScrubber``;
- L1 curated memory: ``FileMemory``, ``scan_for_threats``, the ``memory`` tool
  (``MemoryTool``, ``dispatch_tool``, ``Toolbox``), write approval (``PendingWrites``);
- L1.5 providers: ``MemoryProvider``, ``BuiltinMemoryProvider``, ``MemoryManager``;
- L2 sessions: ``SessionStore``;
- the LLM seam: ``client_for``, ``OpenAIClient``, ``AnthropicClient``.

Heavy optional SDKs (openai, anthropic, mcp, psycopg) load only when used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from memstrata.approval import PendingWrites
from memstrata.config import Config, memstrata_home
from memstrata.errors import MemstrataError
from memstrata.fencing import StreamingContextScrubber, build_memory_context_block, sanitize_context
from memstrata.llm import (
    AnthropicClient,
    Completion,
    LLMClient,
    OpenAIClient,
    TokenUsage,
    ToolCall,
    client_for,
)
from memstrata.manager import MemoryManager
from memstrata.memory import FileMemory, WriteResult
from memstrata.memory_tool import MEMORY_TOOL_SCHEMA, MemoryTool
from memstrata.plugins import discover_providers, load_provider
from memstrata.providers import BuiltinMemoryProvider, MemoryProvider, MemoryWriteMetadata
from memstrata.scanner import ThreatFinding, scan_for_threats
from memstrata.store import SessionStore
from memstrata.tools import Toolbox, dispatch_tool

try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = [
    "AnthropicClient",
    "BuiltinMemoryProvider",
    "Completion",
    "Config",
    "FileMemory",
    "LLMClient",
    "MEMORY_TOOL_SCHEMA",
    "MemoryManager",
    "MemoryProvider",
    "MemoryTool",
    "MemoryWriteMetadata",
    "MemstrataError",
    "OpenAIClient",
    "PendingWrites",
    "SessionStore",
    "StreamingContextScrubber",
    "ThreatFinding",
    "TokenUsage",
    "ToolCall",
    "Toolbox",
    "WriteResult",
    "__version__",
    "build_memory_context_block",
    "client_for",
    "discover_providers",
    "dispatch_tool",
    "load_provider",
    "memstrata_home",
    "sanitize_context",
    "scan_for_threats",
]
