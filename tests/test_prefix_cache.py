"""Decision 4: within a session every request starts with the previous one, byte for byte.

A scripted 50-turn session runs through the fake server with memory writes, a session
search and provider recall on every turn; the captured HTTP bodies are compared.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from helpers import record
from memstrata.agent.loop import Agent, AgentSettings
from memstrata.config import Config
from memstrata.llm import OpenAIClient
from memstrata.memory.files import FileMemory
from memstrata.prompt.fencing import OPEN_TAG
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import (
    FakeLLMServer,
    RecordedRequest,
    RecordingProvider,
    Reply,
    common_prefix_length,
)

TURNS = 50
MEMORY_TURNS = {3, 11, 19, 27, 35, 43}  # six writes
SEARCH_TURN = 30


def counting_recall() -> RecordingProvider:
    """Recalls a different line every turn (as a real backend would)."""
    counter = itertools.count(1)
    return RecordingProvider(
        "counting",
        block="Counting recall is active.",
        recall=lambda query: (
            f"Recall #{next(counter)}: the user asked about {query[:40]!r} before."
        ),
    )


def user_text(turn: int) -> str:
    return f"Turn {turn}: tell me about topic {turn}. " + "Some context. " * 8


def script_session(server: FakeLLMServer) -> None:
    for turn in range(TURNS):
        if turn in MEMORY_TURNS:
            fact = f"Fact {turn}: the user prefers option {turn % 7}."
            server.script(
                Reply.tool_call("memory", {"action": "add", "target": "memory", "content": fact}),
                Reply.text(f"Saved fact {turn}."),
            )
        elif turn == SEARCH_TURN:
            server.script(
                Reply.tool_call("session_search", {"query": "topic 4"}),
                Reply.text("I found our earlier talk."),
            )
        else:
            server.script(Reply.text(f"Answer {turn}. " + "Details follow. " * 12))


def messages_json(request: RecordedRequest) -> str:
    """The exact text of the ``messages`` array as it went over the wire."""
    raw = request.raw.decode("utf-8")
    start = raw.index('"messages":') + len('"messages":')
    _, end = json.JSONDecoder().raw_decode(raw, start)
    return raw[start:end]


def agent_requests(server: FakeLLMServer) -> list[RecordedRequest]:
    return [r for r in server.requests if isinstance(r.body, dict) and r.body.get("tools")]


Run = tuple[FakeLLMServer, Agent, RecordingProvider, Path]


@pytest.fixture(scope="module")
def session_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The 50-turn session, run once for the module (its own home folder)."""
    home = tmp_path_factory.mktemp("prefix-home")
    provider = counting_recall()
    config = Config.load(home, environ={})
    with FakeLLMServer(stream_chunk_chars=16) as server:
        script_session(server)
        manager = MemoryManager(memory=FileMemory(home, config=config), config=config)
        manager.add_provider(provider)
        client = OpenAIClient("fake-model", base_url=server.base_url, api_key="k", max_retries=0)
        agent = Agent.from_config(
            config,
            client=client,
            manager=manager,
            settings=AgentSettings(clock=lambda: datetime(2026, 12, 2, 9, 0)),
        )
        with agent:
            for turn in range(TURNS):
                agent.run_turn(user_text(turn))
        yield server, agent, provider, home


def test_every_request_extends_the_previous_one_byte_for_byte(session_run: Run) -> None:
    """50 turns, six memory writes, a search and recall every turn: no request ever
    changes a byte of what the previous one sent, and the system prompt never moves."""
    server, agent, provider, home = session_run
    requests = agent_requests(server)[: TURNS + len(MEMORY_TURNS) + 1]
    assert len(requests) == TURNS + len(MEMORY_TURNS) + 1
    assert len(provider.calls_to("prefetch")) == TURNS

    system_prompts = {r.body["messages"][0]["content"] for r in requests}
    assert len(system_prompts) == 1
    tools = {json.dumps(r.body["tools"]) for r in requests}
    assert len(tools) == 1
    for previous, current in itertools.pairwise(requests):
        before = messages_json(previous)
        after = messages_json(current)
        assert after.startswith(before[:-1] + ","), "a request rewrote its prefix"

    # The writes really happened, yet the frozen prompt shows none of them.
    saved = (home / "memories" / "MEMORY.md").read_text(encoding="utf-8")
    for turn in MEMORY_TURNS:
        assert f"Fact {turn}:" in saved
        assert f"Fact {turn}:" not in next(iter(system_prompts))
    # Recall reached the wire in every user message, and no stored message.
    sent_users = [m for m in requests[-1].body["messages"] if m["role"] == "user"]
    assert len(sent_users) == TURNS
    assert all(OPEN_TAG in m["content"] for m in sent_users)
    with SessionStore(config=Config.load(home, environ={})) as store:
        stored = store.get_messages(agent.session_id)
    assert not any(OPEN_TAG in (m["content"] or "") for m in stored)


def test_prefix_cache_share_is_reported(
    session_run: Run,
    record_property: Any,
) -> None:
    """The share of prompt characters a prefix cache would serve is high and matches the
    cached tokens the endpoint reported."""
    server, agent, _, _ = session_run
    requests = agent_requests(server)[: TURNS + len(MEMORY_TURNS) + 1]
    texts = [json.dumps(r.body["tools"]) + messages_json(r) for r in requests]
    served = sum(common_prefix_length(a, b) for a, b in itertools.pairwise(texts))
    total = sum(len(t) for t in texts)
    share = served / total
    reported = agent.usage.cached_tokens / agent.usage.prompt_tokens
    # The figure goes to the JUnit report and the hardening log, never into pytest's
    # progress line.
    record_property("prefix_cache_share", round(share, 4))
    record(kind="prefix_cache", share=round(share, 4), reported=round(reported, 4), chars=total)
    assert share > 0.85
    assert reported > 0.85


def test_resumed_session_continues_the_same_prefix(session_run: Run) -> None:
    """After the 50 turns, a new process-like agent resuming the session sends a request
    whose messages start with the last request's messages, byte for byte."""
    server, agent, _, home = session_run
    last = agent_requests(server)[TURNS + len(MEMORY_TURNS)]
    config = Config.load(home, environ={})
    client = OpenAIClient("fake-model", base_url=server.base_url, api_key="k", max_retries=0)
    resumed = Agent.from_config(
        config,
        client=client,
        settings=AgentSettings(
            session_id=agent.session_id, clock=lambda: datetime(2026, 12, 9, 9, 0)
        ),
    )
    with resumed:
        resumed.run_turn("One more question.")
    first = agent_requests(server)[-1]
    assert messages_json(first).startswith(messages_json(last)[:-1] + ",")


def test_prompt_cost_benchmark_prices_naive_reinjection_higher() -> None:
    """benchmarks/prompt_cost.py: rebuilding the prompt on a memory write costs more
    than the frozen snapshot, and only the naive run has more than one system prompt."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "prompt_cost.py"
    spec = importlib.util.spec_from_file_location("bench_prompt_cost", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_prompt_cost"] = module
    spec.loader.exec_module(module)
    frozen = module.run("frozen", 6)
    naive = module.run("naive", 6)
    assert frozen.system_prompts == 1 and naive.system_prompts == 2
    assert frozen.requests == naive.requests == 6 + 2  # one write and one file read
    assert naive.input_cost(3.0) > frozen.input_cost(3.0)
    assert frozen.read_tokens == frozen.reported_cached
