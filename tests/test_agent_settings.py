"""The lean Agent: parts and settings in, 0.1's keyword arguments deprecated but working."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from memstrata import Agent, AgentSettings
from memstrata.agent.session import SessionLifecycle
from memstrata.config import Config
from memstrata.memory.files import FileMemory
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import RecordingProvider, Reply, ScriptedClient, TemporaryHome

DAY = datetime(2026, 12, 4, 9, 0)


def test_an_agent_is_built_from_its_parts_and_settings() -> None:
    """client, store, manager and settings: a turn writes memory, the provider hears it,
    and the caller's store stays open after the agent closes."""
    provider = RecordingProvider(recall="用户的猫叫小花。")
    client = ScriptedClient(
        [
            Reply.tool_call("memory", {"action": "add", "target": "user", "content": "喜欢喝茶"}),
            Reply.text("记住了：你喜欢喝茶。"),
        ]
    )
    with TemporaryHome() as home:
        settings = AgentSettings(title="茶", stream=False, clock=lambda: DAY)
        with Agent(client, home.store, home.manager(provider), settings=settings) as agent:
            result = agent.run_turn("我喜欢喝茶")
            assert isinstance(agent, SessionLifecycle)
            assert agent.settings is settings
        assert result.text == "记住了：你喜欢喝茶。"
        assert [call.name for call in result.tool_calls] == ["memory"]
        assert provider.writes == [("add", "user", "喜欢喝茶")]
        # The recall went into the first request's user message, fenced.
        assert "小花" in client.requests[0].messages[-1]["content"]
        assert client.requests[0].tool_names == ["memory", "session_search", "remember"]
        tool_reply = json.loads(client.requests[1].messages[-1]["content"])
        assert tool_reply["success"] is True
        # The store is the caller's: still open, holding the titled session.
        assert home.store.get_session_title(agent.session_id) == "茶"
        assert home.memory.entries("user") == ["喜欢喝茶"]


def test_from_config_builds_the_missing_parts_and_owns_its_store(memstrata_home: Path) -> None:
    client = ScriptedClient(["Hello."])
    agent = Agent.from_config(
        Config.load(memstrata_home), client=client, settings=AgentSettings(stream=False)
    )
    with agent:
        assert agent.run_turn("hi").text == "Hello."
    assert agent.manager.shutdown_report is not None
    with pytest.raises(Exception, match="closed"):
        agent.store.get_session(agent.session_id)
    with SessionStore(memstrata_home / "state.db") as store:
        assert store.get_session(agent.session_id) is not None


def test_old_keyword_arguments_work_with_a_deprecation_warning(memstrata_home: Path) -> None:
    """Agent(client, config=..., title=..., stream=...) as 0.1 wrote it."""
    config = Config.load(memstrata_home)
    manager = MemoryManager(memory=FileMemory(memstrata_home, config=config), config=config)
    client = ScriptedClient(["Sure."])
    with pytest.warns(DeprecationWarning) as caught:
        agent = Agent(client, config=config, manager=manager, title="Old style", stream=False)
    messages = [str(w.message) for w in caught]
    assert any("AgentSettings(stream=, title=" in m for m in messages), messages
    assert any("Agent.from_config" in m for m in messages), messages
    with agent:
        agent.run_turn("hello")
        assert agent.settings.title == "Old style" and agent.stream is False
        assert agent.store.get_session_title(agent.session_id) == "Old style"


def test_an_agent_without_parts_warns_and_builds_them(
    memstrata_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_MODEL", "some-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.warns(DeprecationWarning, match="Agent.from_config"):
        agent = Agent()
    with agent:
        assert agent.client.model == "some-model"
        assert agent.config.home == memstrata_home


def test_bad_arguments_are_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): colour"):
        Agent(ScriptedClient(), colour="blue")
    with pytest.raises(ValueError, match="max_tool_iterations must be at least 1"):
        AgentSettings(max_tool_iterations=0)
    with pytest.raises(ValueError, match="context_window"):
        AgentSettings(context_window=0)
    files = AgentSettings(context_files=[Path("AGENTS.md")])  # type: ignore[arg-type]
    assert files.context_files == (Path("AGENTS.md"),)
