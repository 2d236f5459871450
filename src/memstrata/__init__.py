"""memstrata: layered, prompt-cache-friendly long-term memory for LLM agents.

The layers and their main types:

- L0 prompt assembly and per-turn recall fencing: ``build_memory_context_block``,
  ``sanitize_context``, ``StreamingContextScrubber``;
- L1 curated memory: ``FileMemory``, ``scan_for_threats``, the ``memory`` tool
  (``MemoryTool``, ``dispatch_tool``, ``Toolbox``), write approval (``PendingWrites``);
- L1.5 providers: ``MemoryProvider``, ``BuiltinMemoryProvider``, ``MemoryManager``, the
  bundled ``FactsProvider`` over ``FactStore``;
- L2 sessions: ``SessionStore``, ``search_messages``, ``search_sessions``;
- the LLM seam: ``client_for``, ``OpenAIClient``, ``AnthropicClient``.

Names are imported on first use: ``import memstrata`` stays cheap, so a CLI command or a
short script pays only for the layers it touches.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.agent import Agent
    from memstrata.agent_turn import Pricing, TurnResult
    from memstrata.approval import PendingWrites
    from memstrata.compress import CompressionResult, ContextCompressor
    from memstrata.compress_steps import CompressionSettings, estimate_tokens
    from memstrata.config import Config, memstrata_home
    from memstrata.errors import MemstrataError
    from memstrata.facts import FactStore
    from memstrata.facts_provider import FactsProvider
    from memstrata.fencing import (
        StreamingContextScrubber,
        build_memory_context_block,
        sanitize_context,
    )
    from memstrata.fulltext import search_messages, search_sessions
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
    from memstrata.mem0_provider import Mem0Provider
    from memstrata.memory import FileMemory, WriteResult
    from memstrata.memory_tool import MEMORY_TOOL_SCHEMA, MemoryTool
    from memstrata.plugins import discover_providers, load_provider
    from memstrata.prompt import PromptBuilder, PromptContext
    from memstrata.providers import BuiltinMemoryProvider, MemoryProvider, MemoryWriteMetadata
    from memstrata.query import compile_query
    from memstrata.scanner import ThreatFinding, scan_for_threats, threat_message
    from memstrata.search import session_search
    from memstrata.search_tool import SessionSearchTool
    from memstrata.session_split import compact_session, split_session
    from memstrata.store import SessionStore
    from memstrata.tools import Toolbox, dispatch_tool

try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Agent": "memstrata.agent",
    "AnthropicClient": "memstrata.llm",
    "BuiltinMemoryProvider": "memstrata.providers",
    "Completion": "memstrata.llm",
    "CompressionResult": "memstrata.compress",
    "CompressionSettings": "memstrata.compress_steps",
    "Config": "memstrata.config",
    "ContextCompressor": "memstrata.compress",
    "FactStore": "memstrata.facts",
    "FactsProvider": "memstrata.facts_provider",
    "FileMemory": "memstrata.memory",
    "LLMClient": "memstrata.llm",
    "MEMORY_TOOL_SCHEMA": "memstrata.memory_tool",
    "Mem0Provider": "memstrata.mem0_provider",
    "MemoryManager": "memstrata.manager",
    "MemoryProvider": "memstrata.providers",
    "MemoryTool": "memstrata.memory_tool",
    "MemoryWriteMetadata": "memstrata.providers",
    "MemstrataError": "memstrata.errors",
    "OpenAIClient": "memstrata.llm",
    "PendingWrites": "memstrata.approval",
    "Pricing": "memstrata.agent_turn",
    "PromptBuilder": "memstrata.prompt",
    "PromptContext": "memstrata.prompt",
    "SessionSearchTool": "memstrata.search_tool",
    "SessionStore": "memstrata.store",
    "StreamingContextScrubber": "memstrata.fencing",
    "ThreatFinding": "memstrata.scanner",
    "TokenUsage": "memstrata.llm",
    "ToolCall": "memstrata.llm",
    "Toolbox": "memstrata.tools",
    "TurnResult": "memstrata.agent_turn",
    "WriteResult": "memstrata.memory",
    "build_memory_context_block": "memstrata.fencing",
    "client_for": "memstrata.llm",
    "compact_session": "memstrata.session_split",
    "compile_query": "memstrata.query",
    "discover_providers": "memstrata.plugins",
    "dispatch_tool": "memstrata.tools",
    "estimate_tokens": "memstrata.compress_steps",
    "load_provider": "memstrata.plugins",
    "memstrata_home": "memstrata.config",
    "sanitize_context": "memstrata.fencing",
    "scan_for_threats": "memstrata.scanner",
    "search_messages": "memstrata.fulltext",
    "search_sessions": "memstrata.fulltext",
    "session_search": "memstrata.search",
    "split_session": "memstrata.session_split",
    "threat_message": "memstrata.scanner",
}

__all__ = [
    "Agent",
    "AnthropicClient",
    "BuiltinMemoryProvider",
    "Completion",
    "CompressionResult",
    "CompressionSettings",
    "Config",
    "ContextCompressor",
    "FactStore",
    "FactsProvider",
    "FileMemory",
    "LLMClient",
    "MEMORY_TOOL_SCHEMA",
    "Mem0Provider",
    "MemoryManager",
    "MemoryProvider",
    "MemoryTool",
    "MemoryWriteMetadata",
    "MemstrataError",
    "OpenAIClient",
    "PendingWrites",
    "Pricing",
    "PromptBuilder",
    "PromptContext",
    "SessionSearchTool",
    "SessionStore",
    "StreamingContextScrubber",
    "ThreatFinding",
    "TokenUsage",
    "ToolCall",
    "Toolbox",
    "TurnResult",
    "WriteResult",
    "__version__",
    "build_memory_context_block",
    "client_for",
    "compact_session",
    "compile_query",
    "discover_providers",
    "dispatch_tool",
    "estimate_tokens",
    "load_provider",
    "memstrata_home",
    "sanitize_context",
    "scan_for_threats",
    "search_messages",
    "search_sessions",
    "session_search",
    "split_session",
    "threat_message",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstrata' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
