"""The :class:`MemoryManager`: one front for the built-in provider and external ones.

The manager holds the built-in provider first (it cannot be removed) and, by default, at
most one external provider (``memory.allow_multiple_providers`` lifts that). It routes
provider tools by name, fences nothing itself (``prefetch_all`` returns raw text for
:func:`~memstrata.prompt.fencing.build_memory_context_block`), and keeps slow backends off the
turn's critical path:

* ``prefetch_all`` runs each external provider in a daemon thread joined for at most
  ``external_prefetch_timeout`` seconds; a provider still busy from an earlier turn is
  skipped until it returns;
* ``sync_all``, ``queue_prefetch_all`` and memory-write mirroring go to one background
  worker thread (:mod:`memstrata.providers.background`), so turn N reaches every provider before
  turn N+1;
* ``shutdown_all`` drains that worker for at most ``sync_drain_timeout`` seconds and
  reports what it had to abandon.

Every hook call is guarded: a provider that raises is logged and skipped, never allowed
to break the turn.
"""

from __future__ import annotations

import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from memstrata.config import Config
from memstrata.errors import ConfigError, MemstrataError, ProviderError, ToolArgumentError
from memstrata.llm.arguments import error_response, parse_arguments
from memstrata.memory.files import memory_and_config
from memstrata.memory.writes import MemoryWrite

# ShutdownReport is part of this module's API; it lives with the worker it reports on.
from memstrata.providers.background import BackgroundQueue, ShutdownReport
from memstrata.providers.base import BUILTIN_PROVIDER_NAME, MemoryWriteMetadata, ProviderCalls
from memstrata.providers.builtin import BuiltinMemoryProvider

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory

logger = logging.getLogger(__name__)

# Tools the agent core owns; a provider cannot take these names over.
CORE_TOOL_NAMES: Final = frozenset({"memory", "session_search", "remember"})
WRITE_ACTIONS: Final = frozenset({"add", "replace", "remove"})

DEFAULT_PREFETCH_TIMEOUT: Final = 8.0
DEFAULT_SYNC_DRAIN_TIMEOUT: Final = 5.0


def normalize_tool_schema(schema: object) -> dict[str, Any] | None:
    """The bare ``{name, description, parameters}`` of a tool definition, or None.

    Unwraps the OpenAI ``{"type": "function", "function": {...}}`` envelope; a schema
    without a usable name is dropped (None) rather than sent to a model that rejects it.
    """
    if not isinstance(schema, Mapping):
        return None
    inner = schema.get("function") if schema.get("type") == "function" else schema
    if not isinstance(inner, Mapping):
        return None
    name = inner.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    return dict(inner)


