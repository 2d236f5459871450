"""Context compression: boundaries, summaries over real HTTP, fallback, cooldowns, tool pairs."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.compress.compressor import (
    SUMMARY_END,
    SUMMARY_PREFIX,
    CompressionJob,
    CompressionSettings,
    ContextCompressor,
    estimate_tokens,
    message_tokens,
    repair_tool_pairs,
)
from memstrata.compress.prompt import (
    SECTIONS,
    fallback_summary,
    is_pure_summary,
    redact_secrets,
    split_summary,
)
from memstrata.errors import ConfigError, LLMAuthError, LLMTimeoutError
from memstrata.llm import OpenAIClient, RetryPolicy
from memstrata.testing import FakeLLMServer, Reply

FACT = "the staging database listens on port 6543 behind pgbouncer-7"
SECRET = "sk-proj-abcdefghijklmnopqrstuvwx1234567890"


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(server: FakeLLMServer) -> Iterator[OpenAIClient]:
    with OpenAIClient(
        "summary-model",
        base_url=server.base_url,
        api_key="test",
        timeout=5.0,
        retry=RetryPolicy(max_retries=0),
    ) as c:
        yield c


def call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def conversation(turns: int = 24, *, fact_at: int = 6) -> list[dict[str, Any]]:
    """A system prompt and ``turns`` rounds of user ask, tool call, tool result, answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(turns):
        ask = f"Step {i}: please check the service logs and report. " + "detail " * 40
        if i == fact_at:
            ask = f"Remember that {FACT}. My key is {SECRET}. " + ask
        messages.append({"role": "user", "content": ask})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{i}", "terminal", {"command": f"cat /var/log/app{i}.log"})],
            }
        )
        output = f"log line for step {i}\n" + "ok request served\n" * 40
        if i == fact_at + 1:
            output += "ERROR: connection refused to 10.0.0.7:6543\n"
        messages.append(
            {"role": "tool", "tool_call_id": f"c{i}", "name": "terminal", "content": output}
        )
        messages.append({"role": "assistant", "content": f"Step {i} looks fine."})
    messages.append({"role": "user", "content": "Now summarise what failed, briefly."})
    return messages


def prompt_of(server: FakeLLMServer, index: int = -1) -> str:
    return str(server.chat_requests[index]["messages"][0]["content"])


def summary_message(messages: list[dict[str, Any]]) -> dict[str, Any]:
    hits = [m for m in messages if split_summary(m.get("content")) is not None]
    assert len(hits) == 1
    return hits[0]


def test_estimate_tokens_counts_text_tool_calls_and_images() -> None:
    """Four characters a token plus ten per message; tool-call envelopes and images count."""
    assert estimate_tokens([{"role": "user", "content": "x" * 400}]) == 110
    with_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("a", "t", {"k": "v" * 80})],
    }
    assert message_tokens(with_call) > 10 + 20
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    assert message_tokens(image) == 10 + 1_600


def test_should_compress_at_threshold_and_configurable(memstrata_home: Any) -> None:
    """The default threshold is 75 % of the window; the config and arguments change it."""
    compressor = ContextCompressor(None, context_window=100_000)
    assert not compressor.should_compress(74_999)
    assert compressor.should_compress(75_000)
    assert compressor.should_compress(50_000, context_window=60_000)
    (memstrata_home / "config.toml").write_text("[compression]\nthreshold = 0.5\n")
    assert ContextCompressor(None, context_window=100_000).should_compress(50_000)
    (memstrata_home / "config.toml").write_text("[compression]\nenabled = false\n")
    assert not ContextCompressor(None, context_window=100_000).should_compress(99_000)


def test_bad_settings_are_refused() -> None:
    """Out-of-range settings raise ConfigError naming the key."""
    with pytest.raises(ConfigError, match=r"compression\.threshold"):
        CompressionSettings(threshold=1.5)
    with pytest.raises(ConfigError, match="tail_token_ratio"):
        CompressionSettings(tail_token_ratio=0)
    with pytest.raises(ConfigError, match="Unknown compression setting"):
        ContextCompressor(None, context_windw=1_000)


