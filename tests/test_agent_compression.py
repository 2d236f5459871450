"""Compression end to end: threshold, session split, search into the parent, fallback."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.agent.loop import Agent, AgentSettings
from memstrata.compress.compressor import ContextCompressor
from memstrata.config import Config
from memstrata.llm import OpenAIClient
from memstrata.memory.files import FileMemory
from memstrata.prompt.fencing import OPEN_TAG
from memstrata.providers.manager import MemoryManager
from memstrata.testing import FakeLLMServer, RecordingProvider, Reply

DETAIL = "the staging database hint is blue-otter-42"
SUMMARY = "Summary: the user and the assistant went through a list of unrelated topics."
WINDOW = 6_000


def recall_manager(home: Path) -> MemoryManager:
    config = Config.load(home, environ={})
    manager = MemoryManager(memory=FileMemory(home, config=config), config=config)
    # Recalls one line per turn, so user messages carry a fence.
    manager.add_provider(
        RecordingProvider("recall", recall=lambda query: f"Recalled for: {query[:30]}")
    )
    return manager


def is_summary_request(body: Mapping[str, Any]) -> bool:
    return not body.get("tools")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(stream_chunk_chars=64) as fake:
        yield fake


def client(server: FakeLLMServer) -> OpenAIClient:
    return OpenAIClient("fake-model", base_url=server.base_url, api_key="k", max_retries=0)


def make_agent(server: FakeLLMServer, home: Path, **kwargs: Any) -> Agent:
    environ: dict[str, str] = kwargs.pop("environ", {})
    config = Config.load(home, environ=environ)
    compressor = ContextCompressor(client(server), config=config, context_window=WINDOW)
    kwargs.setdefault("clock", lambda: datetime(2026, 12, 2, 9, 0))
    return Agent.from_config(
        config,
        client=client(server),
        manager=kwargs.pop("manager", None),
        compressor=compressor,
        settings=AgentSettings(context_window=WINDOW, **kwargs),
    )


def chatter(turn: int) -> str:
    return f"Turn {turn}: let us talk about subject number {turn}. " + "Filler words. " * 25


def drive_past_threshold(agent: Agent, max_turns: int = 40) -> int:
    """Run turns (the detail in turn 3) until a turn compresses; return that turn."""
    for turn in range(max_turns):
        text = f"Note: {DETAIL}. Please keep it in mind." if turn == 3 else chatter(turn)
        if agent.run_turn(text).compressed:
            return turn
    raise AssertionError("the conversation never reached the compression threshold")


def agent_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [b for b in server.chat_requests if not is_summary_request(b)]


def test_session_splits_and_search_finds_what_was_compressed(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """Past the threshold the session splits; the child is the listed tip, and
    session_search from the child finds a detail that only the parent holds."""
    server.on(is_summary_request, Reply.text(SUMMARY))
    server.on(
        "search for the hint",
        Reply.tool_call("session_search", {"query": "blue-otter-42"}),
        times=1,
    )
    with make_agent(server, memstrata_home, title="Long talk") as agent:
        parent = agent.session_id
        drive_past_threshold(agent)
        child = agent.session_id
        assert child != parent
        assert DETAIL not in json.dumps(agent.request_messages())
        assert SUMMARY in json.dumps(agent.request_messages())
        agent.run_turn("Please search for the hint we discussed.")
        found = json.loads(agent.messages[-2]["content"])
        store = agent.store
        parent_row = store.get_session(parent)
        child_row = store.get_session(child)
        listing = store.list_sessions_rich()
        assert child_row is not None and parent_row is not None
        assert child_row["system_prompt"] == agent.system_prompt
    assert parent_row["end_reason"] == "compression"
    assert child_row["parent_session_id"] == parent
    assert child_row["title"] == "Long talk #2"
    assert [row["id"] for row in listing] == [child]
    assert parent in listing[0]["session_ids"]
    assert found["success"] is True
    hit = found["results"][0]
    assert hit["session_id"] == parent
    assert "blue-otter-42" in json.dumps(hit)


def test_prefix_breaks_only_at_the_compression_boundary(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """Requests extend each other byte for byte except once, where compression happened;
    the rebuilt prompt then holds the memory written before it."""
    server.on(is_summary_request, Reply.text(SUMMARY))
    server.script(
        Reply.tool_call("memory", {"action": "add", "content": "User likes long talks."}),
        Reply.text("Saved."),
    )
    with make_agent(server, memstrata_home) as agent:
        agent.start()
        before_prompt = agent.system_prompt
        drive_past_threshold(agent)
        for turn in range(2):
            agent.run_turn(f"After compression, turn {turn}.")
        after_prompt = agent.system_prompt
    requests = agent_requests(server)
    breaks = [
        index
        for index, (a, b) in enumerate(itertools.pairwise(requests), start=1)
        if json.dumps(b["messages"][: len(a["messages"])]) != json.dumps(a["messages"])
    ]
    assert len(breaks) == 1
    boundary = breaks[0]
    assert {r["messages"][0]["content"] for r in requests[:boundary]} == {before_prompt}
    assert {r["messages"][0]["content"] for r in requests[boundary:]} == {after_prompt}
    assert "User likes long talks." not in before_prompt
    assert "User likes long talks." in after_prompt


def test_resuming_the_child_replays_its_prefix(server: FakeLLMServer, memstrata_home: Path) -> None:
    """The child session stores the compacted conversation with its API copies, so a
    resumed conversation (asked for by the parent's id) sends the same prefix as before."""
    server.on(is_summary_request, Reply.text(SUMMARY))
    with make_agent(server, memstrata_home, manager=recall_manager(memstrata_home)) as agent:
        parent = agent.session_id
        drive_past_threshold(agent)
        agent.run_turn("One more after compression.")
        child = agent.session_id
        fenced = [m for m in agent.messages if OPEN_TAG in str(m.get("api_content"))]
    assert len(fenced) >= 2  # kept turns still carry the recall they were sent with
    summaries = [json.dumps(b) for b in server.chat_requests if is_summary_request(b)]
    assert summaries and not any("Recalled for:" in text for text in summaries)
    last = agent_requests(server)[-1]
    # Asking for the parent leads to its compression tip, the child.
    with make_agent(server, memstrata_home, session_id=parent) as resumed:
        assert resumed.session_id == child
        resumed.run_turn("And after resuming.")
    first = agent_requests(server)[-1]
    assert first["messages"][: len(last["messages"])] == last["messages"]
    assert json.dumps(first["messages"][: len(last["messages"])]) == json.dumps(last["messages"])


def test_failing_summary_model_gives_the_fallback_with_the_facts(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """When the summary model fails, the deterministic fallback summary replaces the
    middle and still carries the user's facts; nothing is lost from the store."""
    server.on(is_summary_request, Reply.server_error(500))
    with make_agent(server, memstrata_home) as agent:
        parent = agent.session_id
        drive_past_threshold(agent)
        conversation = json.dumps(agent.request_messages())
        parent_rows = agent.store.get_messages(parent)
    assert any(is_summary_request(b) for b in server.chat_requests)
    assert "without the summary model" in conversation
    assert "blue-otter-42" in conversation
    assert any("blue-otter-42" in (row["content"] or "") for row in parent_rows)


def test_manual_compress_splits_below_the_threshold(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """/compress works on a conversation below the threshold and says what it did."""
    server.on(is_summary_request, Reply.text(SUMMARY))
    with make_agent(server, memstrata_home) as agent:
        for turn in range(6):
            agent.run_turn(chatter(turn))
        parent = agent.session_id
        done = agent.compress("subject number 2")
    assert done.result.compressed and done.split
    assert done.parent_session_id == parent and done.session_id == agent.session_id
    summary_prompt = next(b for b in server.chat_requests if is_summary_request(b))
    assert "subject number 2" in json.dumps(summary_prompt)


def test_in_place_compaction_keeps_the_session_id(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """With compression.in_place the session id stays and the old rows are archived."""
    server.on(is_summary_request, Reply.text(SUMMARY))
    environ = {"MEMSTRATA_COMPRESSION__IN_PLACE": "true"}
    with make_agent(server, memstrata_home, environ=environ) as agent:
        session = agent.session_id
        drive_past_threshold(agent)
        assert agent.session_id == session
        live = agent.store.get_messages(session)
        every = agent.store.get_messages(session, include_inactive=True)
    assert len(every) > len(live)
    assert any(DETAIL in (row["content"] or "") for row in every)
    assert not any(DETAIL in (row["content"] or "") for row in live)


def test_nothing_to_compress_changes_nothing(server: FakeLLMServer, memstrata_home: Path) -> None:
    """/compress on an empty or tiny conversation reports it and keeps the session."""
    with make_agent(server, memstrata_home) as agent:
        assert agent.compress().result.status == "nothing_to_do"
        agent.run_turn("hi")
        session = agent.session_id
        done = agent.compress()
    assert not done.result.compressed
    assert done.session_id == session
