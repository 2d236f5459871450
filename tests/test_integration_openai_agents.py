"""MemstrataSession and memstrata's tools under the real OpenAI Agents SDK.

The SDK's ``Runner`` talks to the project's fake OpenAI-compatible server over HTTP
(chat completions); the SDK's own ``SQLiteSession`` is the reference for the session
protocol, run side by side in the same tests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="needs memstrata[openai-agents]")

from agents import (  # noqa: E402
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    SQLiteSession,
    set_tracing_disabled,
)
from openai import AsyncOpenAI  # noqa: E402

from memstrata.config import Config  # noqa: E402
from memstrata.errors import MemstrataError, SessionStoreError  # noqa: E402
from memstrata.integrations.openai_agents import MemstrataSession, memstrata_tools  # noqa: E402
from memstrata.store.sqlite.store import SessionStore  # noqa: E402
from memstrata.testing import FakeLLMServer, Reply  # noqa: E402

set_tracing_disabled(True)

ITEMS: list[Any] = [
    {"role": "user", "content": "Plan the Osprey launch. 发射代号是什么？"},
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": '{"project": "Osprey"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "code word BLUEFIN"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "The code word is BLUEFIN.", "annotations": []}
        ],
    },
    {"role": "user", "content": [{"type": "input_text", "text": "Thanks! ✓ 0.1 + 0.2"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "nested": {"n": [1, 2.5, None, True]}},
]


@pytest.fixture
def mstore(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "state.db") as store:
        yield store


def _both(tmp_path: Path, store: Any, sid: str) -> tuple[MemstrataSession, Any]:
    return MemstrataSession(sid, store), SQLiteSession(sid, str(tmp_path / "sdk.db"))


def test_items_round_trip_like_the_sdk_sqlite_session(tmp_path: Path, store: Any) -> None:
    """get_items/limit, pop_item and clear_session give what the SDK's SQLiteSession
    gives for the same calls, item for item (on SQLite and on PostgreSQL)."""
    ours, sdk = _both(tmp_path, store, "conv-1")

    async def run() -> list[Any]:
        seen: list[Any] = []
        for session in (ours, sdk):
            trace: list[Any] = []
            trace.append(await session.get_items())
            trace.append(await session.pop_item())
            await session.add_items(ITEMS[:3])
            await session.add_items([])
            await session.add_items(ITEMS[3:])
            for limit in (None, 0, 1, 2, 6, 10, -1):
                trace.append(await session.get_items(limit))
            trace.append(await session.pop_item())
            trace.append(await session.pop_item())
            trace.append(await session.get_items())
            await session.clear_session()
            trace.append(await session.get_items())
            trace.append(await session.pop_item())
            await session.add_items(ITEMS[:1])
            trace.append(await session.get_items())
            seen.append(trace)
        return seen

    mine, reference = asyncio.run(run())
    assert mine == reference
    assert mine[2] == ITEMS  # exactly what was added, in order
    sdk.close()


def test_settings_limit_and_bad_items(tmp_path: Path, mstore: SessionStore) -> None:
    """The SDK's SessionSettings.limit applies when get_items has none; a non-dict item
    is refused before anything is written."""
    from agents.memory import SessionSettings

    session = MemstrataSession("s", mstore, session_settings=SessionSettings(limit=2))

    async def run() -> list[Any]:
        await session.add_items(ITEMS)
        with pytest.raises(SessionStoreError, match="must be a dict"):
            await session.add_items([{"role": "user", "content": "x"}, "oops"])
        return await session.get_items()

    assert asyncio.run(run()) == ITEMS[-2:]
    with pytest.raises(SessionStoreError, match="non-empty session_id"):
        MemstrataSession("  ", mstore)


def test_items_are_searchable(mstore: SessionStore) -> None:
    """Text of messages, tool calls and tool outputs is indexed (Chinese too)."""
    asyncio.run(MemstrataSession("conv", mstore).add_items(ITEMS))
    for query, role in (("BLUEFIN", None), ("发射代号", "user"), ("lookup Osprey", None)):
        hits = mstore.search_messages(query)
        assert hits and hits[0]["session_id"] == "conv", query
        if role:
            assert hits[0]["role"] == role


def _agent(server: FakeLLMServer, tools: list[Any]) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="fake-model", openai_client=client)
    return Agent(name="assistant", instructions="Use memory tools.", model=model, tools=tools)


def _answer_from_tool(body: dict[str, Any]) -> Reply:
    # The fake model answers with what the last tool result says, so the run's final
    # output shows whether recall worked.
    results = [m for m in body["messages"] if m.get("role") == "tool"]
    text = str(results[-1]["content"]) if results else ""
    return Reply.text("The code word is BLUEFIN." if "BLUEFIN" in text else "I do not know.")


def test_runner_second_session_recalls_the_first(
    server: FakeLLMServer, tmp_path: Path, memstrata_home: Path
) -> None:
    """Runner runs two sessions; the second finds the first through session_search, and
    the first's items equal what the SDK's own SQLiteSession keeps for the same run."""
    config = Config.load(memstrata_home)
    store = SessionStore(tmp_path / "state.db", config=config)
    first = MemstrataSession("run-1", store)
    reference = SQLiteSession("run-1", str(tmp_path / "sdk.db"))
    server.script(
        Reply.text("Noted: Osprey's launch code word is BLUEFIN."),
        Reply.text("Noted: Osprey's launch code word is BLUEFIN."),
    )
    agent = _agent(server, memstrata_tools(first, config=config))
    said = "Remember: the launch code word for Project Osprey is BLUEFIN."
    out1 = asyncio.run(Runner.run(agent, said, session=first))
    asyncio.run(Runner.run(agent, said, session=reference))
    assert out1.final_output == "Noted: Osprey's launch code word is BLUEFIN."

    def without_ids(items: list[Any]) -> list[Any]:
        # The fake server numbers its responses: only the ids differ between the runs.
        out = []
        for item in items:
            item = {k: v for k, v in item.items() if k != "id"}
            if "provider_data" in item:
                item["provider_data"] = {
                    k: v for k, v in item["provider_data"].items() if k != "response_id"
                }
            out.append(item)
        return out

    mine, theirs = asyncio.run(first.get_items()), asyncio.run(reference.get_items())
    assert without_ids(mine) == without_ids(theirs)
    assert [i.get("role") for i in mine] == ["user", "assistant"]

    second = MemstrataSession("run-2", store)
    tools = memstrata_tools(second, config=config)
    assert [t.name for t in tools] == ["memory", "session_search", "remember"]
    server.script(
        Reply.tool_call("session_search", {"query": "Osprey launch code word", "summarize": False})
    )
    server.set_default(_answer_from_tool)
    out2 = asyncio.run(
        Runner.run(_agent(server, tools), "What was Osprey's code word?", session=second)
    )
    assert out2.final_output == "The code word is BLUEFIN."
    items = asyncio.run(second.get_items())
    calls = [i for i in items if i.get("type") == "function_call"]
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [c["name"] for c in calls] == ["session_search"]
    found = json.loads(outputs[0]["output"])
    assert found["results"][0]["session_id"] == "run-1"
    # The live session is left out of its own search.
    assert all(r["session_id"] != "run-2" for r in found["results"])
    reference.close()
    store.close()


def test_tools_report_errors_to_the_model(server: FakeLLMServer, memstrata_home: Path) -> None:
    """A bad tool call comes back as a fixable error, and the memory/remember tools write
    where the config points."""
    tools = {t.name: t for t in memstrata_tools(config=Config.load(memstrata_home))}

    async def call(name: str, args: str) -> Any:
        return json.loads(await tools[name].on_invoke_tool(None, args))

    bad = asyncio.run(call("session_search", '{"limit": "lots"}'))
    assert bad["success"] is False and "limit" in bad["error"]
    added = asyncio.run(
        call("memory", json.dumps({"action": "add", "target": "user", "content": "Likes tea"}))
    )
    assert added["success"] is True
    assert "Likes tea" in (memstrata_home / "memories" / "USER.md").read_text()
    remembered = asyncio.run(call("remember", json.dumps({"content": "Deploys on Fridays"})))
    assert remembered["success"] is True
    with pytest.raises(MemstrataError, match="Unknown tool"):
        memstrata_tools(include=["memory", "shell"])
