"""Fuzzing the tool dispatchers: whatever a model sends, it gets JSON it can act on.

Arguments are generated as a model could send them: wrong types for every known field,
missing fields, unknown keys, nested junk, huge strings, invalid JSON text, lone
surrogates, out-of-range numbers. For the ``memory`` and ``session_search`` tools the
reply must be a JSON object with a boolean ``success`` and, on failure, an error that
is not the "failed unexpectedly" text of an unhandled bug; and a huge argument must
never be echoed back whole into the model's context.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import report_inputs
from memstrata import FileMemory, SessionStore
from memstrata.memory.tool import MemoryTool
from memstrata.tools.session_search import SCHEMA as SEARCH_SCHEMA
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox, dispatch_tool

# A reply may hold the live entries (at most the budget) or a few search results; it is
# never allowed to grow with the size of the arguments.
MAX_REPLY_CHARS = 40_000
UNEXPECTED = "failed unexpectedly"
# Inputs per target in the stress runs (benchmarks/hardening.py sets it).
STRESS_EXAMPLES = int(os.environ.get("MEMSTRATA_TEST_FUZZ_EXAMPLES", "5000"))
INPUTS: Counter[str] = Counter()


_huge = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["a", "é", "服", " ", '"', "(", "*", "§\n", "ignore ", "\ud800", "\x00"]),
    st.integers(min_value=2_000, max_value=60_000),
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["memory", "user", "add", "replace", "remove", "read", "1", "-1", "²"])
    | _huge
)
_junk = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_memory_keys = st.sampled_from(["action", "target", "content", "old_text", "operations"])
# Every argument the schema declares, so a new one is fuzzed as soon as it exists.
_search_keys = st.sampled_from(sorted(SEARCH_SCHEMA["function"]["parameters"]["properties"]))
_operation = st.dictionaries(_memory_keys, _junk, max_size=4) | _junk


def _args(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    objects = st.dictionaries(keys | st.text(max_size=10), _junk | st.lists(_operation), max_size=6)
    as_text = objects.map(lambda o: json.dumps(o, ensure_ascii=True))
    broken = st.sampled_from(
        ["", " ", "{", "[" * 5_000, '{"action": "add", "content": ', "null", "[]", "42", '"x"']
    )
    raw_bytes = st.binary(max_size=40)
    return objects | as_text | broken | raw_bytes | _junk


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toolbox]:
    """Both tools over one home whose store holds a few real sessions."""
    home = tmp_path_factory.mktemp("fuzz-home")
    store = SessionStore(home / "state.db")
    for s in range(3):
        store.create_session(f"sess-{s}", source="cli")
        store.append_messages(
            f"sess-{s}",
            [
                {"role": "user", "content": f"How do we deploy service {s}? 服务端 {s}"},
                {"role": "assistant", "content": f"Run ops/deploy.sh {s} after the cache warms."},
            ],
        )
    box = Toolbox()
    box.register_tool(MemoryTool(FileMemory(home)))
    box.register_tool(SessionSearchTool(store))
    yield box
    store.close()


@pytest.fixture(scope="module", autouse=True)
def _report_inputs() -> Iterator[None]:
    yield
    report_inputs(INPUTS, "test_fuzz_tools.py")


def _check(reply: str, args: Any) -> dict[str, Any]:
    assert isinstance(reply, str)
    parsed = json.loads(reply)
    assert isinstance(parsed, dict) and isinstance(parsed.get("success"), bool), parsed
    if parsed["success"] is False:
        assert isinstance(parsed["error"], str) and parsed["error"].strip()
        assert UNEXPECTED not in parsed["error"], (args, parsed["error"])
    assert len(reply) <= MAX_REPLY_CHARS, (len(reply), reply[:300])
    return parsed


_FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


_STRESS = settings(_FUZZ, max_examples=STRESS_EXAMPLES)


def _memory(toolbox: Toolbox, args: Any) -> None:
    INPUTS["dispatch: memory tool"] += 1
    _check(toolbox.dispatch("memory", args), args)


def _search(toolbox: Toolbox, args: Any) -> None:
    INPUTS["dispatch: session_search tool"] += 1
    _check(toolbox.dispatch("session_search", args), args)


@_FUZZ
@given(args=_args(_memory_keys))
def test_memory_tool_survives_any_arguments(toolbox: Toolbox, args: Any) -> None:
    """Any arguments to `memory` give a JSON reply with a fix, never an unhandled error."""
    _memory(toolbox, args)


@_FUZZ
@given(args=_args(_search_keys))
def test_session_search_tool_survives_any_arguments(toolbox: Toolbox, args: Any) -> None:
    """Any arguments to `session_search` give a JSON reply, never an unhandled error."""
    _search(toolbox, args)


@pytest.mark.stress
@_STRESS
@given(args=_args(_memory_keys))
def test_memory_tool_survives_any_arguments_long(toolbox: Toolbox, args: Any) -> None:
    """The memory-tool fuzz with STRESS_EXAMPLES inputs."""
    _memory(toolbox, args)


@pytest.mark.stress
@_STRESS
@given(args=_args(_search_keys))
def test_session_search_tool_survives_any_arguments_long(toolbox: Toolbox, args: Any) -> None:
    """The session_search fuzz with STRESS_EXAMPLES inputs."""
    _search(toolbox, args)


@settings(max_examples=60, deadline=None)
@given(name=st.text(max_size=30) | _huge | st.sampled_from(["memory ", "MEMORY", "session"]))
def test_unknown_tool_names_are_answered_briefly(name: str) -> None:
    """An unknown (even huge) tool name gets a short error listing the real tools."""
    box = Toolbox()
    reply = _check(box.dispatch(name, {}), name)
    assert reply["success"] is False and "Unknown tool" in reply["error"]


@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        ("session_search", {"session_id": "x" * 100_000}, "at most 200"),
        ("session_search", {"query": "deploy " * 50_000}, "distinctive words"),
        ("session_search", {"around_message_id": 10**30, "session_id": "sess-1"}, "out of range"),
        ("session_search", {"limit": "--5"}, "must be an integer"),
        ("session_search", {"window": "²", "session_id": "sess-1"}, "must be an integer"),
        ("session_search", {f"k{i}" * 3_000: 1 for i in range(50)}, "and 45 more"),
        ("session_search", {"since": 2.6e12, "until": 0}, "not a usable time"),
        ("session_search", {"until": "nan", "query": "deploy"}, "not a usable time"),
        ("session_search", {"session_id": "\ud800"}, "unpaired UTF-16 surrogate"),
        ("memory", {"action": "add", "content": "fact \ud800 here"}, "unpaired UTF-16 surrogate"),
        ("memory", {"operations": [{"action": "add", "content": "\udfff"}]}, "surrogate"),
    ],
)
def test_regressions_found_by_fuzzing(toolbox: Toolbox, name: str, args: Any, says: str) -> None:
    """Inputs that once escaped as unexpected errors or flooded the reply are refused
    with a short error that says what to send instead."""
    reply = _check(toolbox.dispatch(name, args), args)
    assert reply["success"] is False
    assert says in reply["error"]
    assert len(json.dumps(reply)) < 2_000


def test_dispatch_tool_with_a_broken_home_answers_as_text(memstrata_home: Path) -> None:
    """dispatch_tool itself (default toolbox) answers with JSON when config.toml is
    invalid, instead of raising into the agent loop."""
    (memstrata_home / "config.toml").write_text("[memory\nbroken = ", encoding="utf-8")
    reply = json.loads(dispatch_tool("memory", {"action": "read"}))
    assert reply["success"] is False and "config.toml" in reply["error"]
