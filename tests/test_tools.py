"""Tool dispatch: tool-call JSON in, model-facing JSON out, never an exception."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.memory.files import ENTRY_DELIMITER, FileMemory
from memstrata.memory.format import parse_entries
from memstrata.memory.tool import MEMORY_TOOL_SCHEMA, MemoryTool
from memstrata.tools.toolbox import Toolbox, dispatch_tool, parse_arguments, to_anthropic_schema

ECHO_SCHEMA = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echo the arguments.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _echo(args: Mapping[str, Any]) -> dict[str, Any]:
    return {"success": True, "args": dict(args)}


def _tool_call(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message's tool call exactly as the OpenAI chat API returns it."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "memory", "arguments": json.dumps(arguments)},
    }


def test_openai_tool_call_round_trip_to_disk_and_back(memstrata_home: Path) -> None:
    """Tool-call JSON goes through dispatch_tool to exact MEMORY.md bytes and back via read."""
    calls = [
        _tool_call("call_1", {"action": "add", "target": "memory", "content": "Repo uses uv."}),
        _tool_call(
            "call_2",
            {
                "target": "memory",
                "operations": [
                    {"action": "add", "content": "CI runs on\nGitHub Actions."},
                    {"action": "add", "content": "Déploiement: vendredi interdit 🚫"},
                ],
            },
        ),
    ]
    for call in calls:
        raw = dispatch_tool(call["function"]["name"], call["function"]["arguments"])
        assert isinstance(raw, str)
        response = json.loads(raw)
        assert response["success"] is True and response["done"] is True
    raw = dispatch_tool(calls[1]["function"]["name"], "{}")
    assert "🚫" not in raw  # an empty call answers with an error, not entries

    path = memstrata_home / "memories" / "MEMORY.md"
    expected = ENTRY_DELIMITER.join(
        ["Repo uses uv.", "CI runs on\nGitHub Actions.", "Déploiement: vendredi interdit 🚫"]
    )
    assert path.read_bytes() == (
        b"Repo uses uv.\n\xc2\xa7\nCI runs on\nGitHub Actions.\n\xc2\xa7\n"
        b"D\xc3\xa9ploiement: vendredi interdit \xf0\x9f\x9a\xab"
    )
    assert path.read_bytes() == expected.encode("utf-8")

    read = dispatch_tool("memory", json.dumps({"action": "read", "target": "memory"}))
    assert "🚫" in read and "\\ud83d" not in read  # ensure_ascii=False
    assert json.loads(read)["entries"] == parse_entries(path.read_text(encoding="utf-8"))
    assert json.loads(read)["usage"] == "3% — 77/2,200 chars"
    assert len(expected) == 77


def test_dispatch_accepts_a_dict(memstrata_home: Path) -> None:
    """Already-parsed arguments work the same as the JSON string."""
    out = json.loads(dispatch_tool("memory", {"action": "add", "content": "x"}))
    assert out["success"] is True
    assert FileMemory(memstrata_home).entries("memory") == ["x"]


def test_unknown_tool_lists_known_tools() -> None:
    """An unknown name answers with the names that exist."""
    box = Toolbox()
    box.register("echo", ECHO_SCHEMA, _echo)
    out = json.loads(dispatch_tool("search_web", "{}", toolbox=box))
    assert out == {
        "success": False,
        "error": "Unknown tool 'search_web'. Available tools: echo. Call one of those.",
    }


@pytest.mark.parametrize("raw", ['{"action": "add",', "{'action': 'add'}", "nan]", "{" * 5000])
def test_malformed_json_asks_for_a_resend(raw: str) -> None:
    """Broken argument JSON (even absurdly nested) answers with a resend instruction."""
    out = json.loads(dispatch_tool("memory", raw))
    assert out["success"] is False
    assert "not valid JSON" in out["error"] and "Resend" in out["error"]


@pytest.mark.parametrize(
    ("raw", "kind"), [("[1, 2]", "array"), ('"add"', "string"), ("3", "number")]
)
def test_non_object_json_is_refused(raw: str, kind: str) -> None:
    """Valid JSON that is not an object is refused with its type."""
    out = json.loads(dispatch_tool("memory", raw))
    assert out["error"].startswith(f"The arguments must be a JSON object, got {kind}.")


def test_empty_argument_string_means_no_arguments() -> None:
    """An empty arguments string is an empty object (some models send it)."""
    assert parse_arguments("") == {} and parse_arguments("  ") == {} and parse_arguments(None) == {}
    out = json.loads(dispatch_tool("memory", ""))
    assert out["error"] == "Unknown action 'None'. Use: add, replace, remove, read"


def test_handler_bug_becomes_error_json(caplog: pytest.LogCaptureFixture) -> None:
    """An exception inside a handler returns its type and message and is logged."""

    def broken(_: Mapping[str, Any]) -> dict[str, Any]:
        raise ZeroDivisionError("division by zero")

    box = Toolbox()
    box.register("echo", ECHO_SCHEMA, broken)
    with caplog.at_level(logging.ERROR, logger="memstrata.tools.toolbox"):
        out = json.loads(box.dispatch("echo", "{}"))
    assert out["success"] is False
    assert "ZeroDivisionError: division by zero" in out["error"]
    assert "Traceback" not in out["error"]
    assert "tool 'echo' failed" in caplog.text


def test_unencodable_result_becomes_error_json() -> None:
    """A handler returning something JSON cannot encode still yields valid JSON."""
    loop: dict[str, Any] = {}
    loop["self"] = loop
    box = Toolbox()
    box.register("echo", ECHO_SCHEMA, lambda _: loop)
    out = json.loads(box.dispatch("echo", {}))
    assert out["success"] is False and "cannot be encoded as JSON" in out["error"]


def test_register_guards_names() -> None:
    """A duplicate name or a schema naming another tool is refused."""
    box = Toolbox()
    box.register("echo", ECHO_SCHEMA, _echo)
    with pytest.raises(ValueError, match="already registered"):
        box.register("echo", ECHO_SCHEMA, _echo)
    box.register("echo", ECHO_SCHEMA, _echo, replace=True)
    with pytest.raises(ValueError, match="declares tool 'echo'"):
        box.register("other", ECHO_SCHEMA, _echo)
    box.unregister("echo")
    assert box.names == []


def test_schemas_in_both_formats(memstrata_home: Path) -> None:
    """schemas() gives OpenAI definitions, or Anthropic ones on request."""
    box = Toolbox.default(memstrata_home)
    box.unregister("session_search")  # its schema is checked in tests/test_search_tool.py
    box.unregister("remember")  # its schema is checked in tests/test_remember.py
    box.register("echo", ECHO_SCHEMA, _echo)
    assert box.names == ["memory", "echo"]
    assert box.schemas() == [MEMORY_TOOL_SCHEMA, ECHO_SCHEMA]
    assert box.schemas("anthropic") == [
        to_anthropic_schema(MEMORY_TOOL_SCHEMA),
        {
            "name": "echo",
            "description": "Echo the arguments.",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]
    with pytest.raises(ValueError, match="unknown schema format"):
        box.schemas("gemini")  # type: ignore[arg-type]


def test_reset_turn_reaches_the_memory_tool(memstrata_home: Path) -> None:
    """Toolbox.reset_turn resets the memory tool's failure count."""
    tool = MemoryTool(FileMemory(memstrata_home, memory_char_limit=10))
    box = Toolbox()
    box.register_tool(tool)
    box.dispatch("memory", {"action": "add", "content": "x" * 20})
    assert tool.consolidation_failures == 1
    box.reset_turn()
    assert tool.consolidation_failures == 0


