"""The reference agent loop against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.agent.loop import Agent, AgentSettings, Pricing
from memstrata.config import Config
from memstrata.errors import LLMAuthError
from memstrata.llm import OpenAIClient
from memstrata.memory.files import FileMemory
from memstrata.prompt.builder import MEMORY_GUIDANCE, SESSION_SEARCH_GUIDANCE
from memstrata.prompt.fencing import OPEN_TAG
from memstrata.providers.base import MemoryProvider
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, RecordingProvider, Reply, tool_schema


def recorder(recall: str = "The user's cat is called Tom.") -> RecordingProvider:
    """An external provider that recalls a fixed fact and offers one lookup tool."""
    return RecordingProvider(
        recall=recall,
        block="Recorder remembers pets.",
        tools=[tool_schema("recorder_lookup", "Look a fact up.", key="string")],
        replies={
            "recorder_lookup": lambda args: {
                "success": True,
                "value": f"looked up {args.get('key')}",
            }
        },
    )


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(stream_chunk_chars=3) as fake:
        yield fake


def make_agent(
    server: FakeLLMServer,
    home: Path,
    *,
    provider: MemoryProvider | None = None,
    **settings: Any,
) -> Agent:
    config = Config.load(home)
    manager = MemoryManager(memory=FileMemory(home, config=config), config=config)
    if provider is not None:
        manager.add_provider(provider)
    client = OpenAIClient("fake-model", base_url=server.base_url, api_key="k", max_retries=0)
    settings.setdefault("clock", lambda: datetime(2026, 12, 2, 10, 0))
    return Agent.from_config(
        config, client=client, manager=manager, settings=AgentSettings(**settings)
    )


def agent_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    """Chat requests sent by the agent loop (they carry tools; summaries do not)."""
    return [body for body in server.chat_requests if body.get("tools")]


def test_recall_goes_only_into_the_api_copy(server: FakeLLMServer, memstrata_home: Path) -> None:
    """Prefetched recall is fenced into the sent user message; the stored one stays raw."""
    provider = recorder()
    with make_agent(server, memstrata_home, provider=provider) as agent:
        agent.run_turn("What is my cat called?")
        session = agent.session_id
    sent = agent_requests(server)[0]["messages"]
    user = sent[-1]
    assert user["role"] == "user"
    assert user["content"].startswith("What is my cat called?\n\n" + OPEN_TAG)
    assert "The user's cat is called Tom." in user["content"]
    assert OPEN_TAG not in sent[0]["content"]  # never in the system prompt
    with SessionStore(config=Config.load(memstrata_home)) as store:
        rows = store.get_messages(session)
    assert rows[0]["content"] == "What is my cat called?"
    assert rows[0]["api_content"] == user["content"]


def test_lifecycle_hooks_run_in_the_seed_order(server: FakeLLMServer, memstrata_home: Path) -> None:
    """initialize, prompt block, turn start, prefetch, sync, queue_prefetch, end, shutdown."""
    provider = recorder()
    server.script(Reply.text("Hi!"))
    with make_agent(server, memstrata_home, provider=provider) as agent:
        agent.run_turn("hello")
        agent.manager.flush_pending(5)
    assert provider.hooks() == [
        "initialize",
        "system_prompt_block",
        "on_turn_start",
        "prefetch",
        "sync_turn",
        "queue_prefetch",
        "on_session_end",
        "shutdown",
    ]
    synced = provider.calls_to("sync_turn")
    assert [(c["user"], c["assistant"]) for c in synced] == [("hello", "Hi!")]


def test_memory_write_lands_on_disk_but_not_in_the_prompt(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A memory write is saved and mirrored to providers; the system prompt stays the same."""
    provider = recorder()
    server.script(
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea."}),
        Reply.text("Noted."),
        Reply.text("Sure."),
    )
    with make_agent(server, memstrata_home, provider=provider) as agent:
        first = agent.run_turn("I like tea")
        agent.run_turn("Anything else?")
        agent.manager.flush_pending(5)
    assert first.text == "Noted." and [c.name for c in first.tool_calls] == ["memory"]
    assert "Likes tea." in (memstrata_home / "memories" / "USER.md").read_text(encoding="utf-8")
    prompts = {body["messages"][0]["content"] for body in agent_requests(server)}
    assert len(prompts) == 1
    assert "Likes tea." not in prompts.pop()
    assert provider.writes == [("add", "user", "Likes tea.")]
    tool_result = json.loads(agent_requests(server)[1]["messages"][-1]["content"])
    assert tool_result["success"] is True