def test_llm_summary_request_and_result(server: FakeLLMServer, client: OpenAIClient) -> None:
    """The model gets the template, the turns and the escaped provider context; the result
    keeps head and tail and marks the summary."""
    server.script(Reply.text("## Goal\nCheck logs.\n## Critical Context\n" + FACT))
    messages = conversation()
    compressor = ContextCompressor(client, context_window=16_000)
    result = compressor.compress(messages, provider_context="User prefers <b>terse</b> & direct")
    assert result.status == "compressed" and result.compressed and not result.used_fallback
    prompt = prompt_of(server)
    for heading in SECTIONS:
        assert f"## {heading}" in prompt
    assert "TURNS TO SUMMARIZE" in prompt and "PREVIOUS SUMMARY" not in prompt
    assert "<memory-provider-context>" in prompt and "not instructions" in prompt
    assert "\\u003cb\\u003eterse\\u003c/b\\u003e \\u0026 direct" in prompt
    assert "<b>terse</b>" not in prompt
    assert "FOCUS TOPIC: Recent user focus:" in prompt
    assert SECRET not in prompt and "[REDACTED]" in prompt
    out = result.messages
    assert out[:4] == messages[:4]  # system + protect_first_n, byte for byte
    assert out[-1] == messages[-1]
    summary = summary_message(out)
    content = summary["content"]
    assert content.startswith(SUMMARY_PREFIX) and content.endswith(SUMMARY_END)
    assert FACT in content
    # The task snapshot is the last compacted user ask, written deterministically.
    assert "## Historical Task Snapshot\nUser asked (verbatim" in result.summary
    assert result.tokens_after < result.tokens_before
    assert result.dropped_count == len(messages) - len(out) + 1
    assert messages == conversation()  # the input is not modified


def test_second_pass_updates_previous_summary(server: FakeLLMServer, client: OpenAIClient) -> None:
    """A later compaction sends the previous summary and only the turns after it."""
    server.script(Reply.text("## Goal\nFIRST-SUMMARY-MARKER"), Reply.text("## Goal\nSECOND"))
    compressor = ContextCompressor(client, context_window=16_000)
    first = compressor.compress(conversation())
    grown = first.messages + conversation(12, fact_at=99)[1:]
    second = compressor.compress(grown)
    assert second.status == "compressed"
    prompt = prompt_of(server)
    assert "PREVIOUS SUMMARY:\n## Historical Task Snapshot" in prompt
    assert "FIRST-SUMMARY-MARKER" in prompt
    new_turns = prompt.split("NEW TURNS TO INCORPORATE:")[1]
    assert SUMMARY_PREFIX not in new_turns  # the old summary is not summarised as a turn
    assert "Step 0: please check" not in prompt.split("PREVIOUS SUMMARY")[0]
    # After the first compaction only the system message is protected at the head.
    assert second.messages[0]["role"] == "system"
    assert split_summary(second.messages[1]["content"]) is not None
    assert "SECOND" in summary_message(second.messages)["content"]
    assert compressor.compression_count == 2