def test_default_toolbox_follows_memstrata_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dispatch_tool without a toolbox writes to the home folder in effect at call time."""
    for name in ("a", "b"):
        home = tmp_path / name
        monkeypatch.setenv("MEMSTRATA_HOME", str(home))
        json.loads(dispatch_tool("memory", {"action": "add", "content": f"home {name}"}))
    assert FileMemory(tmp_path / "a").entries("memory") == ["home a"]
    assert FileMemory(tmp_path / "b").entries("memory") == ["home b"]


def test_broken_config_reaches_the_model_as_text(memstrata_home: Path) -> None:
    """A config.toml the default toolbox cannot load gives an error JSON, not an exception."""
    (memstrata_home / "config.toml").write_text("[memory\n", encoding="utf-8")
    out = json.loads(dispatch_tool("memory", {"action": "read"}))
    assert out["success"] is False and "ConfigError" in out["error"]


# -- property: never raises --------------------------------------------------------------

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_field_values = (
    _json
    | st.sampled_from(["add", "replace", "remove", "read", "memory", "user", "", "§", "\n§\n"])
    | st.text(alphabet="ab §\n", max_size=30)
)
_args = st.dictionaries(
    st.sampled_from(["action", "target", "content", "old_text", "operations", "extra"]),
    _field_values
    | st.lists(
        st.dictionaries(st.sampled_from(["action", "content", "old_text"]), _field_values),
        max_size=3,
    ),
    max_size=5,
)
_raw = _args | _json | st.text(max_size=60) | _args.map(json.dumps) | _json.map(json.dumps)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["memory", "memory", "unknown", ""]), args=_raw)
def test_dispatch_never_raises(name: str, args: Any) -> None:
    """For any JSON-ish arguments dispatch_tool returns JSON with a success flag."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        box = Toolbox()
        box.register_tool(MemoryTool(FileMemory(home, memory_char_limit=200)))
        out = json.loads(box.dispatch(name, args))
        assert isinstance(out["success"], bool)
        if not out["success"]:
            assert isinstance(out["error"], str) and out["error"]
        memory = FileMemory(home)
        for target in ("memory", "user"):
            path = memory.path(target)
            if path.exists():  # whatever happened, the file stays well-formed
                entries = memory.entries(target)
                assert path.read_text(encoding="utf-8") == ENTRY_DELIMITER.join(entries)
