"""A tool call's arguments, as a model sends them: the one parser and its checks.

A model sends a tool call's ``arguments`` as JSON text (sometimes empty, sometimes not an
object). :func:`parse_arguments` is the only place that text becomes a mapping, for the
toolbox, provider tools and the MCP server alike; the ``optional_*``/``required_*``
helpers read one argument and raise :class:`~memstrata.errors.ToolArgumentError` with the
fix. :func:`error_response` is the shape every refused call takes on the wire.

Kept with the model seam (not in :mod:`memstrata.tools`) so memory providers, which sit
below the tools, check their arguments with the same words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memstrata.errors import ToolArgumentError

__all__ = [
    "describe_type",
    "error_response",
    "optional_int",
    "optional_str",
    "parse_arguments",
    "required_str",
    "shorten",
]


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
