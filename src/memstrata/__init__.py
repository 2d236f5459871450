"""memstrata: layered, prompt-cache-friendly long-term memory for LLM agents.

The layers and their main types:

- L0 prompt assembly and per-turn recall fencing: ``build_memory_context_block``,
  ``sanitize_context``, ``StreamingContextScrubber``;
- L1 curated memory: ``FileMemory``, ``scan_for_threats``, the ``memory`` tool
  (``MemoryTool``, ``dispatch_tool``, ``Toolbox``), write approval (``PendingWrites``);
- L1.5 providers: ``MemoryProvider``, ``BuiltinMemoryProvider``, ``MemoryManager``, the
  bundled ``FactsProvider`` over ``FactStore``;
- L2 sessions: ``SessionStore`` (and ``SessionStoreContract``, what every backend keeps),
  ``search_messages``, ``search_sessions``, ``rank_query``,
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

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from memstrata import _moved
from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.agent.loop import Agent
    from memstrata.agent.settings import AgentSettings
    from memstrata.agent.turn import Pricing, TurnResult
    from memstrata.backends import open_memory, open_store
    from memstrata.compress.compressor import CompressionResult, ContextCompressor
    from memstrata.compress.split import compact_session, split_session
    from memstrata.compress.steps import CompressionSettings, estimate_tokens
    from memstrata.config import Config, memstrata_home
    from memstrata.errors import MemstrataError
    from memstrata.llm import (
        AnthropicClient,
        Completion,
        LLMClient,
        OpenAIClient,
        TokenUsage,
        ToolCall,
        client_for,
    )
    from memstrata.memory.approval import PendingWrites
    from memstrata.memory.core import CuratedMemory
    from memstrata.memory.curator import CurationReport, Curator
    from memstrata.memory.files import FileMemory, WriteResult
    from memstrata.memory.history import MemoryChange, MemoryHistory
    from memstrata.memory.tool import MEMORY_TOOL_SCHEMA, MemoryTool
    from memstrata.ops.doctor import DoctorReport, Finding, run_doctor
    from memstrata.ops.export import export_memory, export_sessions
    from memstrata.ops.forget import ForgetPlan, ForgetReport, forget, plan_forget
    from memstrata.ops.importing import ImportReport, import_source
    from memstrata.ops.migrate import MigrationReport, migrate_home
    from memstrata.prompt.builder import PromptBuilder, PromptContext
    from memstrata.prompt.fencing import (
        StreamingContextScrubber,
        build_memory_context_block,
        sanitize_context,
    )
    from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata
    from memstrata.providers.builtin import BuiltinMemoryProvider
    from memstrata.providers.facts.provider import FactsProvider
    from memstrata.providers.facts.store import FactStore
    from memstrata.providers.manager import MemoryManager
    from memstrata.providers.mem0.provider import Mem0Provider
    from memstrata.providers.plugins import discover_providers, load_provider
    from memstrata.query.compile import compile_query
    from memstrata.scanner.scan import ThreatFinding, scan_for_threats, threat_message
    from memstrata.search.embedders import Embedder, embedder_from_config, index_pending
    from memstrata.search.expansion import expand_query
    from memstrata.search.minilm import MiniLMEmbedder
    from memstrata.search.openai_embedder import OpenAIEmbedder
    from memstrata.search.recall import session_search
    from memstrata.store.base import rank_query, search_messages, search_sessions
    from memstrata.store.contract import SessionStoreContract
    from memstrata.store.postgres import PostgresMemory, PostgresSessionStore
    from memstrata.store.sqlite.store import SessionStore
    from memstrata.tools.remember import RememberTool
    from memstrata.tools.session_search import SessionSearchTool
    from memstrata.tools.toolbox import Toolbox, dispatch_tool

try:
    __version__ = version("memstrata")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

# Public name -> module that defines it.
_EXPORTS: dict[str, str] = {
    "Agent": "memstrata.agent.loop",
    "AgentSettings": "memstrata.agent.settings",
    "AnthropicClient": "memstrata.llm",
    "BuiltinMemoryProvider": "memstrata.providers.builtin",
    "Completion": "memstrata.llm",
    "CompressionResult": "memstrata.compress.compressor",
    "CompressionSettings": "memstrata.compress.steps",
    "Config": "memstrata.config",
    "ContextCompressor": "memstrata.compress.compressor",
    "CuratedMemory": "memstrata.memory.core",
    "CurationReport": "memstrata.memory.curator",
    "Curator": "memstrata.memory.curator",
    "DoctorReport": "memstrata.ops.doctor",
    "Embedder": "memstrata.search.embedders",
    "FactStore": "memstrata.providers.facts.store",
    "FactsProvider": "memstrata.providers.facts.provider",
    "FileMemory": "memstrata.memory.files",
    "Finding": "memstrata.ops.doctor",
    "ForgetPlan": "memstrata.ops.forget",
    "ForgetReport": "memstrata.ops.forget",
    "ImportReport": "memstrata.ops.importing",
    "LLMClient": "memstrata.llm",
    "MEMORY_TOOL_SCHEMA": "memstrata.memory.tool",
    "Mem0Provider": "memstrata.providers.mem0.provider",
    "MemoryChange": "memstrata.memory.history",
    "MemoryHistory": "memstrata.memory.history",
    "MemoryManager": "memstrata.providers.manager",
    "MemoryProvider": "memstrata.providers.base",
    "MemoryTool": "memstrata.memory.tool",
    "MemoryWriteMetadata": "memstrata.providers.base",
    "MemstrataError": "memstrata.errors",
    "MigrationReport": "memstrata.ops.migrate",
    "MiniLMEmbedder": "memstrata.search.minilm",
    "OpenAIClient": "memstrata.llm",
    "OpenAIEmbedder": "memstrata.search.openai_embedder",
    "PendingWrites": "memstrata.memory.approval",
    "PostgresMemory": "memstrata.memory.postgres",
    "PostgresSessionStore": "memstrata.store.postgres.store",
    "Pricing": "memstrata.agent.turn",
    "PromptBuilder": "memstrata.prompt.builder",
    "PromptContext": "memstrata.prompt.builder",
    "RememberTool": "memstrata.tools.remember",
    "SessionSearchTool": "memstrata.tools.session_search",
    "SessionStore": "memstrata.store.sqlite.store",
    "SessionStoreContract": "memstrata.store.contract",
    "StreamingContextScrubber": "memstrata.prompt.fencing",
    "ThreatFinding": "memstrata.scanner.scan",
    "TokenUsage": "memstrata.llm",
    "ToolCall": "memstrata.llm",
    "Toolbox": "memstrata.tools.toolbox",
    "TurnResult": "memstrata.agent.turn",
    "WriteResult": "memstrata.memory.files",
    "build_memory_context_block": "memstrata.prompt.fencing",
    "client_for": "memstrata.llm",
    "compact_session": "memstrata.compress.split",
    "compile_query": "memstrata.query.compile",
    "discover_providers": "memstrata.providers.plugins",
    "dispatch_tool": "memstrata.tools.toolbox",
    "embedder_from_config": "memstrata.search.embedders",
    "estimate_tokens": "memstrata.compress.steps",
    "expand_query": "memstrata.search.expansion",
    "export_memory": "memstrata.ops.export",
    "export_sessions": "memstrata.ops.export",
    "forget": "memstrata.ops.forget",
    "import_source": "memstrata.ops.importing",
    "index_pending": "memstrata.search.embedders",
    "load_provider": "memstrata.providers.plugins",
    "memstrata_home": "memstrata.config",
    "migrate_home": "memstrata.ops.migrate",
    "open_memory": "memstrata.backends",
    "open_store": "memstrata.backends",
    "plan_forget": "memstrata.ops.forget",
    "rank_query": "memstrata.store.base",
    "run_doctor": "memstrata.ops.doctor",
    "sanitize_context": "memstrata.prompt.fencing",
    "scan_for_threats": "memstrata.scanner.scan",
    "search_messages": "memstrata.store.base",
    "search_sessions": "memstrata.store.base",
    "session_search": "memstrata.search.recall",
    "split_session": "memstrata.compress.split",
    "threat_message": "memstrata.scanner.scan",
}

__all__ = [
    "Agent",
    "AgentSettings",
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
    "SessionStoreContract",
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
# The 0.1 module paths (memstrata.fulltext, memstrata.postgres, ...) keep importing.
_moved.install()
