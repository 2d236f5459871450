"""``Mem0Provider``: mem0's open-source library as a memory provider, run in-process.

Select it with ``memory.provider = "mem0"`` after ``pip install 'memstrata[mem0]'``.
mem0 extracts facts from each finished turn with an LLM, embeds them and keeps them in
an embedded Qdrant folder (``$MEMSTRATA_HOME/mem0/qdrant``) plus a SQLite history
(``$MEMSTRATA_HOME/mem0/history.db``). Its LLM and embedder are pointed at the
OpenAI-compatible endpoint of ``[llm]``: the ``curator`` task's model (which falls back
to ``llm.model``) extracts facts, ``llm.embedding_model`` embeds them.

What it does in the lifecycle:

* ``initialize`` - imports mem0 (never before: discovery and ``memstrata plugins list``
  work without it), with mem0's anonymous telemetry switched off, and opens the store;
* ``system_prompt_block`` - one fixed sentence naming the tools (byte-stable);
* ``prefetch`` - ``Memory.search`` for the user's message: at most ``mem0.top_k``
  memories and ``recall_chars`` characters under ``## mem0 memories``, ``""`` if none;
* ``sync_turn`` - ``Memory.add([user, assistant])``, mem0's LLM fact extraction (on the
  manager's background worker, so the turn does not wait for it); sub-agent turns are
  skipped, as their "user" is the parent agent;
* ``on_memory_write`` - mirrors the curated files with ``infer=False`` (stored verbatim,
  no LLM call on the write path): ``add`` stores the entry, ``replace`` rewrites the
  mirrored entry containing ``old_text``, ``remove`` deletes it;
* tools ``mem0_search``, ``mem0_add``, ``mem0_update``, ``mem0_delete``.

mem0's embedded Qdrant is not safe for concurrent use, so every call into it holds one
lock; ``prefetch`` waits for it only briefly (an extraction may be running) and recalls
nothing rather than stall the turn. See ``docs/mem0.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

from memstrata.config import Config
from memstrata.errors import MemstrataError, ProviderError, ToolArgumentError
from memstrata.llm.arguments import required_str
from memstrata.llm.settings import LLMSettings
from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata
from memstrata.providers.mem0.setup import (
    COLLECTION,
    INSTALL_HINT,
    MEM0_DIRNAME,
    PLACEHOLDER_KEY,
    describe_error,
    error_hint,
    folder_locked,
    import_mem0,
    llm_settings,
    mem0_config,
    mem0_installed,
    normalize_user_id,
    qdrant_server_client,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Payload keys of entries mirrored from MEMORY.md / USER.md.
TARGET_KEY: Final = "memstrata_target"
ORIGIN_KEY: Final = "memstrata_origin"
SESSION_KEY: Final = "memstrata_session"

DEFAULT_RECALL_CHARS: Final = 1200
# A turn's message longer than this is cut before extraction: the extraction prompt
# already runs to several thousand tokens, and a pasted log rarely holds a fact.
MAX_MESSAGE_CHARS: Final = 6000
# How long prefetch waits for a running extraction before recalling nothing this turn
# (below the manager's 8 s prefetch budget, so the thread ends on its own).
PREFETCH_LOCK_WAIT: Final = 5.0
# How long a tool call waits for a running extraction before reporting "busy".
TOOL_LOCK_WAIT: Final = 30.0
MAX_SEARCH_LIMIT: Final = 20
# Mirrored entries scanned to find the one a replace/remove refers to.
MIRROR_SCAN_LIMIT: Final = 1000

SYSTEM_PROMPT_BLOCK: Final = (
    "Long-term memory (mem0) is active: memories relevant to each user message are "
    "recalled automatically. Use mem0_search to look further, mem0_add to store a "
    "durable fact, mem0_update / mem0_delete to correct one."
)

TOOL_SCHEMAS: Final[list[dict[str, Any]]] = [
    {
        "type": "function",
        "function": {
            "name": "mem0_search",
            "description": (
                "Search long-term memory (facts learned about the user in past "
                "conversations) by meaning. Returns memories with their ids."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_SEARCH_LIMIT,
                        "description": "Most memories to return (default: mem0.top_k).",
                    },
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "mem0_add",
            "description": (
                "Store one durable fact in long-term memory, verbatim, as a short "
                "self-contained sentence ('User prefers tabs over spaces')."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The fact, one sentence."},
                },
                "required": ["content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "mem0_update",
            "description": "Rewrite one memory (id from mem0_search) with corrected text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The memory id."},
                    "content": {"type": "string", "description": "The corrected fact."},
                },
                "required": ["id", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "mem0_delete",
            "description": "Delete one memory that is wrong or obsolete (id from mem0_search).",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string", "description": "The memory id."}},
                "required": ["id"],
            },
        },
    },
]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------
# The provider


class Mem0Provider(MemoryProvider):
    """mem0 (``mem0ai``) in-process: LLM fact extraction, embedded Qdrant vectors.

    ``config`` supplies ``[llm]`` and ``[mem0]`` (default: loaded from the home folder
    at :meth:`initialize`). ``recall_chars`` bounds what :meth:`prefetch` injects per
    turn. Settings are described in ``docs/mem0.md``.
    """

    name: ClassVar[str] = "mem0"
    description: ClassVar[str] = (
        "mem0 open-source library: LLM fact extraction, embedded Qdrant vector recall"
    )

    def __init__(
        self, *, config: Config | None = None, recall_chars: int = DEFAULT_RECALL_CHARS
    ) -> None:
        if recall_chars < 80:
            raise ProviderError(f"Mem0Provider needs recall_chars >= 80, got {recall_chars}.")
        self.config = config
        self.recall_chars = recall_chars
        self.session_id = ""
        self.user_id = ""
        self.top_k = 5
        self.primary = True
        self.base_url = ""
        self._memory: Any = None
        self._clients: list[Any] = []
        self._home: Path | None = None
        self._lock = threading.Lock()

    # -- availability -------------------------------------------------------------------

    def unavailable_reason(self) -> str | None:
        """Why the provider cannot run here (every reason, joined), or None.

        Imports nothing from mem0 and touches no network.
        """
        reasons: list[str] = []
        if not mem0_installed():
            reasons.append(f"the mem0ai package is not installed ({INSTALL_HINT})")
        try:
            mem0_config(self.config if self.config is not None else Config.load())
        except MemstrataError as exc:
            reasons.append(str(exc))
        return "; ".join(reasons) or None

    def is_available(self) -> bool:
        """True when mem0ai is installed and ``[llm]`` names an endpoint, model and
        embedding model."""
        return self.unavailable_reason() is None

    # -- lifecycle ----------------------------------------------------------------------

    def initialize(
        self,
        session_id: str,
        *,
        home: Path,
        platform: str = "cli",
        agent_context: str = "primary",
        user_id: str | None = None,
        session_title: str | None = None,
        **extra: Any,
    ) -> None:
        """Import mem0 and open its store under ``home/mem0`` (once per provider).

        Raises ProviderError when mem0 is missing, the endpoint is not configured, or
        the embedded store is in use by another process.
        """
        home = Path(home)
        if self.config is None or self.config.home != home:
            self.config = Config.load(home)
        settings = mem0_config(self.config, home)
        section = self.config.section("mem0")
        self.session_id = session_id
        self.primary = agent_context == "primary"
        self.top_k = max(1, int(section["top_k"]))
        chosen = normalize_user_id(user_id or "") or normalize_user_id(str(section["user_id"]))
        if not chosen:
            raise ProviderError(
                "mem0 needs a user id: set `memstrata config set mem0.user_id NAME`."
            )
        self.user_id = chosen
        if self._memory is not None:
            if self._home == home:
                return
            self.shutdown()  # another home folder: its own store
        root = home / MEM0_DIRNAME
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderError(f"Cannot create {root} for mem0: {exc}.") from exc
        mem0 = import_mem0(root)
        llm = llm_settings(self.config)
        self.base_url = llm.base_url
        store = settings["vector_store"]["config"]
        if "url" not in store and folder_locked(Path(store["path"])):
            raise ProviderError(self._open_error(RuntimeError("already accessed"), settings))
        try:
            if "url" in store:
                store["client"] = qdrant_server_client(store, llm.timeout)
            memory = mem0.Memory.from_config(settings)
        except Exception as exc:
            server = store.pop("client", None)
            if server is not None:
                server.close()
            raise ProviderError(self._open_error(exc, settings)) from exc
        try:
            self._check_dimensions(memory, settings)
            self._own_clients(memory, llm)
        except BaseException:
            self._close_memory(memory)
            raise
        self._memory = memory
        self._home = home

    def _open_error(self, exc: BaseException, settings: Mapping[str, Any]) -> str:
        store = settings["vector_store"]["config"]
        text = str(exc)
        if "already accessed" in text:
            return (
                f"mem0's embedded vector store {store['path']} is open in another process "
                "or provider instance (only one may use it at a time). Close the other "
                "memstrata process, or run a Qdrant server and set mem0.qdrant_url so "
                "several can share it."
            )
        where = store.get("url") or store["path"]
        return f"mem0 could not open its store at {where}: {describe_error(exc)}." + error_hint(
            exc, self.base_url
        )

    @staticmethod
    def _check_dimensions(memory: Any, settings: Mapping[str, Any]) -> None:
        """Refuse a store created with another vector size now, not at the first write."""
        wanted = settings["vector_store"]["config"]["embedding_model_dims"]
        try:
            info = memory.vector_store.client.get_collection(COLLECTION)
            size = info.config.params.vectors.size
        except Exception:  # an unusual collection layout: the first write will tell
            logger.debug("mem0: could not read the collection's vector size", exc_info=True)
            return
        if isinstance(size, int) and size != wanted:
            raise ProviderError(
                f"mem0's store holds {size}-dimensional vectors but mem0.embedding_dims is "
                f"{wanted}. Set mem0.embedding_dims back to {size}, or point "
                "mem0.qdrant_path at a new folder for the new embedding model."
            )

    def _own_clients(self, memory: Any, settings: LLMSettings) -> None:
        """Give mem0's LLM and embedder OpenAI clients built from ``[llm]``.

        mem0 builds its own with a 600 s timeout and routes to OpenRouter whenever
        OPENROUTER_API_KEY is set; memstrata's timeout, retries and endpoint apply instead.
        """
        import openai

        for part in (memory.llm, memory.embedding_model):
            previous = getattr(part, "client", None)
            replacement = openai.OpenAI(
                base_url=settings.base_url or None,
                api_key=settings.api_key or PLACEHOLDER_KEY,
                timeout=settings.timeout,
                max_retries=settings.max_retries,
            )
            part.client = replacement
            self._clients.append(replacement)
            if previous is not None:
                previous.close()

    def system_prompt_block(self) -> str:
        """One fixed sentence naming the mem0 tools ("" before initialize)."""
        return SYSTEM_PROMPT_BLOCK if self._memory is not None else ""

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None,
        reset: bool,
        reason: str,
    ) -> None:
        """Follow the new session id (memories are per user, not per session)."""
        self.session_id = new_session_id

    def shutdown(self) -> None:
        """Close mem0's history database, the vector store and the HTTP clients."""
        with self._lock:
            memory, self._memory = self._memory, None
            clients, self._clients = self._clients, []
        if memory is not None:
            self._close_memory(memory)
        for client in clients:
            client.close()

    @staticmethod
    def _close_memory(memory: Any) -> None:
        # Memory.close() closes only the SQLite history; the embedded Qdrant client keeps
        # a lock on its folder until closed, which would refuse the next session's open.
        memory.close()
        client = getattr(memory.vector_store, "client", None)
        if client is not None:
            client.close()

    # -- calls into mem0 ------------------------------------------------------------------

    def _run(self, what: str, fn: Callable[[Any], T], *, wait: float | None) -> T:
        """Call ``fn(memory)`` under the store lock; mem0 errors become ProviderError."""
        if self._memory is None:
            raise ProviderError(
                "The mem0 provider is not initialised: call initialize(session_id, "
                "home=...) (MemoryManager.initialize_all does) before using it."
            )
        acquired = self._lock.acquire() if wait is None else self._lock.acquire(timeout=wait)
        if not acquired:
            raise ProviderError(
                f"mem0 is still storing an earlier turn; could not {what} within {wait:.0f} s. "
                "Try again in a moment."
            )
        try:
            memory = self._memory
            if memory is None:
                raise ProviderError("The mem0 provider was shut down.")
            return fn(memory)
        except MemstrataError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"mem0 could not {what}: {describe_error(exc)}." + error_hint(exc, self.base_url)
            ) from exc
        finally:
            self._lock.release()

    def search(
        self, query: str, *, limit: int | None = None, wait: float | None = None
    ) -> list[dict[str, Any]]:
        """Memories of the current user most related to ``query``, best first."""
        top_k = self.top_k if limit is None else limit
        result = self._run(
            "search memories",
            lambda m: m.search(query, filters={"user_id": self.user_id}, top_k=top_k),
            wait=wait,
        )
        return [r for r in result.get("results", []) if isinstance(r, dict)]

    def add(
        self,
        messages: list[dict[str, str]],
        *,
        infer: bool,
        metadata: Mapping[str, Any] | None = None,
        wait: float | None = None,
    ) -> list[dict[str, Any]]:
        """``Memory.add`` for the current user; returns mem0's ``results`` list."""
        meta = dict(metadata or {})
        result = self._run(
            "store memories",
            lambda m: m.add(messages, user_id=self.user_id, infer=infer, metadata=meta),
            wait=wait,
        )
        return [r for r in result.get("results", []) if isinstance(r, dict)]

    def _owned(self, memory: Any, memory_id: str) -> dict[str, Any]:
        """The memory ``memory_id`` if it belongs to the current user (else ToolArgumentError)."""
        try:
            found = memory.get(memory_id)
        except ValueError:  # not an id the store can parse: certainly not one of ours
            found = None
        if not isinstance(found, dict) or found.get("user_id") != self.user_id:
            raise ToolArgumentError(
                f"No memory with id {memory_id!r}. Use mem0_search to find the id."
            )
        return found

    # -- per turn -----------------------------------------------------------------------

    def prefetch(self, query: str, *, session_id: str) -> str:
        """``## mem0 memories`` related to ``query`` (bounded), or ``""``."""
        if self._memory is None or not query.strip():
            return ""
        try:
            found = self.search(_clip(query, MAX_MESSAGE_CHARS), wait=PREFETCH_LOCK_WAIT)
        except ProviderError as exc:
            if "still storing" in str(exc):
                logger.info("mem0: extraction still running; no recall this turn")
                return ""
            raise
        lines: list[str] = []
        budget = self.recall_chars
        for item in found:
            text = " ".join(str(item.get("memory") or "").split())
            if not text:
                continue
            day = str(item.get("created_at") or "")[:10]
            line = f"- {text}" + (f" ({day})" if day else "")
            if len(line) > budget:
                if lines:
                    break
                line = _clip(line, budget)
            lines.append(line)
            budget -= len(line) + 1
        return "## mem0 memories\n" + "\n".join(lines) if lines else ""

    def sync_turn(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Hand the finished turn to mem0's fact extraction (one LLM call)."""
        if self._memory is None or not self.primary or not user.strip():
            return
        turn = [{"role": "user", "content": _clip(user, MAX_MESSAGE_CHARS)}]
        if assistant.strip():
            turn.append({"role": "assistant", "content": _clip(assistant, MAX_MESSAGE_CHARS)})
        self.add(turn, infer=True, metadata={SESSION_KEY: session_id or self.session_id})

    # -- mirroring curated memory ---------------------------------------------------------

    def on_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        *,
        metadata: MemoryWriteMetadata | None = None,
    ) -> None:
        """Mirror one curated-memory write verbatim (``infer=False``: no LLM call)."""
        if self._memory is None:
            return
        origin = metadata.origin if metadata is not None else "tool"
        old_text = metadata.old_text if metadata is not None else None
        if action == "add":
            if content.strip():
                self.add(
                    [{"role": "user", "content": content}],
                    infer=False,
                    metadata={TARGET_KEY: target, ORIGIN_KEY: origin},
                )
            return
        needle = old_text or (content if action == "remove" else "")
        if action not in ("replace", "remove") or not needle:
            return

        def apply(memory: Any) -> None:
            listed = memory.get_all(
                filters={"user_id": self.user_id, TARGET_KEY: target}, top_k=MIRROR_SCAN_LIMIT
            )
            matches = [r for r in listed.get("results", []) if needle in str(r.get("memory") or "")]
            if len(matches) > 1:
                # The curated file matched old_text to exactly one entry; the mirror has
                # diverged (an edit outside the tool). Touch one entry, never several.
                logger.info("mem0: %d mirrored entries contain %r; using one", len(matches), needle)
            if action == "remove":
                if matches:
                    memory.delete(matches[0]["id"])
            elif matches:
                memory.update(matches[0]["id"], text=content)
            elif content.strip():
                memory.add(
                    [{"role": "user", "content": content}],
                    user_id=self.user_id,
                    infer=False,
                    metadata={TARGET_KEY: target, ORIGIN_KEY: origin},
                )

        self._run(f"mirror a memory {action}", apply, wait=None)

    # -- tools --------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """``mem0_search``, ``mem0_add``, ``mem0_update`` and ``mem0_delete``."""
        return [dict(schema) for schema in TOOL_SCHEMAS]

    def handle_tool_call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one tool; errors come back as ``{"success": false, "error": ...}``."""
        handlers = {
            "mem0_search": self._tool_search,
            "mem0_add": self._tool_add,
            "mem0_update": self._tool_update,
            "mem0_delete": self._tool_delete,
        }
        return self._dispatch_tool(handlers, name, args)

    def _tool_search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = required_str(args, "query")
        limit = args.get("limit")
        if limit is not None and (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_SEARCH_LIMIT
        ):
            raise ToolArgumentError(
                f"'limit' must be an integer from 1 to {MAX_SEARCH_LIMIT}, got {limit!r}."
            )
        found = self.search(query, limit=limit, wait=TOOL_LOCK_WAIT)
        memories = [
            {
                "id": item.get("id"),
                "memory": item.get("memory"),
                "score": round(float(item.get("score") or 0.0), 3),
                "created_at": item.get("created_at"),
            }
            for item in found
        ]
        return {"success": True, "count": len(memories), "memories": memories}

    def _tool_add(self, args: Mapping[str, Any]) -> dict[str, Any]:
        content = required_str(args, "content")
        added = self.add(
            [{"role": "user", "content": content}],
            infer=False,
            metadata={ORIGIN_KEY: "tool", SESSION_KEY: self.session_id},
            wait=TOOL_LOCK_WAIT,
        )
        ids = [item.get("id") for item in added]
        return {"success": True, "id": ids[0] if ids else None, "memory": content}

    def _tool_update(self, args: Mapping[str, Any]) -> dict[str, Any]:
        memory_id = required_str(args, "id")
        content = required_str(args, "content")

        def update(memory: Any) -> str:
            old = self._owned(memory, memory_id)
            memory.update(memory_id, text=content)
            return str(old.get("memory") or "")

        previous = self._run("update the memory", update, wait=TOOL_LOCK_WAIT)
        return {"success": True, "id": memory_id, "memory": content, "previous": previous}

    def _tool_delete(self, args: Mapping[str, Any]) -> dict[str, Any]:
        memory_id = required_str(args, "id")

        def delete(memory: Any) -> str:
            old = self._owned(memory, memory_id)
            memory.delete(memory_id)
            return str(old.get("memory") or "")

        deleted = self._run("delete the memory", delete, wait=TOOL_LOCK_WAIT)
        return {"success": True, "id": memory_id, "deleted": deleted}
