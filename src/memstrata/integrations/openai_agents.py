"""OpenAI Agents SDK integration: a session kept in memstrata's store, and memstrata's
tools as SDK function tools (``pip install 'memstrata[openai-agents]'``).

:class:`MemstrataSession` implements the SDK's ``Session`` protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``). Each item is one message of a memstrata
session: the item itself is kept verbatim (so ``get_items`` returns exactly what
``add_items`` stored, in order) and its text is indexed, so every run is searchable
with ``session_search`` from any later session, the CLI or MCP.

:func:`memstrata_tools` gives ``memory`` (MEMORY.md / USER.md), ``session_search``
(recall over every stored session, the current one left out) and ``remember`` (the
facts store) as SDK ``FunctionTool`` objects.

The SDK is imported only by :func:`memstrata_tools`; the session needs nothing from it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from memstrata.config import Config
from memstrata.errors import MemstrataError, SessionStoreError
from memstrata.store.contract import MessageRow, SessionStoreContract

if TYPE_CHECKING:
    from memstrata.llm.types import LLMClient

SOURCE: Final = "openai-agents"
# Roles the SDK's message items use; developer is a system message by another name.
_MESSAGE_ROLES: Final = {"user": "user", "assistant": "assistant", "system": "system"}
_TEXT_KEYS: Final = ("text", "input_text", "output_text", "refusal")


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                for key in _TEXT_KEYS:
                    value = part.get(key)
                    if isinstance(value, str) and value:
                        texts.append(value)
                        break
        return "\n".join(texts)
    return ""


def item_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """The memstrata message that stores one SDK item: a searchable role and text, and
    the item verbatim as ``api_content``."""
    if not isinstance(item, Mapping):
        raise SessionStoreError(
            f"A session item must be a dict (an SDK input item), not {type(item).__name__}."
        )
    kind = item.get("type")
    role = item.get("role")
    text = ""
    tool_name: str | None = None
    if isinstance(role, str) and (kind in (None, "message")):
        text = _parts_text(item.get("content"))
        role = _MESSAGE_ROLES.get(role, "system" if role == "developer" else "user")
    elif kind == "function_call":
        tool_name = str(item.get("name") or "") or None
        role, text = "assistant", f"{tool_name or 'tool'}({item.get('arguments') or ''})"
    elif kind == "function_call_output":
        output = item.get("output")
        role, text = "tool", output if isinstance(output, str) else _parts_text(output)
    else:
        # Reasoning, web search, computer calls...: kept for the model, not indexed.
        role = "assistant"
    return {
        "role": role,
        "content": text or None,
        "tool_name": tool_name,
        "api_content": dict(item),
    }


class MemstrataSession:
    """An Agents SDK session stored in a memstrata session store.

    ``store`` is a memstrata ``SessionStore`` (SQLite) or ``PostgresSessionStore``; by
    default the store the memstrata config names (``$MEMSTRATA_HOME/state.db``) is
    opened, and closed by :meth:`close`. ``session_settings`` is the SDK's
    ``SessionSettings`` (its ``limit`` applies when ``get_items`` gets none).

    Pops are serialised within this object; two processes popping the same session
    at once may both see the same last item (the SDK's own SQLite session has the
    same limit across processes).
    """

    def __init__(
        self,
        session_id: str,
        store: SessionStoreContract | None = None,
        *,
        config: Config | None = None,
        source: str = SOURCE,
        user_id: str | None = None,
        session_settings: Any = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise SessionStoreError("MemstrataSession needs a non-empty session_id.")
        self.session_id = session_id
        self.session_settings = session_settings
        self.source = source
        self.user_id = user_id
        self._owns_store = store is None
        if store is None:
            from memstrata.backends import open_store

            store = open_store(config)
        self.store: SessionStoreContract = store
        self._lock = threading.Lock()
        self._created = False

    # -- the SDK's Session protocol -------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The items in order; with ``limit`` (or the settings' limit) the latest N."""
        settings = self.session_settings
        if limit is None and settings is not None:
            limit = settings.get("limit") if isinstance(settings, Mapping) else settings.limit
        return await asyncio.to_thread(self._get_items, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in one transaction (all or none are stored)."""
        if not items:
            return
        messages = [item_message(item) for item in items]
        await asyncio.to_thread(self._add, messages)

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (None when the session is empty)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Delete every item and the session itself (its text leaves the indexes too)."""
        await asyncio.to_thread(self._clear)

    # -- synchronous halves ---------------------------------------------------------------

    def _rows(self) -> list[MessageRow]:
        if self.store.get_session(self.session_id) is None:
            return []
        return self.store.get_messages(self.session_id)

    @staticmethod
    def _item(row: Mapping[str, Any]) -> Any:
        item = row.get("api_content")
        if isinstance(item, dict):
            return item
        # A message written by something else (the CLI, an import): give the SDK an
        # easy input message with its text.
        return {"role": row.get("role") or "user", "content": row.get("content") or ""}

    def _get_items(self, limit: int | None) -> list[Any]:
        items = [self._item(r) for r in self._rows()]
        if limit is None or limit < 0:
            # A negative limit means "no limit", as SQLite's LIMIT -1 does in the SDK.
            return items
        return items[max(0, len(items) - limit) :] if limit else []

    def _add(self, messages: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            if not self._created or self.store.get_session(self.session_id) is None:
                self.store.create_session(self.session_id, source=self.source, user_id=self.user_id)
                self._created = True
            self.store.append_messages(self.session_id, messages)

    def _pop(self) -> Any | None:
        with self._lock:
            rows = self._rows()
            if not rows:
                return None
            last = rows[-1]
            self.store.delete_messages([int(last["id"])])
            return self._item(last)

    def _clear(self) -> None:
        with self._lock:
            if self.store.get_session(self.session_id) is not None:
                self.store.delete_session(self.session_id)
            self._created = False

    def close(self) -> None:
        """Close the store if this session opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> MemstrataSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def memstrata_tools(
    session: MemstrataSession | None = None,
    *,
    home: Path | None = None,
    config: Config | None = None,
    store: SessionStoreContract | None = None,
    llm: LLMClient | None = None,
    include: Sequence[str] = ("memory", "session_search", "remember"),
) -> list[Any]:
    """memstrata's ``memory``, ``session_search`` and ``remember`` as SDK function tools.

    ``session`` (or ``store``) is searched, with ``session``'s own live items left out;
    ``home``/``config`` locate MEMORY.md, USER.md and facts.db (``$MEMSTRATA_HOME`` by
    default); ``llm`` overrides the client that writes session_search summaries. Tool
    errors come back to the model as text that says what to fix.
    """
    from agents import FunctionTool

    from memstrata.memory.tool import MemoryTool
    from memstrata.tools.remember import RememberTool
    from memstrata.tools.session_search import SessionSearchTool
    from memstrata.tools.toolbox import Toolbox

    cfg = config if config is not None else Config.load(home)
    unknown = sorted(set(include) - {"memory", "session_search", "remember"})
    if unknown:
        raise MemstrataError(
            f"Unknown tool(s) {', '.join(unknown)}: choose from memory, session_search, remember."
        )
    toolbox = Toolbox()
    if "memory" in include:
        toolbox.register_tool(MemoryTool(config=cfg))
    if "session_search" in include:
        search_store = store if store is not None else session.store if session else None
        toolbox.register_tool(
            SessionSearchTool(
                search_store,
                config=cfg,
                current_session_id=session.session_id if session else None,
                llm=llm,
            )
        )
    if "remember" in include:
        toolbox.register_tool(
            RememberTool(cfg.home, config=cfg, session_id=session.session_id if session else None)
        )

    def invoker(name: str) -> Any:
        async def invoke(_ctx: Any, arguments: str) -> str:
            result: str = await asyncio.to_thread(toolbox.dispatch, name, arguments or "{}")
            return result

        return invoke

    tools: list[Any] = []
    for schema in toolbox.schemas():
        function = schema["function"]
        tools.append(
            FunctionTool(
                name=function["name"],
                description=function["description"],
                params_json_schema=json.loads(json.dumps(function["parameters"])),
                on_invoke_tool=invoker(function["name"]),
                strict_json_schema=False,
            )
        )
    return tools