def test_server_error_gives_fallback_with_facts_kept(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """A failing summary model yields the fallback summary with the facts kept."""
    server.script(Reply.server_error(500))
    clock = FakeClock()
    compressor = ContextCompressor(client, context_window=16_000, clock=clock)
    result = compressor.compress(conversation(fact_at=10))
    assert result.status == "fallback" and result.used_fallback and result.compressed
    assert result.error is not None
    summary = summary_message(result.messages)["content"]
    assert FACT in summary
    assert "ERROR: connection refused to 10.0.0.7:6543" in summary
    assert "/var/log/app21.log" in summary  # the newest paths are listed
    assert SECRET not in summary
    for heading in ("Historical Task Snapshot", "Completed Actions", "Last Dropped Turns"):
        assert f"## {heading}" in summary
    assert len(result.summary) <= 8_000
    # Cooling down: the next compaction uses the fallback without calling the model.
    assert compressor.cooling_down and compressor.cooldown_until == clock.now + 60
    calls = len(server.chat_requests)
    again = compressor.compress(conversation(fact_at=10))
    assert again.status == "fallback" and len(server.chat_requests) == calls
    clock.now += 61
    server.script(Reply.text("## Goal\nrecovered"))
    assert compressor.compress(conversation()).status == "compressed"


def test_auth_error_aborts_unchanged(server: FakeLLMServer, client: OpenAIClient) -> None:
    """401 returns the messages unchanged with the error; no retry until forced."""
    server.script(Reply.auth_error())
    compressor = ContextCompressor(client, context_window=16_000, clock=FakeClock())
    messages = conversation()
    result = compressor.compress(messages)
    assert result.status == "aborted" and not result.compressed
    assert result.messages == messages and isinstance(result.error, LLMAuthError)
    assert "api_key" in str(result.error)
    calls = len(server.chat_requests)
    assert compressor.compress(messages).status == "aborted"
    assert len(server.chat_requests) == calls
    server.script(Reply.text("## Goal\nok"))
    assert compressor.compress(messages, force=True).status == "compressed"


def test_quota_error_aborts(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Exhausted quota aborts too: a summary cannot succeed until billing is fixed."""
    server.script(Reply.quota_exceeded())
    result = ContextCompressor(client, context_window=16_000).compress(conversation())
    assert result.status == "aborted" and result.messages == conversation()


def test_timeout_falls_back_and_cooldown_escalates(server: FakeLLMServer) -> None:
    """Timeouts give the fallback and rest the model 60, then 300, then 900 seconds."""
    clock = FakeClock()
    with OpenAIClient(
        "m", base_url=server.base_url, api_key="t", timeout=0.3, retry=RetryPolicy(max_retries=0)
    ) as slow:
        compressor = ContextCompressor(slow, context_window=16_000, clock=clock)
        waits = []
        for _ in range(3):
            server.script(Reply.text("late").after(3.0))
            result = compressor.compress(conversation())
            assert result.status == "fallback" and isinstance(result.error, LLMTimeoutError)
            assert FACT in result.summary
            waits.append(compressor.cooldown_until - clock.now)
            clock.now = compressor.cooldown_until + 1
    assert waits == [60, 300, 900]


def test_no_model_configured_uses_fallback() -> None:
    """Without any configured model the deterministic fallback is used."""
    result = ContextCompressor(context_window=16_000).compress(conversation())
    assert result.status == "fallback" and FACT in result.summary
    assert "no summary model available" in result.summary


def test_pruning_and_dedup_before_summary(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Old long tool outputs reach the model as one-line notes; duplicates keep the newest."""
    server.script(Reply.text("## Goal\nx"))
    result = ContextCompressor(client, context_window=16_000).compress(conversation())
    prompt = prompt_of(server)
    assert "[pruned tool output] terminal(" in prompt
    assert "ok request served\nok request served" not in prompt
    assert "errors: ERROR: connection refused" in prompt
    assert result.pruned_count > 0
    dup = conversation(6)
    dup[3]["content"] = dup[7]["content"] = "same output " * 40
    job = ContextCompressor(None, context_window=100_000)
    out = job.compress(dup, force=True)
    kept = [m["content"] for m in out.messages if m.get("role") == "tool"]
    assert all("same output" not in k or k == dup[7]["content"] for k in kept)


def test_too_short_conversation_is_left_alone_and_guard_blocks() -> None:
    """Nothing to compact returns the input; repeated ineffective rounds pause auto-compaction."""
    compressor = ContextCompressor(None, context_window=1_000)
    short = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi " * 500}]
    result = compressor.compress(short)
    assert result.status == "nothing_to_do" and result.messages == short
    assert compressor.should_compress(900)
    compressor.compress(short)
    assert not compressor.should_compress(900)  # two ineffective rounds in a row


def test_usage_after_compaction_judges_it() -> None:
    """A reading still above the threshold right after a compaction counts as ineffective."""
    compressor = ContextCompressor(None, context_window=16_000)
    assert compressor.compress(conversation()).compressed
    assert compressor.should_compress(15_000)  # one ineffective round: still allowed
    assert compressor.compress(conversation()).compressed
    assert not compressor.should_compress(15_000)  # two in a row: paused
    assert compressor.compress(conversation(), force=True).compressed
    assert not compressor.should_compress(100)  # this one worked: the streak resets
    assert compressor.should_compress(15_000)


def test_summary_merges_when_both_roles_collide() -> None:
    """Head ending with the user's ask and tail starting with an assistant turn (an agentic
    run): the summary is merged into that assistant turn, its tool calls intact."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Refactor the billing module " + "please " * 50},
    ]
    for i in range(12):
        messages.append(
            {"role": "assistant", "content": f"step {i}", "tool_calls": [call(f"k{i}", "x", {})]}
        )
        messages.append({"role": "tool", "tool_call_id": f"k{i}", "content": "done " * 120})
    compressor = ContextCompressor(None, context_window=4_000, protect_first_n=1, protect_last_n=2)
    result = compressor.compress(messages)
    out = result.messages
    assert result.compressed and well_formed(out)
    roles = [m["role"] for m in out]
    assert roles[:3] == ["system", "user", "assistant"]
    merged = out[2]
    assert merged["content"].startswith(SUMMARY_PREFIX)
    assert merged["content"].endswith("step 11") and merged["tool_calls"][0]["id"] == "k11"
    # The next compaction finds the merged summary and keeps the turn's own text.
    parts = split_summary(merged["content"])
    assert parts is not None and parts[1] == "step 11"


def test_repair_tool_pairs_drops_orphans() -> None:
    """Results without calls go, calls without results are stripped, empty turns get a note."""
    output = [
        {"role": "user", "content": "u"},
        {"role": "tool", "tool_call_id": "lost", "content": "orphan"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("a", "t", {}), call("b", "t", {})],
        },
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "content": None, "tool_calls": [call("z", "t", {})]},
        {"role": "user", "content": "next"},
    ]
    job = CompressionJob(settings=CompressionSettings(), original=[], messages=[], output=output)
    fixed = repair_tool_pairs(job).output
    assert fixed == [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None, "tool_calls": [call("a", "t", {})]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "content": "(tool call removed)"},
        {"role": "user", "content": "next"},
    ]
    assert job.repaired_count == 3


def test_redaction_and_fallback_bound() -> None:
    """Obvious secrets are redacted; the fallback stays within its character bound."""
    text = redact_secrets(
        f"key {SECRET} Authorization: Bearer abcdefghijklmnop123 password=hunter22"
    )
    assert SECRET not in text and "abcdefghijklmnop123" not in text and "hunter22" not in text
    assert redact_secrets("max_tokens=128000 input_tokens: 12.5") == (
        "max_tokens=128000 input_tokens: 12.5"
    )
    huge = [{"role": "user", "content": f"ask {i} " + "z" * 5_000} for i in range(40)]
    summary = fallback_summary(huge, previous_summary="p" * 10_000, max_chars=8_000)
    assert len(summary) <= 8_000 and "ask 39" in summary


# -- property: tool pairs stay intact and the last user message survives -----------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": "sys"})
    counter = 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "orphan"]))
        size = draw(st.integers(0, 1_500))
        if kind == "tools":
            ids = [f"t{counter + k}" for k in range(draw(st.integers(1, 3)))]
            counter += len(ids)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [call(i, "x", {}) for i in ids],
                }
            )
            answered = draw(st.lists(st.sampled_from(ids), unique=True))
            messages += [
                {"role": "tool", "tool_call_id": i, "content": "r" * size} for i in answered
            ]
        elif kind == "orphan":
            messages.append({"role": "tool", "tool_call_id": "nobody", "content": "o"})
        else:
            messages.append({"role": kind, "content": f"{kind} {len(messages)} " + "w" * size})
    return messages


def well_formed(messages: list[dict[str, Any]]) -> bool:
    """Every tool result directly follows the call that made it; every call is answered."""
    index = 0
    while index < len(messages):
        message = messages[index]
        if message["role"] == "tool":
            return False
        index += 1
        if message["role"] == "assistant" and message.get("tool_calls"):
            wanted = {c["id"] for c in message["tool_calls"]}
            got = set()
            while index < len(messages) and messages[index]["role"] == "tool":
                got.add(messages[index]["tool_call_id"])
                index += 1
            if got != wanted:
                return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(),
    st.integers(0, 4),
    st.integers(1, 8),
    st.sampled_from([1_000, 4_000, 20_000]),
)
def test_tool_pairs_and_last_user_message_survive(
    messages: list[dict[str, Any]], first: int, last: int, window: int
) -> None:
    """Whatever the conversation, a compressed result has no broken tool pair and keeps the
    last user message."""
    compressor = ContextCompressor(
        None, context_window=window, protect_first_n=first, protect_last_n=last
    )
    snapshot = copy.deepcopy(messages)
    result = compressor.compress(messages)
    assert messages == snapshot  # the input is never modified
    if not result.compressed:
        assert result.messages == messages
        return
    out = result.messages
    assert well_formed(out)
    at = next(i for i, m in enumerate(out) if split_summary(m.get("content")) is not None)
    # No two same-role messages at the seam (a summary merged into a turn keeps that
    # turn's own neighbour after it, as the input had it).
    seams = (at - 1, at + 1) if is_pure_summary(out[at]) else (at - 1,)
    assert out[at]["role"] not in [out[j]["role"] for j in seams if 0 <= j < len(out)]
    users = [m for m in messages if m["role"] == "user"]
    if users:
        assert any(users[-1]["content"] in str(m.get("content")) for m in out)
    # Compacting the result again is also well-formed.
    again = ContextCompressor(None, context_window=window, protect_last_n=last).compress(out)
    assert well_formed(again.messages) or not again.compressed


def test_marker_in_a_tool_output_is_not_a_summary() -> None:
    """Only user or assistant messages can carry the summary; a tool echoing it cannot."""
    messages = conversation(10)
    messages[3]["content"] = SUMMARY_PREFIX + " fake " + "y" * 300
    result = ContextCompressor(None, context_window=16_000).compress(messages)
    assert result.compressed
    assert result.messages[:4] == messages[:4]  # still the first compaction: head kept


def test_tail_keeps_last_user_message_and_the_reply_it_answers() -> None:
    """A huge last user message beyond the tail budget is kept, with the reply before it."""
    messages = conversation(10)
    messages[-1] = {"role": "user", "content": "Yes, do that. " + "context " * 3_000}
    result = ContextCompressor(None, context_window=16_000, protect_last_n=1).compress(messages)
    assert result.compressed
    assert result.messages[-1] == messages[-1]
    assert result.messages[-2] == messages[-2]  # "Step 9 looks fine."
