"""What ``memstrata mcp`` serves, without the protocol: tools and resources over one home.

:class:`MemoryService` opens curated memory and the session store through
:mod:`memstrata.backends` (so ``store.dsn`` moves both to PostgreSQL), offers the
library's own ``memory`` and ``session_search`` tools with their schemas and handlers,
adds the tools of the external provider named by ``memory.provider``, and renders the
resources (the memory snapshot, recent sessions, one session). Every method is
synchronous and thread-safe; :mod:`memstrata.mcp.server` runs them in worker threads.

Tool calls never raise: every failure comes back as the ``{"success": false, "error":
...}`` JSON the model reads in any other agent loop.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from memstrata.backends import open_memory, open_store, postgres_dsn
from memstrata.config import Config
from memstrata.errors import SessionStoreError
from memstrata.llm.types import LLMClient
from memstrata.memory.tool import MemoryTool
from memstrata.search.recall import MAX_LIMIT, session_search
from memstrata.tools.session_search import NAME as SESSION_SEARCH_NAME
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox, error_response, to_anthropic_schema

if TYPE_CHECKING:
    from memstrata.providers.manager import MemoryManager

logger = logging.getLogger(__name__)

SNAPSHOT_URI: Final = "memstrata://memory/snapshot"
RECENT_URI: Final = "memstrata://sessions/recent"
SESSION_URI_PREFIX: Final = "memstrata://sessions/"
SESSION_URI_TEMPLATE: Final = SESSION_URI_PREFIX + "{session_id}"
RECENT_LIMIT: Final = MAX_LIMIT
EMPTY_SNAPSHOT: Final = (
    "Curated memory is empty. Save durable facts with the memory tool "
    '(e.g. {"action": "add", "target": "user", "content": "Prefers concise answers"}).'
)


@dataclass(frozen=True)
class ToolInfo:
    """One tool as MCP lists it: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ResourceInfo:
    """One resource (or, with ``template``, a family of resources)."""

    uri: str
    name: str
    description: str
    mime_type: str
    template: bool = False


RESOURCES: Final = (
    ResourceInfo(
        SNAPSHOT_URI,
        "memory-snapshot",
        "The curated memory (MEMORY.md and USER.md) as a new session's system prompt shows it.",
        "text/markdown",
    ),
    ResourceInfo(
        RECENT_URI,
        "recent-sessions",
        f"The {RECENT_LIMIT} most recently active conversations: titles, sources, previews.",
        "application/json",
    ),
)
RESOURCE_TEMPLATES: Final = (
    ResourceInfo(
        SESSION_URI_TEMPLATE,
        "session",
        "One stored conversation's messages (the first 20 and last 10 of a long one).",
        "application/json",
        template=True,
    ),
)


def _is_error(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, Mapping) and value.get("success") is False