def test_tools_offered_and_guidance_only_for_them(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """memory, provider tools and session_search are offered and guided; routing works."""
    provider = recorder()
    server.script(Reply.tool_call("recorder_lookup", {"key": "cat"}), Reply.text("Tom."))
    with make_agent(server, memstrata_home, provider=provider) as agent:
        agent.run_turn("look it up")
    body = agent_requests(server)[0]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["memory", "recorder_lookup", "session_search", "remember"]
    system = body["messages"][0]["content"]
    assert MEMORY_GUIDANCE in system and SESSION_SEARCH_GUIDANCE in system
    assert "Recorder remembers pets." in system
    assert provider.calls_to("handle_tool_call") == [
        {"name": "recorder_lookup", "args": {"key": "cat"}}
    ]
    result = json.loads(agent_requests(server)[1]["messages"][-1]["content"])
    assert result == {"success": True, "value": "looked up cat"}


def test_streamed_fence_never_reaches_the_user_or_the_store(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A model echoing a fence shows and stores the reply without it, whatever the chunks."""
    server.script(Reply.text("Hi <memory-context>secret recall</memory-context>there."))
    shown: list[str] = []
    with make_agent(server, memstrata_home) as agent:
        result = agent.run_turn("hello", on_text=shown.append)
        session = agent.session_id
    assert len(shown) > 1  # it really streamed
    assert "".join(shown) == "Hi there." == result.text
    with SessionStore(config=Config.load(memstrata_home)) as store:
        assert store.get_messages(session)[-1]["content"] == "Hi there."


def test_non_streaming_mode_scrubs_too(server: FakeLLMServer, memstrata_home: Path) -> None:
    """With stream=False the whole reply is scrubbed and handed over once."""
    server.script(Reply.text("A<memory-context>x</memory-context>B"))
    shown: list[str] = []
    with make_agent(server, memstrata_home, stream=False) as agent:
        agent.run_turn("hi", on_text=shown.append)
    assert shown == ["AB"]
    assert "stream" not in server.chat_requests[0]


def test_tool_loop_is_bounded(server: FakeLLMServer, memstrata_home: Path) -> None:
    """A model that always calls tools stops after the limit plus one grace call."""
    server.set_default(Reply.tool_call("memory", {"action": "read"}))
    with make_agent(server, memstrata_home, max_tool_iterations=3) as agent:
        result = agent.run_turn("loop forever")
        messages = agent.request_messages()
    assert result.hit_tool_limit
    assert result.api_calls == 5  # three rounds run, one refused, one grace call
    assert len(result.tool_calls) == 3
    assert "Stopped" in result.text
    # Every call has its result, so the next request is valid.
    calls = [c["id"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == answered
    assert "limit of 3 tool rounds" in messages[-1]["content"]


def test_unknown_tool_gets_an_error_the_model_can_use(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A call to a tool that does not exist is answered with the available tools."""
    server.script(Reply.tool_call("teleport", {}), Reply.text("Sorry."))
    with make_agent(server, memstrata_home) as agent:
        agent.run_turn("beam me up")
    error = json.loads(agent_requests(server)[1]["messages"][-1]["content"])
    assert error["success"] is False
    assert "Unknown tool 'teleport'" in error["error"] and "memory" in error["error"]


def test_resume_replays_the_same_prefix(server: FakeLLMServer, memstrata_home: Path) -> None:
    """A resumed session reuses the stored prompt and api_content: the first request
    after resuming starts with the last request before it, byte for byte."""
    provider = recorder()
    server.script(
        Reply.tool_call("memory", {"action": "add", "content": "Uses vim."}),
        Reply.text("Ok."),
        Reply.text("Second answer."),
    )
    with make_agent(server, memstrata_home, provider=provider) as agent:
        agent.run_turn("remember I use vim")
        agent.run_turn("second turn")
        session = agent.session_id
    before = agent_requests(server)[-1]
    # A different day and a memory file that changed since: the prompt must not move.
    later = make_agent(
        server,
        memstrata_home,
        provider=recorder("Different recall now."),
        session_id=session,
        clock=lambda: datetime(2027, 1, 5, 8, 0),
    )
    with later as agent:
        agent.run_turn("third turn")
    after = agent_requests(server)[-1]
    old = json.dumps(before["messages"], ensure_ascii=False)
    new = json.dumps(after["messages"][: len(before["messages"])], ensure_ascii=False)
    assert new == old
    # The reply of the last turn before closing follows, then the new user message.
    assert after["messages"][len(before["messages"])]["content"] == "Second answer."
    assert "Different recall now." in after["messages"][-1]["content"]
    with SessionStore(config=Config.load(memstrata_home)) as store:
        row = store.get_session(session)
    assert row is not None and row["end_reason"] == "user_exit"


def test_usage_and_cost_are_recorded_per_session(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """Prompt, completion and cache-read tokens and the cost accumulate on the session."""
    pricing = Pricing(input_per_mtok=3.0, output_per_mtok=15.0)
    with make_agent(server, memstrata_home, pricing=pricing) as agent:
        first = agent.run_turn("one")
        second = agent.run_turn("two")
        session = agent.session_id
    with SessionStore(config=Config.load(memstrata_home)) as store:
        row = store.get_session(session)
    assert row is not None
    assert row["api_call_count"] == 2
    assert row["input_tokens"] == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert row["output_tokens"] == first.usage.completion_tokens + second.usage.completion_tokens
    assert second.usage.cached_tokens > 0  # the second request reused the first's prefix
    assert row["cache_read_tokens"] == first.usage.cached_tokens + second.usage.cached_tokens
    expected = pricing.cost(first.usage) + pricing.cost(second.usage)
    assert row["estimated_cost_usd"] == pytest.approx(expected)
    assert first.cost_usd is not None and second.cost_usd is not None
    assert second.cost_usd < pricing.cost(
        type(second.usage)(second.usage.prompt_tokens, second.usage.completion_tokens)
    )


def test_pricing_counts_cache_reads_and_writes() -> None:
    """Cached tokens cost 0.1x input and written ones 1.25x, the rest full price."""
    from memstrata.llm import TokenUsage

    pricing = Pricing(input_per_mtok=1_000_000.0, output_per_mtok=2_000_000.0)
    usage = TokenUsage(
        prompt_tokens=100, completion_tokens=10, cached_tokens=60, cache_write_tokens=20
    )
    assert pricing.cost(usage) == pytest.approx(20 + 6 + 25 + 20)


def test_model_error_raises_and_the_session_goes_on(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """An auth error surfaces as LLMAuthError; the next turn still works and is valid."""
    server.script(Reply.auth_error())
    with make_agent(server, memstrata_home) as agent:
        with pytest.raises(LLMAuthError):
            agent.run_turn("first try")
        result = agent.run_turn("second try")
        roles = [m["role"] for m in agent.request_messages()]
    assert result.text == "You said: second try"
    assert roles == ["system", "user", "user", "assistant"]


def test_new_session_refreshes_the_snapshot(server: FakeLLMServer, memstrata_home: Path) -> None:
    """/new ends the old session and builds a prompt holding the memory written before."""
    provider = recorder()
    server.script(
        Reply.tool_call("memory", {"action": "add", "content": "Repo uses tabs."}),
        Reply.text("Saved."),
    )
    with make_agent(server, memstrata_home, provider=provider) as agent:
        agent.run_turn("we use tabs")
        old = agent.session_id
        assert "Repo uses tabs." not in agent.system_prompt
        new = agent.new_session()
        assert new != old and agent.messages == []
        assert "Repo uses tabs." in agent.system_prompt
        agent.run_turn("hello")
    assert [c["reason"] for c in provider.calls_to("on_session_switch")] == ["new"]
    with SessionStore(config=Config.load(memstrata_home)) as store:
        old_row = store.get_session(old)
        assert old_row is not None and old_row["end_reason"] == "new_session"
        assert store.get_session(new) is not None


def test_an_unused_session_leaves_no_row(server: FakeLLMServer, memstrata_home: Path) -> None:
    """Opening and closing an agent without a turn stores nothing."""
    with make_agent(server, memstrata_home) as agent:
        session = agent.session_id
    with SessionStore(config=Config.load(memstrata_home)) as store:
        assert store.get_session(session) is None


def test_title_is_stored_with_the_session(server: FakeLLMServer, memstrata_home: Path) -> None:
    """A title given at start or set later is kept on the session row."""
    with make_agent(server, memstrata_home, title="Trip planning") as agent:
        assert agent.store.get_session_title(agent.session_id) == "Trip planning"
        assert agent.set_title("Trip to Lisbon") == "Trip to Lisbon"


def test_blank_turn_is_refused(server: FakeLLMServer, memstrata_home: Path) -> None:
    """An empty user message raises ValueError and sends nothing."""
    with make_agent(server, memstrata_home) as agent, pytest.raises(ValueError):
        agent.run_turn("   ")
    assert server.chat_requests == []


def test_refit_keeps_the_fence_when_compression_merged_a_summary() -> None:
    """A summary merged in front of a kept user message keeps that message's fence."""
    from memstrata.agent.turn import refit_api_content, user_api_content

    fence = "<memory-context>\nrecall\n</memory-context>"
    message = {
        "role": "user",
        "content": "question",
        "api_content": user_api_content("question", fence),
    }
    assert refit_api_content(message) == message
    merged = {**message, "content": "SUMMARY\n\nquestion"}
    assert refit_api_content(merged)["api_content"] == "SUMMARY\n\nquestion\n\n" + fence
    rewritten = {**message, "content": "something else"}
    assert "api_content" not in refit_api_content(rewritten)


def test_stored_rows_become_the_same_wire_messages() -> None:
    """A message read back from the store is sent exactly like the live one."""
    from memstrata.agent.turn import api_message, message_from_row

    live = {"role": "tool", "content": "{}", "tool_call_id": "c1", "name": "memory"}
    row = {
        "id": 7,
        "session_id": "s",
        "role": "tool",
        "content": "{}",
        "tool_call_id": "c1",
        "tool_name": "memory",
        "tool_calls": None,
        "api_content": None,
        "finish_reason": None,
    }
    assert json.dumps(api_message(message_from_row(row))) == json.dumps(api_message(live))
