"""memstrata: layered, prompt-cache-friendly long-term memory for LLM agents.

The layers and their main types:

- L0 prompt assembly and per-turn recall fencing: ``build_memory_context_block``,
  ``sanitize_context``, ``StreamingContextScrubber``;
- L1 curated memory: ``FileMemory``, ``scan_for_threats``, the ``memory`` tool
  (``MemoryTool``, ``dispatch_tool``, ``Toolbox``), write approval (``PendingWrites``);
- L1.5 providers: ``MemoryProvider``, ``BuiltinMemoryProvider``, ``MemoryManager``, the
  bundled ``FactsProvider`` over ``FactStore``;
- L2 sessions: ``SessionStore``, ``search_messages``, ``search_sessions``, ``rank_query``,
  hybrid recall (``Embedder``, ``index_pending``) and ``expand_query``;
- beyond the seed: ``Curator`` with ``MemoryHistory`` (audit and undo), ``RememberTool``,
  ``forget``, ``run_doctor``, ``import_source`` / ``export_sessions``;
- scale-out: ``open_store`` / ``open_memory`` pick SQLite or ``PostgresSessionStore`` /
  ``PostgresMemory`` (``memstrata[postgres]``) from ``store.dsn``; ``migrate_home``;
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
    from memstrata.backends import open_memory, open_store
    from memstrata.compress import CompressionResult, ContextCompressor
    from memstrata.compress_steps import CompressionSettings, estimate_tokens
    from memstrata.config import Config, memstrata_home
    from memstrata.curator import CurationReport, Curator
    from memstrata.doctor import DoctorReport, Finding, run_doctor
    from memstrata.embed_minilm import MiniLMEmbedder
    from memstrata.embed_openai import OpenAIEmbedder
    from memstrata.embedders import Embedder, embedder_from_config, index_pending
    from memstrata.errors import MemstrataError
    from memstrata.expansion import expand_query
    from memstrata.exporting import export_memory, export_sessions
    from memstrata.facts import FactStore
    from memstrata.facts_provider import FactsProvider
    from memstrata.fencing import (
        StreamingContextScrubber,
        build_memory_context_block,
        sanitize_context,
    )
    from memstrata.forget import ForgetPlan, ForgetReport, forget, plan_forget
    from memstrata.fulltext import rank_query, search_messages, search_sessions
    from memstrata.importing import ImportReport, import_source
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
    from memstrata.memory_core import CuratedMemory
    from memstrata.memory_history import MemoryChange, MemoryHistory
    from memstrata.memory_tool import MEMORY_TOOL_SCHEMA, MemoryTool
    from memstrata.migrate import MigrationReport, migrate_home
    from memstrata.plugins import discover_providers, load_provider
    from memstrata.postgres import PostgresMemory, PostgresSessionStore
    from memstrata.prompt import PromptBuilder, PromptContext
    from memstrata.providers import BuiltinMemoryProvider, MemoryProvider, MemoryWriteMetadata
    from memstrata.query import compile_query
    from memstrata.remember_tool import RememberTool
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
    "CuratedMemory": "memstrata.memory_core",
    "CurationReport": "memstrata.curator",
    "Curator": "memstrata.curator",
    "DoctorReport": "memstrata.doctor",
    "Embedder": "memstrata.embedders",
    "FactStore": "memstrata.facts",
    "FactsProvider": "memstrata.facts_provider",
    "FileMemory": "memstrata.memory",
    "Finding": "memstrata.doctor",
    "ForgetPlan": "memstrata.forget",
    "ForgetReport": "memstrata.forget",
    "ImportReport": "memstrata.importing",
    "LLMClient": "memstrata.llm",
    "MEMORY_TOOL_SCHEMA": "memstrata.memory_tool",
    "Mem0Provider": "memstrata.mem0_provider",
    "MemoryChange": "memstrata.memory_history",
    "MemoryHistory": "memstrata.memory_history",
    "MemoryManager": "memstrata.manager",
    "MemoryProvider": "memstrata.providers",
    "MemoryTool": "memstrata.memory_tool",
    "MemoryWriteMetadata": "memstrata.providers",
    "MemstrataError": "memstrata.errors",
    "MigrationReport": "memstrata.migrate",
    "MiniLMEmbedder": "memstrata.embed_minilm",
    "OpenAIClient": "memstrata.llm",
    "OpenAIEmbedder": "memstrata.embed_openai",
    "PendingWrites": "memstrata.approval",
    "PostgresMemory": "memstrata.postgres",
    "PostgresSessionStore": "memstrata.postgres",
    "Pricing": "memstrata.agent_turn",
    "PromptBuilder": "memstrata.prompt",
    "PromptContext": "memstrata.prompt",
    "RememberTool": "memstrata.remember_tool",
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
    "embedder_from_config": "memstrata.embedders",
    "estimate_tokens": "memstrata.compress_steps",
    "expand_query": "memstrata.expansion",
    "export_memory": "memstrata.exporting",
    "export_sessions": "memstrata.exporting",
    "forget": "memstrata.forget",
    "import_source": "memstrata.importing",
    "index_pending": "memstrata.embedders",
    "load_provider": "memstrata.plugins",
    "memstrata_home": "memstrata.config",
    "migrate_home": "memstrata.migrate",
    "open_memory": "memstrata.backends",
    "open_store": "memstrata.backends",
    "plan_forget": "memstrata.forget",
    "rank_query": "memstrata.fulltext",
    "run_doctor": "memstrata.doctor",
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
    "CuratedMemory",
    "CurationReport",
    "Curator",
    "DoctorReport",
    "Embedder",
    "FactStore",
    "FactsProvider",
    "FileMemory",
    "Finding",
    "ForgetPlan",
    "ForgetReport",
    "ImportReport",
    "LLMClient",
    "MEMORY_TOOL_SCHEMA",
    "Mem0Provider",
    "MemoryChange",
    "MemoryHistory",
    "MemoryManager",
    "MemoryProvider",
    "MemoryTool",
    "MemoryWriteMetadata",
    "MemstrataError",
    "MigrationReport",
    "MiniLMEmbedder",
    "OpenAIClient",
    "OpenAIEmbedder",
    "PendingWrites",
    "PostgresMemory",
    "PostgresSessionStore",
    "Pricing",
    "PromptBuilder",
    "PromptContext",
    "RememberTool",
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
    "embedder_from_config",
    "estimate_tokens",
    "expand_query",
    "export_memory",
    "export_sessions",
    "forget",
    "import_source",
    "index_pending",
    "load_provider",
    "memstrata_home",
    "migrate_home",
    "open_memory",
    "open_store",
    "plan_forget",
    "rank_query",
    "run_doctor",
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
