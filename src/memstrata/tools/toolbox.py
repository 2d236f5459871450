"""Tool dispatch: the one edge from a tool call's name and arguments to model-facing JSON.

:func:`dispatch_tool` is the one entry an agent loop needs. It takes the raw
``arguments`` string of an OpenAI tool call (or an already-parsed dict), runs the tool
and returns ``json.dumps(result, ensure_ascii=False)``. It never raises: malformed JSON,
an unknown tool name, wrong argument types and unexpected bugs all come back as
``{"success": false, "error": ...}`` text that tells the model what to do next.

Tools raise; :meth:`Toolbox.call` is where an error becomes that text (the CLI and the
MCP server are the only other edges). Arguments are parsed once, by
:func:`~memstrata.llm.arguments.parse_arguments`.

A :class:`Toolbox` maps names to schemas and handlers; :meth:`Toolbox.default` holds the
memory, session_search and remember tools, and the tools of the memory providers register
into it with :meth:`Toolbox.register_provider_tools`. When ``memory.provider`` names an
external provider, the toolbox :func:`dispatch_tool` uses starts it, so a memory write made
through ``dispatch_tool`` reaches the provider like one made by the agent.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from memstrata.config import Config, memstrata_home
from memstrata.errors import CuratedMemoryError, MemstrataError

# The argument helpers are re-exported: tools written against 0.1 import them from here.
from memstrata.llm.arguments import (
    describe_type,
    error_response,
    optional_int,
    optional_str,
    parse_arguments,
    required_str,
    shorten,
)

if TYPE_CHECKING:
    from memstrata.providers.manager import MemoryManager

__all__ = [
    "SchemaFormat",
    "Tool",
    "ToolHandler",
    "Toolbox",
    "default_toolbox",
    "describe_type",
    "dispatch_tool",
    "error_response",
    "optional_int",
    "optional_str",
    "parse_arguments",
    "required_str",
    "shorten",
    "to_anthropic_schema",
]

logger = logging.getLogger(__name__)

SchemaFormat = Literal["openai", "anthropic"]
ToolHandler = Callable[[Mapping[str, Any]], Mapping[str, Any]]


class Tool(Protocol):
    """A tool object: a name, its OpenAI definition, a handler and a turn reset."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> Mapping[str, Any]: ...

    def handle(self, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run one call with parsed arguments; return a JSON-able dict."""
        ...

    def reset_turn(self) -> None:
        """Forget per-turn state (called at the start of every user turn)."""
        ...


def to_anthropic_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Convert an OpenAI function-tool definition to Anthropic's ``{name, description,
    input_schema}`` shape. An already-Anthropic definition is returned as a copy."""
    if "input_schema" in schema:
        return dict(schema)
    function = schema.get("function", schema)
    return {
        "name": function["name"],
        "description": function.get("description", ""),
        "input_schema": function.get("parameters", {"type": "object", "properties": {}}),
    }


@dataclass(frozen=True)
class _Tool:
    name: str
    schema: Mapping[str, Any]
    handler: ToolHandler
    reset_turn: Callable[[], None] | None


class Toolbox:
    """Tools by name: their schemas for the model and their handlers for dispatch."""

    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}

    @classmethod
    def default(
        cls,
        home: Path | None = None,
        *,
        config: Config | None = None,
        manager: MemoryManager | None = None,
    ) -> Toolbox:
        """A toolbox holding the memory, session_search and remember tools over ``home``
        (default ``$MEMSTRATA_HOME``).

        With ``manager``, the ``memory`` tool is the manager's (over its memory, whose
        writes the manager mirrors to its external providers) and the providers' own
        tools are registered too.
        """
        from memstrata.memory.tool import MemoryTool
        from memstrata.tools.remember import RememberTool
        from memstrata.tools.session_search import SessionSearchTool

        if config is None:
            config = manager.config if manager is not None else Config.load(home)
        box = cls()
        if manager is None:
            box.register_tool(MemoryTool(config=config))
        else:
            box.register_provider_tools(manager)
        # The store opens on the first search, so building a toolbox creates no database.
        box.register_tool(SessionSearchTool(config=config))
        if "remember" not in box:
            # The facts database opens on the first remember call, likewise.
            box.register_tool(RememberTool(config=config))
        return box

    def register_provider_tools(
        self, manager: MemoryManager, *, include_builtin: bool = True, replace: bool = True
    ) -> list[str]:
        """Register the tools of ``manager``'s providers (``memory`` first, then each
        external provider's); return their names.

        The manager runs each call (:meth:`MemoryManager.call_tool`), so errors raise
        and become the model's text here, in :meth:`call`. With ``replace`` (the
        default) a provider tool takes the place of a tool of the same name.
        """
        names: list[str] = []
        for schema in manager.get_tool_schemas(include_builtin=include_builtin):
            name = schema["function"]["name"]
            if name in self and not replace:
                continue
            handler = functools.partial(manager.call_tool, name)
            self.register(name, schema, handler, replace=True)
            names.append(name)
        return names

    def register_tool(self, tool: Tool, *, replace: bool = False) -> None:
        """Register a tool object (such as a MemoryTool) with its turn reset."""
        self.register(
            tool.name, tool.schema, tool.handle, reset_turn=tool.reset_turn, replace=replace
        )

    def register(
        self,
        name: str,
        schema: Mapping[str, Any],
        handler: ToolHandler,
        *,
        reset_turn: Callable[[], None] | None = None,
        replace: bool = False,
    ) -> None:
        """Add a tool. ``schema`` is its OpenAI function-tool definition; ``handler`` takes
        the parsed arguments and returns a JSON-able dict. ``reset_turn`` (optional) is
        called by :meth:`reset_turn` at the start of every user turn."""
        declared = schema.get("function", {}).get("name") if "function" in schema else None
        if declared is not None and declared != name:
            raise ValueError(f"schema declares tool {declared!r} but is registered as {name!r}")
        if name in self._tools and not replace:
            raise ValueError(f"tool {name!r} is already registered; pass replace=True")
        self._tools[name] = _Tool(name, schema, handler, reset_turn)

    def unregister(self, name: str) -> None:
        """Remove a tool (no error if it is absent)."""
        self._tools.pop(name, None)

    @property
    def names(self) -> list[str]:
        """Registered tool names, in registration order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def schemas(self, format: SchemaFormat = "openai") -> list[dict[str, Any]]:
        """Every tool's definition, for the ``tools`` parameter of a chat request."""
        if format == "openai":
            return [dict(tool.schema) for tool in self._tools.values()]
        if format == "anthropic":
            return [to_anthropic_schema(tool.schema) for tool in self._tools.values()]
        raise ValueError(f"unknown schema format {format!r}; use 'openai' or 'anthropic'")

    def reset_turn(self) -> None:
        """Tell every tool a new user turn starts (resets per-turn failure caps)."""
        for tool in self._tools.values():
            if tool.reset_turn is not None:
                tool.reset_turn()

    def call(self, name: str, args: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run a tool and return its response dict; never raises."""
        try:
            tool = self._tools.get(name) if isinstance(name, str) else None
            if tool is None:
                known = ", ".join(self._tools) or "(none)"
                return error_response(
                    f"Unknown tool '{shorten(name)}'. Available tools: {known}. Call one of those."
                )
            parsed = parse_arguments(args)
            return dict(tool.handler(parsed))
        except CuratedMemoryError as exc:
            return error_response(str(exc), **exc.details)
        except MemstrataError as exc:
            return error_response(str(exc))
        except Exception as exc:  # the edge: a bug reaches the model as text, never a crash
            logger.exception("tool %r failed", name)
            return error_response(
                f"Tool '{name}' failed unexpectedly ({type(exc).__name__}: {exc}). "
                "The call may not have completed; continue without it. The error was logged."
            )

    def dispatch(self, name: str, args: Mapping[str, Any] | str | None) -> str:
        """Run a tool and return its response as JSON text; never raises."""
        result = self.call(name, args)
        try:
            return json.dumps(result, ensure_ascii=False, default=str)
        except (TypeError, ValueError) as exc:  # e.g. a circular structure from a plugin
            logger.exception("tool %r returned a result that is not JSON", name)
            return json.dumps(
                error_response(
                    f"Tool '{name}' returned a result that cannot be encoded as JSON "
                    f"({type(exc).__name__}: {exc})."
                ),
                ensure_ascii=False,
            )


_default_boxes: dict[Path, Toolbox] = {}
_default_lock = threading.Lock()


def default_toolbox() -> Toolbox:
    """The toolbox :func:`dispatch_tool` uses: one per home folder, built on first use.

    The home is resolved on every call, so changing ``MEMSTRATA_HOME`` switches to that
    home's memory rather than writing to the old one. When ``memory.provider`` names an
    external provider, it is started here (once per home) and shut down at exit, so its
    tools are offered and every memory write reaches its ``on_memory_write``.
    """
    home = memstrata_home()
    with _default_lock:
        box = _default_boxes.get(home)
        if box is None:
            config = Config.load(home)
            manager = _start_manager(config)
            box = Toolbox.default(home, config=config, manager=manager)
            _default_boxes[home] = box
        return box


def _start_manager(config: Config) -> MemoryManager | None:
    if not str(config.get("memory.provider")).strip():
        return None  # nothing to mirror to: no provider is started, no thread runs
    from memstrata.providers.manager import MemoryManager

    manager = MemoryManager.from_config(config)
    # dispatch_tool has no session of its own; the provider gets one id per process.
    manager.initialize_all(f"tool-{uuid.uuid4().hex[:12]}", platform="api")
    # Drain the mirrored writes (bounded by memory.sync_drain_timeout) before exiting.
    atexit.register(manager.shutdown_all)
    return manager


def dispatch_tool(
    name: str, args: Mapping[str, Any] | str | None, *, toolbox: Toolbox | None = None
) -> str:
    """Run tool ``name`` with a tool call's ``args`` and return the model-facing JSON.

    ``args`` is the raw ``arguments`` string of an OpenAI tool call or a parsed dict.
    Never raises: every failure is a ``{"success": false, "error": ...}`` JSON text.
    """
    if toolbox is None:
        try:
            toolbox = default_toolbox()
        except MemstrataError as exc:  # a broken config.toml or provider: its fix, as text
            logger.warning("cannot build the default toolbox: %s", exc)
            return json.dumps(
                error_response(f"Tools are unavailable: {type(exc).__name__}: {exc}"),
                ensure_ascii=False,
            )
        except Exception as exc:  # a bug must still reach the model as text
            logger.exception("cannot build the default toolbox")
            return json.dumps(
                error_response(f"Tools are unavailable: {type(exc).__name__}: {exc}"),
                ensure_ascii=False,
            )
    return toolbox.dispatch(name, args)