class MemoryService:
    """The memory layer of one home (or one PostgreSQL namespace), served as tools.

    ``config`` defaults to :meth:`Config.load`. Opening is eager, so a broken
    configuration (bad DSN, missing driver, unavailable provider) fails at startup
    with its fix, not at the first tool call. Close it with :meth:`close`.
    """

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else Config.load()
        self.backend = "postgresql" if postgres_dsn(self.config) is not None else "sqlite"
        self.memory = open_memory(self.config)
        try:
            self.store = open_store(self.config)
        except BaseException:
            self._close_memory()
            raise
        self._snapshot_lock = threading.Lock()
        # MCP has no user turns, so the per-turn cap on failed consolidations restarts on
        # every call (see :meth:`call_tool`); the host's own loop limits retries.
        self.memory_tool = MemoryTool(self.memory, config=self.config)
        # Every tool of the library's default toolbox, with the same schemas and handlers;
        # memory and session_search are swapped for ones on the configured backend.
        self.toolbox = Toolbox.default(config=self.config)
        self.toolbox.register_tool(self.memory_tool, replace=True)
        self.toolbox.register_tool(SessionSearchTool(self.store, config=self.config), replace=True)
        # MCP has no memstrata session of its own; providers get one id per process.
        self.session_id = f"mcp-{uuid.uuid4().hex[:12]}"
        try:
            self.manager: MemoryManager | None = self._start_provider()
        except BaseException:
            self.store.close()
            self._close_memory()
            raise
        if self.manager is not None:
            # The provider's tools join the toolbox; the memory tool stays the one above
            # (over this service's memory, which the manager listens to for mirroring).
            self.toolbox.register_provider_tools(self.manager, include_builtin=False)

    def _start_provider(self) -> MemoryManager | None:
        if not str(self.config.get("memory.provider")).strip():
            return None
        from memstrata.providers.manager import MemoryManager

        manager = MemoryManager.from_config(self.config, memory=self.memory)
        failed = manager.initialize_all(self.session_id, platform="mcp")
        if failed:
            logger.warning("Memory provider(s) %s failed to start; their tools are off", failed)
        return manager

    # -- tools ------------------------------------------------------------------------

    def tools(self) -> list[ToolInfo]:
        """The tools to list: the library's (``memory``, ``session_search``, ...), then
        the provider's."""
        out = []
        for schema in self.toolbox.schemas():
            plain = to_anthropic_schema(schema)
            out.append(
                ToolInfo(
                    name=str(plain["name"]),
                    description=str(plain.get("description", "")),
                    input_schema=dict(plain["input_schema"]),
                )
            )
        return out

    def _toolbox_for(self, name: str, llm: LLMClient | None) -> Toolbox:
        if llm is None or name != SESSION_SEARCH_NAME:
            return self.toolbox
        # A search whose summaries this call's client writes (the MCP client's model).
        box = Toolbox()
        box.register_tool(SessionSearchTool(self.store, config=self.config, llm=llm))
        return box

    def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, *, llm: LLMClient | None = None
    ) -> tuple[str, bool]:
        """Run a tool; return its model-facing JSON text and whether it is an error.

        ``llm`` writes the summaries of ``session_search`` (default: the configured
        summary model, or verbatim excerpts without one). Never raises.
        """
        try:
            self.memory_tool.reset_turn()
            box = self._toolbox_for(name, llm)
            result = box.call(name, arguments if arguments is not None else {})
            text = json.dumps(result, ensure_ascii=False, default=str)
        except Exception as exc:  # the edge: nothing may reach the client as a traceback
            logger.exception("MCP tool %r failed", name)
            text = json.dumps(
                error_response(
                    f"Tool '{name}' failed unexpectedly ({type(exc).__name__}: {exc}). "
                    "Continue without it; the error was logged by the memstrata server."
                ),
                ensure_ascii=False,
            )
        return text, _is_error(text)

    # -- resources --------------------------------------------------------------------

    def resources(self) -> tuple[ResourceInfo, ...]:
        """The fixed resources."""
        return RESOURCES

    def resource_templates(self) -> tuple[ResourceInfo, ...]:
        """The resource families (one session by id)."""
        return RESOURCE_TEMPLATES

    def read_resource(self, uri: str) -> tuple[str, str] | None:
        """A resource's text and MIME type; None when the URI names nothing offered here.

        Raises :class:`~memstrata.errors.SessionNotFoundError` for an unknown session id.
        """
        if uri == SNAPSHOT_URI:
            return self.snapshot(), "text/markdown"
        if uri == RECENT_URI:
            # Through session_search, which serves SQLite and PostgreSQL stores alike.
            recent = session_search(self.store, "", limit=RECENT_LIMIT)
            return json.dumps(recent, ensure_ascii=False, indent=2), "application/json"
        if uri.startswith(SESSION_URI_PREFIX):
            session_id = uri[len(SESSION_URI_PREFIX) :].strip()
            if not session_id or "/" in session_id:
                raise SessionStoreError(
                    f"{uri!r} names no session: use {SESSION_URI_TEMPLATE} with an id from "
                    f"{RECENT_URI}."
                )
            session = session_search(self.store, session_id=session_id)
            return json.dumps(session, ensure_ascii=False, indent=2), "application/json"
        return None

    def snapshot(self) -> str:
        """The memory block a session starting now would get (re-read from storage)."""
        with self._snapshot_lock:
            self.memory.load()
            text = self.memory.snapshot()
        return text or EMPTY_SNAPSHOT

    # -- lifecycle --------------------------------------------------------------------

    def close(self) -> None:
        """Drain provider work (bounded) and close the store."""
        if self.manager is not None:
            self.manager.shutdown_all()
        self.store.close()
        self._close_memory()

    def _close_memory(self) -> None:
        close = getattr(self.memory, "close", None)  # PostgreSQL memory holds a pool
        if callable(close):
            close()

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
