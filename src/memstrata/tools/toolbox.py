"""Tool dispatch: from a tool call's name and arguments to model-facing JSON.

:func:`dispatch_tool` is the one entry an agent loop needs. It takes the raw
``arguments`` string of an OpenAI tool call (or an already-parsed dict), runs the tool
and returns ``json.dumps(result, ensure_ascii=False)``. It never raises: malformed JSON,
an unknown tool name, wrong argument types and unexpected bugs all come back as
``{"success": false, "error": ...}`` text that tells the model what to do next.

A :class:`Toolbox` maps names to schemas and handlers; :meth:`Toolbox.default` holds the
memory, session_search and remember tools, and other tools register the same way.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from memstrata.config import Config, memstrata_home
from memstrata.errors import CuratedMemoryError, MemstrataError, ToolArgumentError

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


def describe_type(value: object) -> str:
    """Name a value's type the way JSON does (a model sent JSON, not Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def optional_str(args: Mapping[str, Any], key: str, where: str = "") -> str | None:
    """Argument ``key`` as a string, None when absent; ToolArgumentError for any other type.

    ``where`` prefixes the message (e.g. "Operation 2: ") inside batched calls.
    """
    value = args.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ToolArgumentError(
        f"{where}{key} must be a string, got {describe_type(value)}. "
        "Resend the call with it as a JSON string."
    )


def required_str(args: Mapping[str, Any], key: str, example: str = "") -> str:
    """Argument ``key`` as a non-blank string (stripped); ToolArgumentError otherwise.

    ``example`` (a JSON object text) is quoted in the message to show a valid call.
    """
    value = args.get(key)
    if isinstance(value, str) and value.strip():
        return value.strip()
    got = "nothing" if value is None else f"{describe_type(value)} {shorten(value)}"
    hint = f", e.g. {example}" if example else ""
    raise ToolArgumentError(
        f"'{key}' is required and must be a non-empty string, got {got}. Resend the call "
        f"with it{hint}."
    )


def optional_int(
    args: Mapping[str, Any], key: str, *, minimum: int, maximum: int, default: int
) -> int:
    """Argument ``key`` as an integer in ``[minimum, maximum]``, ``default`` when absent.

    A whole float (``5.0``, as some models send) is accepted; anything else, booleans
    included, raises ToolArgumentError naming the range.
    """
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ToolArgumentError(
            f"'{key}' must be an integer from {minimum} to {maximum}, got "
            f"{describe_type(value)} {shorten(value)}. Resend the call with a number in range."
        )
    return value


def shorten(value: object, width: int = 60) -> str:
    """Quote a model's value back briefly: a huge string must not flood the context."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _jsonable(value: Any) -> Any:
    # Error details may hold Usage objects, paths or tuples; the model gets plain JSON.
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def error_response(message: str, **details: Any) -> dict[str, Any]:
    """The error shape every tool returns: ``{"success": false, "error": message, ...}``.

    ``details`` (recovery data such as ``current_entries``) are made JSON-able.
    """
    return {"success": False, "error": message, **_jsonable(details)}


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
    def default(cls, home: Path | None = None, *, config: Config | None = None) -> Toolbox:
        """A toolbox holding the memory, session_search and remember tools over ``home``
        (default ``$MEMSTRATA_HOME``)."""
        # Imported here: tool modules import the helpers above, so this module cannot
        # import them at load time.
        from memstrata.tools.memory import MemoryTool
        from memstrata.tools.remember import RememberTool
        from memstrata.tools.session_search import SessionSearchTool

        if config is None:
            config = Config.load(home)
        box = cls()
        box.register_tool(MemoryTool(config=config))
        # The store opens on the first search, so building a toolbox creates no database.
        box.register_tool(SessionSearchTool(config=config))
        # The facts database opens on the first remember call, likewise.
        box.register_tool(RememberTool(config=config))
        return box

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


def parse_arguments(args: object) -> Mapping[str, Any]:
    """Parse a tool call's arguments: a JSON object string (or bytes), a mapping, or nothing.

    Raises :class:`ToolArgumentError` with the fix (resend valid JSON, send an object).
    """
    if args is None:
        return {}
    if isinstance(args, bytes | bytearray):
        try:
            args = args.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolArgumentError(
                "The arguments are not UTF-8 text. Resend them as a JSON object."
            ) from None
    if isinstance(args, str):
        if not args.strip():
            return {}  # some models send "" for a call without arguments
        try:
            parsed = json.loads(args)
        except (ValueError, RecursionError) as exc:
            raise ToolArgumentError(
                f"The arguments are not valid JSON ({exc}). Resend the call with the "
                'arguments as one JSON object, e.g. {"action": "read", "target": "memory"}.'
            ) from None
        args = parsed
    if not isinstance(args, Mapping):
        raise ToolArgumentError(
            f"The arguments must be a JSON object, got {describe_type(args)}. Resend them "
            'as an object, e.g. {"action": "read", "target": "memory"}.'
        )
    return args


_default_boxes: dict[Path, Toolbox] = {}
_default_lock = threading.Lock()


def default_toolbox() -> Toolbox:
    """The toolbox :func:`dispatch_tool` uses: one per home folder, built on first use.

    The home is resolved on every call, so changing ``MEMSTRATA_HOME`` switches to that
    home's memory rather than writing to the old one.
    """
    home = memstrata_home()
    with _default_lock:
        box = _default_boxes.get(home)
        if box is None:
            box = Toolbox.default(home)
            _default_boxes[home] = box
        return box


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
        except Exception as exc:  # a broken config.toml must still reach the model as text
            logger.exception("cannot build the default toolbox")
            return json.dumps(
                error_response(f"Tools are unavailable: {type(exc).__name__}: {exc}"),
                ensure_ascii=False,
            )
    return toolbox.dispatch(name, args)