class MemoryManager:
    """All memory providers of one agent, driven through one lifecycle.

    Example::

        manager = MemoryManager()                  # the built-in provider only
        manager.add_provider(MyProvider())         # one external provider
        manager.initialize_all("session-1")
        system_prompt_part = manager.build_system_prompt()
        recall = manager.prefetch_all("what did we decide?", session_id="session-1")
        manager.sync_all("what did we decide?", "We chose SQLite.", session_id="session-1")
        manager.shutdown_all()
    """

    def __init__(
        self,
        *,
        memory: CuratedMemory | None = None,
        config: Config | None = None,
        external_prefetch_timeout: float = DEFAULT_PREFETCH_TIMEOUT,
        sync_drain_timeout: float = DEFAULT_SYNC_DRAIN_TIMEOUT,
        allow_multiple: bool | None = None,
    ) -> None:
        for label, value in (
            ("external_prefetch_timeout", external_prefetch_timeout),
            ("sync_drain_timeout", sync_drain_timeout),
        ):
            if not value > 0:
                raise ConfigError(f"{label} must be a positive number of seconds, got {value}.")
        memory, config = memory_and_config(memory, config)
        self.config = config
        self.memory = memory
        self.external_prefetch_timeout = float(external_prefetch_timeout)
        self.sync_drain_timeout = float(sync_drain_timeout)
        self.allow_multiple = (
            bool(config.get("memory.allow_multiple_providers"))
            if allow_multiple is None
            else allow_multiple
        )
        self.builtin = BuiltinMemoryProvider(memory)
        self._calls: list[ProviderCalls] = []
        self._tools: dict[str, ProviderCalls] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._prefetch_threads: dict[str, threading.Thread] = {}
        self._background = BackgroundQueue(("sync", "prefetch", "write"))
        self.session_id = ""
        self.shutdown_report: ShutdownReport | None = None
        self._register(ProviderCalls.for_provider(self.builtin))
        # Mirroring starts at the source: every write to this memory (the memory tool,
        # dispatch_tool, the MCP server, the CLI, the curator) is announced here.
        listen = getattr(memory, "add_write_listener", None)
        self._stop_listening: Callable[[], None] | None = (
            listen(self.mirror_write) if callable(listen) else None
        )

    @classmethod
    def from_config(
        cls, config: Config | None = None, *, memory: CuratedMemory | None = None, **kwargs: Any
    ) -> MemoryManager:
        """A manager with the external provider named by ``memory.provider`` (if any).

        Raises ProviderError when that provider is unknown, fails to load or reports
        itself unavailable, so a misconfiguration is seen at startup, not mid-session.
        """
        manager = cls(memory=memory, config=config, **kwargs)
        name = str(manager.config.get("memory.provider")).strip()
        if name:
            from memstrata.providers.plugins import load_provider

            provider = load_provider(name, manager.config)
            if not provider.is_available():
                raise ProviderError(
                    f"Memory provider {name!r} is not available here (missing package or "
                    "key?). See `memstrata plugins list`, or unset it with "
                    '`memstrata config set memory.provider ""`.'
                )
            manager.add_provider(provider)
        return manager

    # -- registration -----------------------------------------------------------------

    @property
    def providers(self) -> list[object]:
        """The registered providers, built-in first."""
        return [calls.provider for calls in self._calls]

    @property
    def provider_names(self) -> list[str]:
        """The registered providers' names, built-in first."""
        return [calls.name for calls in self._calls]

    def get_provider(self, name: str) -> object | None:
        """The provider registered under ``name``, or None."""
        for calls in self._calls:
            if calls.name == name:
                return calls.provider
        return None

    def add_provider(self, provider: object) -> bool:
        """Register an external provider; return False (with a logged warning) if refused.

        Refused: a second external provider unless multiple are allowed, a duplicate
        name, or the reserved name "builtin". Tools whose names collide with core tools
        or with an earlier provider's tools are left out, each with a warning.
        """
        calls = ProviderCalls.for_provider(provider)
        if calls.name == BUILTIN_PROVIDER_NAME:
            logger.warning(
                "Memory provider name 'builtin' is reserved for the curated files; "
                "rename the provider's class attribute `name`."
            )
            return False
        if self.get_provider(calls.name) is not None:
            logger.warning("Memory provider %r is already registered; ignoring.", calls.name)
            return False
        externals = [c.name for c in self._calls if c.name != BUILTIN_PROVIDER_NAME]
        if externals and not self.allow_multiple:
            logger.warning(
                "Memory provider %r refused: %r is already active and only one external "
                "provider runs at a time. Set memory.allow_multiple_providers = true to "
                "run several (their tools are routed by name).",
                calls.name,
                externals[0],
            )
            return False
        self._register(calls)
        return True

    def _register(self, calls: ProviderCalls) -> None:
        try:
            raw = calls.call("get_tool_schemas") or []
        except Exception:
            logger.warning("Memory provider %r: get_tool_schemas failed", calls.name, exc_info=True)
            raw = []
        builtin = calls.name == BUILTIN_PROVIDER_NAME
        for schema in raw:
            normal = normalize_tool_schema(schema)
            if normal is None:
                logger.warning(
                    "Memory provider %r: dropped a tool schema without a name.", calls.name
                )
                continue
            tool = normal["name"]
            if not builtin and tool in CORE_TOOL_NAMES:
                logger.warning(
                    "Memory provider %r: tool %r collides with a core tool and is left out; "
                    "rename it (e.g. %r).",
                    calls.name,
                    tool,
                    f"{calls.name}_{tool}",
                )
                continue
            if tool in self._tools:
                logger.warning(
                    "Memory provider %r: tool %r is already provided by %r; the first "
                    "registration wins.",
                    calls.name,
                    tool,
                    self._tools[tool].name,
                )
                continue
            self._tools[tool] = calls
            self._schemas[tool] = normal
        self._calls.append(calls)

    def remove_provider(self, name: str) -> object:
        """Unregister the external provider ``name`` and its tools; return it.

        The caller decides whether to call its ``shutdown``. The built-in provider
        cannot be removed (ProviderError).
        """
        if name == BUILTIN_PROVIDER_NAME:
            raise ProviderError(
                "The builtin memory provider cannot be removed; disable the curated files "
                "with memory.memory_enabled / memory.user_profile_enabled instead."
            )
        for calls in self._calls:
            if calls.name == name:
                self._calls.remove(calls)
                for tool in [t for t, owner in self._tools.items() if owner is calls]:
                    del self._tools[tool]
                    del self._schemas[tool]
                return calls.provider
        raise ProviderError(
            f"No memory provider named {name!r} is registered "
            f"(registered: {', '.join(self.provider_names)})."
        )

    # -- guarded calls ----------------------------------------------------------------

    def _externals(self) -> list[ProviderCalls]:
        return [c for c in self._calls if c.name != BUILTIN_PROVIDER_NAME]

    def _each(
        self, hook: str, run: Callable[[ProviderCalls], Any], *, builtin: bool = True
    ) -> list[Any]:
        """Run ``run`` for every provider, logging and skipping failures."""
        results: list[Any] = []
        for calls in list(self._calls):
            if not builtin and calls.name == BUILTIN_PROVIDER_NAME:
                continue
            try:
                results.append(run(calls))
            except Exception:
                logger.warning("Memory provider %r: %s failed", calls.name, hook, exc_info=True)
        return results

    # -- session ----------------------------------------------------------------------

    def initialize_all(
        self,
        session_id: str,
        *,
        home: Path | None = None,
        platform: str = "cli",
        agent_context: str = "primary",
        user_id: str | None = None,
        session_title: str | None = None,
        **extra: Any,
    ) -> list[str]:
        """Initialise every provider for ``session_id``; return the names that failed.

        An external provider whose ``initialize`` raises is unregistered for the rest
        of the process (logged), so its tools are not offered half-working.
        """
        self.session_id = session_id
        kwargs: dict[str, Any] = {
            "home": home if home is not None else self.config.home,
            "platform": platform,
            "agent_context": agent_context,
            "user_id": user_id,
            "session_title": session_title,
            **extra,
        }
        failed: list[str] = []
        for calls in list(self._calls):
            try:
                calls.initialize(session_id, **kwargs)
            except Exception:
                logger.warning(
                    "Memory provider %r failed to initialize and was disabled for this run",
                    calls.name,
                    exc_info=True,
                )
                failed.append(calls.name)
                if calls.name != BUILTIN_PROVIDER_NAME:
                    self.remove_provider(calls.name)
        return failed

    def build_system_prompt(self) -> str:
        """Every provider's system-prompt block, non-empty ones joined by a blank line."""
        blocks = self._each("system_prompt_block", lambda c: c.call("system_prompt_block"))
        return "\n\n".join(b.strip() for b in blocks if isinstance(b, str) and b.strip())

    # -- tools ------------------------------------------------------------------------

    def tool_names(self, *, include_builtin: bool = True) -> list[str]:
        """Names of the tools the providers offer, in registration order."""
        return [
            name
            for name, calls in self._tools.items()
            if include_builtin or calls.name != BUILTIN_PROVIDER_NAME
        ]

    def has_tool(self, name: str) -> bool:
        """True if a provider handles tool ``name``."""
        return name in self._tools

    def get_tool_schemas(self, *, include_builtin: bool = True) -> list[dict[str, Any]]:
        """Provider tools in OpenAI format (``{"type": "function", "function": ...}``).

        Pass ``include_builtin=False`` when the agent already offers the ``memory``
        tool through its own toolbox.
        """
        return [
            {"type": "function", "function": dict(self._schemas[name])}
            for name in self.tool_names(include_builtin=include_builtin)
        ]

    def call_tool(self, name: str, args: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run a provider tool and return its result; errors raise.

        The way a :class:`~memstrata.tools.toolbox.Toolbox` runs provider tools (see
        :meth:`~memstrata.tools.toolbox.Toolbox.register_provider_tools`): the toolbox
        turns an error into the model's text. A successful ``memory`` write is mirrored
        to the external providers by the memory itself (its write listener).
        """
        calls = self._tools.get(name)
        if calls is None:
            known = ", ".join(self._tools) or "(none)"
            raise ToolArgumentError(
                f"No memory provider handles tool '{name}'. Provider tools: {known}."
            )
        result = calls.call("handle_tool_call", name, parse_arguments(args))
        if isinstance(result, str):
            # A provider may answer with JSON text; the toolbox encodes results itself.
            try:
                result = json.loads(result)
            except ValueError:
                return {"success": True, "result": result}
        if not isinstance(result, Mapping):
            return {"success": True, "result": result}
        return dict(result)

    def handle_tool_call(self, name: str, args: Mapping[str, Any] | str | None) -> str:
        """Deprecated: run provider tools through a toolbox.

        ``Toolbox.default(manager=manager).dispatch(name, args)``, or register them into
        your own with ``toolbox.register_provider_tools(manager)``. Still returns the
        model-facing JSON and never raises.
        """
        warnings.warn(
            "MemoryManager.handle_tool_call is deprecated; register the provider tools "
            "into a Toolbox (toolbox.register_provider_tools(manager)) and dispatch there.",
            DeprecationWarning,
            stacklevel=2,
        )
        try:
            result: dict[str, Any] = self.call_tool(name, args)
        except MemstrataError as exc:
            result = error_response(str(exc), **getattr(exc, "details", {}))
        except Exception as exc:
            logger.warning("Memory tool %r failed", name, exc_info=True)
            result = error_response(f"Memory tool '{name}' failed: {exc}")
        return json.dumps(result, ensure_ascii=False, default=str)

    # -- per turn ---------------------------------------------------------------------

    def on_turn_start(self, turn_number: int, message: str) -> None:
        """Tell every provider a user turn begins."""
        self._each("on_turn_start", lambda c: c.call("on_turn_start", turn_number, message))

    def prefetch_all(self, query: str, *, session_id: str | None = None) -> str:
        """Recall from every provider for this turn, bounded by the prefetch timeout.

        Returns raw text (results joined by a blank line); wrap it with
        :func:`~memstrata.prompt.fencing.build_memory_context_block` before sending it.
        """
        sid = self.session_id if session_id is None else session_id
        results: list[str] = []
        builtin = self._calls[0]
        try:
            results.append(builtin.call("prefetch", query, session_id=sid) or "")
        except Exception:
            logger.warning("Memory provider 'builtin': prefetch failed", exc_info=True)

        started: list[tuple[ProviderCalls, threading.Thread, list[str], float]] = []
        for calls in self._externals():
            previous = self._prefetch_threads.get(calls.name)
            if previous is not None and previous.is_alive():
                logger.info(
                    "Memory provider %r: previous prefetch still running; skipped", calls.name
                )
                continue
            box: list[str] = []
            thread = threading.Thread(
                target=self._prefetch_one,
                args=(calls, query, sid, box),
                name=f"memstrata-prefetch-{calls.name}",
                daemon=True,
            )
            self._prefetch_threads[calls.name] = thread
            thread.start()
            own = getattr(calls.provider, "prefetch_timeout", None)
            timeout = float(own) if isinstance(own, int | float) and own > 0 else None
            started.append((calls, thread, box, timeout or self.external_prefetch_timeout))
        for calls, thread, box, timeout in started:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "Memory provider %r: prefetch exceeded %.1f s; continuing without it "
                    "(skipped until it returns).",
                    calls.name,
                    timeout,
                )
                continue
            results.extend(box)
        return "\n\n".join(r.strip() for r in results if isinstance(r, str) and r.strip())

    def stuck_prefetches(self) -> list[str]:
        """Providers whose prefetch from an earlier turn is still running (skipped now)."""
        return [name for name, t in self._prefetch_threads.items() if t.is_alive()]

    @staticmethod
    def _prefetch_one(calls: ProviderCalls, query: str, session_id: str, box: list[str]) -> None:
        try:
            text = calls.call("prefetch", query, session_id=session_id)
        except Exception:
            logger.warning("Memory provider %r: prefetch failed", calls.name, exc_info=True)
            return
        if isinstance(text, str):
            box.append(text)

    def _submit(self, kind: str, job: Callable[[], None]) -> None:
        if self.shutdown_report is not None:
            logger.warning("Memory manager is shut down; a %s job was dropped.", kind)
            return
        self._background.submit(kind, job)

    def sync_all(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Queue the finished turn for every provider; returns at once, turns stay in order."""
        sid = self.session_id if session_id is None else session_id
        snapshot = list(messages) if messages is not None else None

        def job() -> None:
            self._each(
                "sync_turn",
                lambda c: c.call("sync_turn", user, assistant, session_id=sid, messages=snapshot),
            )

        self._submit("sync", job)

    def queue_prefetch_all(self, query: str, *, session_id: str | None = None) -> None:
        """Queue next-turn warm-up on every provider (after the pending syncs)."""
        sid = self.session_id if session_id is None else session_id

        def job() -> None:
            self._each("queue_prefetch", lambda c: c.call("queue_prefetch", query, session_id=sid))

        self._submit("prefetch", job)

    def pending(self) -> dict[str, int]:
        """Queued and running background jobs by kind: sync, prefetch, write."""
        return self._background.pending()

    def flush_pending(self, timeout: float | None = None) -> bool:
        """Wait until every job queued so far has run; False if ``timeout`` passed first."""
        return self._background.flush(timeout)

    # -- memory writes ----------------------------------------------------------------

    def notify_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        *,
        origin: str = "tool",
        old_text: str | None = None,
        session_id: str | None = None,
        batch_index: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Mirror one curated-memory write to every external provider (in the background)."""
        metadata = MemoryWriteMetadata(
            origin=origin,
            old_text=old_text,
            session_id=self.session_id if session_id is None else session_id,
            batch_index=batch_index,
            batch_size=batch_size,
        )

        def job() -> None:
            self._each(
                "on_memory_write",
                lambda c: c.on_memory_write(action, target, content, metadata),
                builtin=False,
            )

        if self._externals():
            self._submit("write", job)

    def mirror_write(self, write: MemoryWrite) -> None:
        """Mirror one announced write (a :class:`~memstrata.memory.writes.MemoryWrite`) to
        every external provider; the manager's memory calls it for each of its writes."""
        self.notify_memory_write(
            write.action,
            write.target,
            write.content,
            origin=write.origin,
            old_text=write.old_text,
            batch_index=write.batch_index,
            batch_size=write.batch_size,
        )

    def notify_memory_tool_write(
        self, args: Mapping[str, Any], *, origin: str = "tool", session_id: str | None = None
    ) -> None:
        """Deprecated: memory writes are mirrored by the memory itself (a write listener).

        Calling it after a write made through a memory this manager listens to mirrors
        the write twice.
        """
        warnings.warn(
            "MemoryManager.notify_memory_tool_write is deprecated: the manager hears every "
            "write to its memory itself; call notify_memory_write for writes made to "
            "another memory object.",
            DeprecationWarning,
            stacklevel=2,
        )
        target = str(args.get("target") or "memory")
        operations = args.get("operations")
        if isinstance(operations, Sequence) and not isinstance(operations, str) and operations:
            ops = [op for op in operations if isinstance(op, Mapping)]
        else:
            ops = [args]
        writes = [op for op in ops if op.get("action") in WRITE_ACTIONS]
        batch = len(writes) if operations else None
        for index, op in enumerate(writes):
            self.notify_memory_write(
                str(op["action"]),
                target,
                str(op.get("content") or ""),
                origin=origin,
                old_text=op.get("old_text"),
                session_id=session_id,
                batch_index=index if batch is not None else None,
                batch_size=batch,
            )

    # -- lifecycle fan-outs -----------------------------------------------------------

    def on_session_end(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Let queued syncs land (bounded), then tell every provider the session ended."""
        self.flush_pending(self.sync_drain_timeout)
        self._each("on_session_end", lambda c: c.call("on_session_end", messages))

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None = None,
        reset: bool = False,
        reason: str = "",
    ) -> None:
        """Tell every provider the agent moved to ``new_session_id``."""
        self.session_id = new_session_id
        self._each(
            "on_session_switch",
            lambda c: c.on_session_switch(
                new_session_id, parent_session_id=parent_session_id, reset=reset, reason=reason
            ),
        )

    def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """What providers want kept through compression, joined by a blank line."""
        texts = self._each("on_pre_compress", lambda c: c.call("on_pre_compress", messages))
        return "\n\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())

    def on_delegation(self, task: str, result: str, *, child_session_id: str) -> None:
        """Tell every provider a delegated sub-agent finished."""
        self._each(
            "on_delegation",
            lambda c: c.call("on_delegation", task, result, child_session_id=child_session_id),
        )

    def shutdown_all(self) -> ShutdownReport:
        """Drain background work (bounded), then shut providers down in reverse order.

        Returns (and keeps in :attr:`shutdown_report`) what had to be abandoned.
        Calling it again returns the first report.
        """
        if self.shutdown_report is not None:
            return self.shutdown_report
        if self._stop_listening is not None:
            self._stop_listening()
        drained = self.flush_pending(self.sync_drain_timeout)
        pending = self.pending()
        self._background.stop()
        if not drained:
            logger.warning(
                "Memory providers did not finish within %.1f s; abandoned %d sync(s), "
                "%d prefetch(es), %d memory write(s).",
                self.sync_drain_timeout,
                pending["sync"],
                pending["prefetch"],
                pending["write"],
            )
        stuck = tuple(self.stuck_prefetches())
        errors: list[str] = []
        for calls in reversed(self._calls):
            try:
                calls.call("shutdown")
            except Exception as exc:
                logger.warning("Memory provider %r: shutdown failed", calls.name, exc_info=True)
                errors.append(f"{calls.name}: {exc}")
        self.shutdown_report = ShutdownReport(
            drained=drained,
            abandoned_syncs=0 if drained else pending["sync"],
            abandoned_prefetches=0 if drained else pending["prefetch"],
            abandoned_writes=0 if drained else pending["write"],
            stuck_prefetch=stuck,
            shutdown_errors=tuple(errors),
        )
        return self.shutdown_report
