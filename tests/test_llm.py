"""The LLM seam: OpenAIClient/AnthropicClient over real HTTP to the fake server, errors,
retries, streaming assembly, embeddings and settings resolution."""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import re
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from openai.types import CompletionUsage

from memstrata.config import Config
from memstrata.errors import (
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMNetworkError,
    LLMNotConfiguredError,
    LLMQuotaError,
    LLMResponseError,
    LLMTimeoutError,
)
from memstrata.llm import (
    AnthropicClient,
    Completion,
    LLMClient,
    OpenAIClient,
    RetryPolicy,
    TokenUsage,
    ToolCall,
    client_for,
    resolve_settings,
)
from memstrata.llm.anthropic_client import to_anthropic
from memstrata.llm.openai_client import usage_from_openai
from memstrata.testing import FakeLLMServer, Reply, hash_embedding

FAST_RETRY = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.05)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "memory",
            "description": "Save a note.",
            "parameters": {"type": "object", "properties": {"content": {"type": "string"}}},
        },
    }
]


# The Anthropic client's tests need its SDK (`pip install 'memstrata[anthropic]'`); the
# translation tests below do not.
needs_anthropic = pytest.mark.skipif(
    importlib.util.find_spec("anthropic") is None,
    reason="the anthropic extra is not installed: pip install 'memstrata[anthropic]'",
)


@pytest.fixture(scope="module")
def shared_client(shared_server: FakeLLMServer) -> Iterator[OpenAIClient]:
    """An OpenAIClient on the fake server with fast retries and a short timeout."""
    with OpenAIClient(
        "fake-chat",
        base_url=shared_server.base_url,
        api_key="test-key",
        timeout=5.0,
        embedding_model="fake-embed",
        retry=FAST_RETRY,
    ) as llm:
        yield llm


@pytest.fixture
def client(server: FakeLLMServer, shared_client: OpenAIClient) -> OpenAIClient:
    """The module's client, used with a freshly reset server."""
    return shared_client


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# -- completions -------------------------------------------------------------------------


def test_complete_returns_text_usage_and_model(server: FakeLLMServer, client: OpenAIClient) -> None:
    """complete() returns the reply text, finish reason, model and token usage."""
    result = client.complete(user("hello"))
    assert result.text == "You said: hello"
    assert result.finish_reason == "stop"
    assert result.model == "fake-chat"
    assert result.tool_calls == ()
    assert result.usage.completion_tokens == 4
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens + 4


def test_request_carries_only_the_options_given(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """temperature and max_tokens are sent when given and omitted otherwise."""
    client.complete(user("a"))
    client.complete(user("b"), temperature=0.2, max_tokens=50)
    plain, tuned = server.chat_requests
    assert plain["model"] == "fake-chat"
    assert plain["messages"] == user("a")
    assert "temperature" not in plain and "max_tokens" not in plain
    assert (tuned["temperature"], tuned["max_tokens"]) == (0.2, 50)
    assert server.requests[0].headers["authorization"] == "Bearer test-key"


def test_max_tokens_field_follows_the_endpoint(server: FakeLLMServer) -> None:
    """OpenAI's own API gets max_completion_tokens; other endpoints get max_tokens."""
    assert OpenAIClient("gpt", api_key="k").max_tokens_param == "max_completion_tokens"
    with OpenAIClient(
        "m", base_url=server.base_url, max_tokens_param="max_completion_tokens"
    ) as llm:
        llm.complete(user("q"), max_tokens=7)
    assert server.chat_requests[0]["max_completion_tokens"] == 7
    assert "max_tokens" not in server.chat_requests[0]


def test_tool_calls_without_streaming(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Tool schemas are sent, and tool calls come back with id, name and argument text."""
    server.script(Reply.tool_call("memory", {"content": "likes tea"}, id="call_1"))
    result = client.complete(user("remember I like tea"), tools=TOOLS)
    assert server.chat_requests[0]["tools"] == TOOLS
    assert result.finish_reason == "tool_calls"
    assert result.tool_calls == (ToolCall("call_1", "memory", '{"content": "likes tea"}'),)
    assert result.to_message() == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "memory", "arguments": '{"content": "likes tea"}'},
            }
        ],
    }


def test_stream_yields_deltas_then_the_assembled_completion(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """stream() yields several text deltas and a final event with the whole reply and usage."""
    server.script("A streamed answer, in pieces.")
    events = list(client.stream(user("go")))
    deltas = [e.text for e in events if e.kind == "text"]
    assert len(deltas) > 1
    assert "".join(deltas) == "A streamed answer, in pieces."
    assert [e.kind for e in events][-1] == "done"
    done = events[-1].completion
    assert done is not None
    assert done.text == "A streamed answer, in pieces."
    assert done.finish_reason == "stop"
    assert done.usage.completion_tokens == 8
    assert server.chat_requests[0]["stream_options"] == {"include_usage": True}


def test_stream_assembles_parallel_tool_calls(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Streamed tool-call fragments are joined per call and emitted as whole ToolCalls."""
    server.script(
        Reply.tool_calls_of(
            [("memory", {"content": "a fairly long note"}), ("search", {"q": "tea"})],
            content="Let me do that.",
        )
    )
    events = list(client.stream(user("go"), tools=TOOLS))
    calls = [e.tool_call for e in events if e.kind == "tool_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls if c] == [
        ("memory", {"content": "a fairly long note"}),
        ("search", {"q": "tea"}),
    ]
    done = events[-1].completion
    assert done is not None
    assert done.text == "Let me do that."
    assert done.finish_reason == "tool_calls"
    assert done.tool_calls == tuple(calls)


def test_complete_with_stream_matches_non_streaming(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """complete(stream=True) assembles the same completion a plain call returns."""
    reply = Reply.tool_call("memory", {"content": "x"}, id="c1", content="ok")
    server.script(reply, reply)
    streamed = client.complete(user("q"), tools=TOOLS, stream=True)
    plain = client.complete(user("q"), tools=TOOLS)
    assert (streamed.text, streamed.tool_calls, streamed.finish_reason) == (
        plain.text,
        plain.tool_calls,
        plain.finish_reason,
    )
    assert server.chat_requests[0]["stream"] is True


def test_cached_tokens_are_reported(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Prompt-cache hits reported by the endpoint reach TokenUsage.cached_tokens."""
    history = [{"role": "system", "content": "You are helpful. " * 40}, *user("one")]
    first = client.complete(history)
    second = client.complete([*history, first.to_message(), *user("two")])
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens > 150
    assert second.usage.cached_tokens < second.usage.prompt_tokens


def test_usage_reads_cache_fields_of_several_providers() -> None:
    """Cached tokens are read from OpenAI, DeepSeek and Anthropic-style usage fields."""
    openai_style = CompletionUsage.model_validate(
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "total_tokens": 105,
            "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 10},
        }
    )
    deepseek = CompletionUsage.model_validate(
        {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
         "prompt_cache_hit_tokens": 80}
    )  # fmt: skip
    gateway = CompletionUsage.model_validate(
        {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
         "cache_read_input_tokens": 70, "cache_creation_input_tokens": 20}
    )  # fmt: skip
    assert usage_from_openai(openai_style) == TokenUsage(100, 5, 64, 10)
    assert usage_from_openai(deepseek) == TokenUsage(100, 5, 80, 0)
    assert usage_from_openai(gateway) == TokenUsage(100, 5, 70, 20)
    assert usage_from_openai(None) == TokenUsage()


def test_token_usage_adds_up() -> None:
    """TokenUsage values add field by field, and total_tokens is prompt plus completion."""
    total = TokenUsage(10, 2, 5, 1) + TokenUsage(20, 3, 7, 0)
    assert total == TokenUsage(30, 5, 12, 1)
    assert total.total_tokens == 35


def test_clients_satisfy_the_protocol(client: OpenAIClient) -> None:
    """OpenAIClient implements the LLMClient protocol."""
    assert isinstance(client, LLMClient)


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error", "words"),
    [
        (Reply.auth_error(), LLMAuthError, "api_key"),
        (Reply.permission_denied(), LLMAuthError, "HTTP 403"),
        (Reply.quota_exceeded(), LLMQuotaError, "retrying will not help"),
        (Reply.error(402, "Payment required"), LLMQuotaError, "quota"),
        (Reply.error(404, "model not found"), LLMNotConfiguredError, "llm.model"),
        (Reply.error(400, "context_length_exceeded"), LLMResponseError, "compress"),
        (Reply.malformed(), LLMResponseError, "not valid JSON"),
        (Reply.empty(), LLMResponseError, "no choices"),
    ],
)
def test_errors_map_to_memstrata_errors_without_retry(
    server: FakeLLMServer,
    client: OpenAIClient,
    reply: Reply,
    error: type[LLMError],
    words: str,
) -> None:
    """Auth, quota, not-found, bad-request and malformed replies raise at once, typed."""
    server.script(reply)
    with pytest.raises(error, match=re.escape(words)) as caught:
        client.complete(user("q"))
    assert server.base_url in str(caught.value)
    assert len(server.chat_requests) == 1


def test_server_errors_are_retried_then_succeed(
    server: FakeLLMServer, client: OpenAIClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Two 500s then a success: the call succeeds on the third request, retries logged."""
    server.script(Reply.server_error(), Reply.server_error(502), "finally")
    with caplog.at_level(logging.WARNING, logger="memstrata.llm"):
        assert client.complete(user("q")).text == "finally"
    assert len(server.chat_requests) == 3
    assert [r.message.split(";")[-1].split(" in ")[0] for r in caplog.records] == [
        " retry 1 of 2",
        " retry 2 of 2",
    ]


def test_retries_are_bounded(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Persistent 500s stop after max_retries + 1 attempts with an error saying so."""
    server.script(*[Reply.server_error()] * 5)
    with pytest.raises(LLMResponseError, match="gave up after 3 attempts"):
        client.complete(user("q"))
    assert len(server.chat_requests) == 3


def test_unavailable_maps_to_network_error(server: FakeLLMServer, client: OpenAIClient) -> None:
    """503 that persists becomes LLMNetworkError after the retries."""
    server.script(*[Reply.server_error(503)] * 3)
    with pytest.raises(LLMNetworkError, match="unavailable"):
        client.complete(user("q"))
    assert len(server.chat_requests) == 3


def test_rate_limit_is_retried_but_quota_is_not(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """A 429 rate limit is retried (honouring Retry-After); insufficient_quota is not."""
    server.script(Reply.rate_limited(retry_after=0.01), "after the pause")
    assert client.complete(user("q")).text == "after the pause"
    assert len(server.chat_requests) == 2
    server.script(*[Reply.rate_limited()] * 3)
    with pytest.raises(LLMQuotaError, match="rate limiting"):
        client.complete(user("q"))
    assert len(server.chat_requests) == 5


def test_slow_reply_times_out(server: FakeLLMServer) -> None:
    """A reply slower than the timeout raises LLMTimeoutError naming the setting."""
    server.script(Reply.text("late").after(10))
    with (
        OpenAIClient("m", base_url=server.base_url, max_retries=0) as llm,
        pytest.raises(LLMTimeoutError, match=r"llm\.timeout"),
    ):
        llm.complete(user("q"), timeout=0.2)


def test_timeout_is_retried(server: FakeLLMServer, client: OpenAIClient) -> None:
    """A timed-out attempt is retried, and the next, fast attempt succeeds."""
    server.script(Reply.text("late").after(10), "quick")
    assert client.complete(user("q"), timeout=0.3).text == "quick"
    assert len(server.chat_requests) == 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_a_network_error() -> None:
    """Nothing listening at the base URL raises LLMNetworkError naming the URL."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    with (
        OpenAIClient("m", base_url=url, retry=FAST_RETRY) as llm,
        pytest.raises(LLMNetworkError, match="Cannot reach") as caught,
    ):
        llm.complete(user("q"))
    assert url in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)


def test_dropped_connection_is_retried(server: FakeLLMServer, client: OpenAIClient) -> None:
    """A connection closed without an answer is retried like any network failure."""
    server.script(Reply.disconnected(), "second try")
    assert client.complete(user("q")).text == "second try"
    assert len(server.chat_requests) == 2


def test_stream_failure_before_output_is_retried(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """A stream that fails before its first chunk is retried."""
    server.script(Reply.server_error(), "streamed")
    assert client.complete(user("q"), stream=True).text == "streamed"
    assert len(server.chat_requests) == 2


def test_stream_cut_after_output_raises_without_retry(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """A stream cut after text was yielded raises LLMNetworkError and is not repeated."""
    server.script(Reply(content="partial output that never ends", cut_stream_after=4))
    received: list[str] = []
    with pytest.raises(LLMNetworkError):
        for event in client.stream(user("q")):
            received.append(event.text)
    assert "".join(received) == "partial outp"
    assert len(server.chat_requests) == 1


def test_stream_error_event_is_a_response_error(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """An error object inside a 200 stream raises LLMResponseError with its message."""
    body = b'data: {"error": {"message": "overloaded mid-stream", "type": "server_error"}}\n\n'
    server.script(Reply(raw_body=body, headers={"Content-Type": "text/event-stream"}))
    with pytest.raises(LLMResponseError, match="overloaded mid-stream"):
        client.complete(user("q"), stream=True)


def test_retry_policy_backoff_grows_with_jitter_and_caps() -> None:
    """Each retry waits between half and all of base*2^n, capped; Retry-After wins, capped."""
    policy = RetryPolicy(max_retries=5, base_delay=0.5, max_delay=4.0)
    rng = random.Random(7)
    for retry, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 4.0]):
        for _ in range(50):
            assert ceiling / 2 <= policy.delay(retry, rng=rng) <= ceiling
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=60.0) == 4.0


# -- concurrency -------------------------------------------------------------------------


def test_client_is_safe_to_share_between_threads(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """One client serves concurrent calls; the server sees them in flight together."""
    barrier = threading.Barrier(4, timeout=10)

    def together(body: dict[str, Any]) -> str:
        barrier.wait()
        return "reply to " + body["messages"][-1]["content"]

    server.on(lambda body: True, together)
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(lambda i: client.complete(user(str(i))).text, range(8)))
    assert texts == [f"reply to {i}" for i in range(8)]
    assert server.max_in_flight == 4


# -- embeddings --------------------------------------------------------------------------


def test_embed_returns_one_deterministic_vector_per_text(
    server: FakeLLMServer, client: OpenAIClient
) -> None:
    """embed() returns vectors in input order, equal for equal texts, as the server made them."""
    vectors = client.embed(["alpha", "beta", "alpha"])
    assert len(vectors) == 3
    assert vectors[0] == vectors[2] != vectors[1]
    assert vectors[1] == pytest.approx(hash_embedding("beta", 64))
    assert server.requests[-1].body["model"] == "fake-embed"
    assert server.requests[-1].body["encoding_format"] == "float"


def test_embed_of_nothing_makes_no_request(server: FakeLLMServer, client: OpenAIClient) -> None:
    """embed([]) returns [] without calling the endpoint."""
    assert client.embed([]) == []
    assert server.requests == []


def test_embed_needs_an_embedding_model(server: FakeLLMServer) -> None:
    """Without embedding_model, embed() says which setting to set."""
    with (
        OpenAIClient("m", base_url=server.base_url) as llm,
        pytest.raises(LLMNotConfiguredError, match=r"llm\.embedding_model"),
    ):
        llm.embed(["x"])


def test_embed_errors_are_mapped(server: FakeLLMServer, client: OpenAIClient) -> None:
    """Embedding failures map to memstrata errors and retryable ones are retried."""
    server.script(Reply.server_error(), endpoint="embeddings")
    assert len(client.embed(["x"])) == 1
    server.script(Reply.auth_error(), endpoint="embeddings")
    with pytest.raises(LLMAuthError):
        client.embed(["x"])


# -- settings ----------------------------------------------------------------------------


def write_config(home: Path, text: str) -> Config:
    (home / "config.toml").write_text(text, encoding="utf-8")
    return Config.load(home, environ={})


def test_nothing_configured_names_the_settings(memstrata_home: Path) -> None:
    """With no model anywhere, LLMNotConfiguredError says exactly what to set."""
    with pytest.raises(LLMNotConfiguredError) as caught:
        client_for("summary", environ={})
    message = str(caught.value)
    for hint in (
        "memstrata config set llm.model",
        "llm.summary_model",
        "MEMSTRATA_MODEL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
    ):
        assert hint in message


def test_conventional_environment_variables_are_enough(memstrata_home: Path) -> None:
    """OPENAI_BASE_URL, OPENAI_API_KEY and MEMSTRATA_MODEL alone configure a client."""
    env = {"OPENAI_BASE_URL": "http://h/v1", "OPENAI_API_KEY": "k", "MEMSTRATA_MODEL": "m"}
    settings = resolve_settings("main", environ=env)
    assert (settings.base_url, settings.api_key, settings.model) == ("http://h/v1", "k", "m")


def test_precedence_args_then_memstrata_env_then_file_then_openai_env(
    memstrata_home: Path,
) -> None:
    """Explicit args beat MEMSTRATA_LLM__*, which beats config.toml, which beats OPENAI_*."""
    (memstrata_home / "config.toml").write_text(
        '[llm]\nmodel = "from-file"\nbase_url = "http://file/v1"\n', encoding="utf-8"
    )
    env = {
        "OPENAI_BASE_URL": "http://openai-env/v1",
        "OPENAI_API_KEY": "env-key",
        "MEMSTRATA_MODEL": "from-memstrata-model",
    }
    settings = resolve_settings(environ=env)
    assert (settings.model, settings.base_url) == ("from-file", "http://file/v1")
    assert settings.api_key == "env-key"  # the file leaves it empty, so OPENAI_* fills it
    env["MEMSTRATA_LLM__MODEL"] = "from-memstrata-env"
    assert resolve_settings(environ=env).model == "from-memstrata-env"
    assert resolve_settings(environ=env, model="explicit").model == "explicit"


def test_task_models_fall_back_to_the_main_model(memstrata_home: Path) -> None:
    """A task uses its own model when set and the main model otherwise."""
    config = write_config(memstrata_home, '[llm]\nmodel = "big"\nsummary_model = "small"\n')
    assert resolve_settings("summary", config).model == "small"
    assert resolve_settings("compression", config).model == "big"
    assert resolve_settings("curator", config).model == "big"
    assert resolve_settings("main", config).model == "big"


def test_unknown_task_and_provider_are_refused(memstrata_home: Path) -> None:
    """An unknown task or provider raises ConfigError listing the valid ones."""
    config = write_config(memstrata_home, '[llm]\nmodel = "m"\n')
    with pytest.raises(ConfigError, match="main, summary, compression, curator"):
        resolve_settings("chat", config)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="openai, anthropic"):
        resolve_settings("main", config, provider="cohere")


def test_settings_repr_hides_the_key(memstrata_home: Path) -> None:
    """The api key never appears in the settings' repr."""
    settings = resolve_settings(environ={"MEMSTRATA_MODEL": "m", "OPENAI_API_KEY": "sk-secret"})
    assert "sk-secret" not in repr(settings)


def test_client_for_talks_to_the_configured_endpoint(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """client_for builds a working client from config.toml plus the environment."""
    config = write_config(
        memstrata_home,
        f'[llm]\nbase_url = "{server.base_url}"\nmodel = "main-m"\ncurator_model = "cur-m"\n'
        'embedding_model = "emb"\ntimeout = 5.0\n',
    )
    llm = client_for("curator", config)
    try:
        assert isinstance(llm, OpenAIClient)
        assert llm.complete(user("hi")).text == "You said: hi"
        assert llm.embed(["x"]) == [pytest.approx(hash_embedding("x", 64))]
    finally:
        llm.close()
    assert server.chat_requests[0]["model"] == "cur-m"


def test_openai_without_key_or_url_is_not_configured() -> None:
    """The default OpenAI endpoint without a key is refused with the variable to set."""
    with pytest.raises(LLMNotConfiguredError, match="OPENAI_API_KEY"):
        OpenAIClient("gpt-test")


def test_local_endpoint_needs_no_key(server: FakeLLMServer) -> None:
    """A local endpoint works with no key (a placeholder is sent)."""
    with OpenAIClient("m", base_url=server.base_url) as llm:
        assert llm.complete(user("x")).text == "You said: x"


# -- Anthropic ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_claude(shared_server: FakeLLMServer) -> Iterator[AnthropicClient]:
    """An AnthropicClient on the fake server's /v1/messages."""
    root = shared_server.base_url.removesuffix("/v1")
    with AnthropicClient("claude-test", base_url=root, api_key="k", retry=FAST_RETRY) as llm:
        yield llm


@pytest.fixture
def claude(server: FakeLLMServer, shared_claude: AnthropicClient) -> AnthropicClient:
    """The module's Anthropic client, used with a freshly reset server."""
    return shared_claude


def test_openai_messages_become_anthropic_turns() -> None:
    """System text is split out, tool calls become tool_use and results one user turn."""
    system, turns = to_anthropic(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "save two notes"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "function": {"name": "memory", "arguments": '{"n": 1}'}},
                    {"id": "b", "function": {"name": "memory", "arguments": "not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {"role": "tool", "tool_call_id": "b", "content": "ok"},
        ]
    )
    assert system == "Be brief."
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][0]["input"] == {"n": 1}
    assert turns[1]["content"][1]["input"] == {"_raw_arguments": "not json"}
    assert [b["tool_use_id"] for b in turns[2]["content"]] == ["a", "b"]


@needs_anthropic
def test_anthropic_complete_and_tools(server: FakeLLMServer, claude: AnthropicClient) -> None:
    """AnthropicClient sends Messages API requests and returns OpenAI-shaped results."""
    server.script(Reply.tool_call("memory", {"content": "tea"}, id="tu_1", content="Saving."))
    result = claude.complete(
        [{"role": "system", "content": "sys"}, *user("remember tea")], tools=TOOLS
    )
    request = server.chat_requests[0]
    assert server.requests[0].path == "/v1/messages"
    assert request["system"] == "sys"
    assert request["max_tokens"] == 4096
    assert request["tools"][0]["input_schema"]["type"] == "object"
    assert result.text == "Saving."
    assert result.tool_calls == (ToolCall("tu_1", "memory", '{"content": "tea"}'),)
    assert result.finish_reason == "tool_calls"
    assert result.usage.prompt_tokens > 0


@needs_anthropic
def test_anthropic_stream(server: FakeLLMServer, claude: AnthropicClient) -> None:
    """AnthropicClient.stream assembles text deltas and tool_use JSON fragments."""
    server.script(Reply.tool_call("memory", {"content": "a long note"}, content="On it."))
    events = list(claude.stream(user("go")))
    assert "".join(e.text for e in events if e.kind == "text") == "On it."
    done = events[-1].completion
    assert isinstance(done, Completion)
    assert json.loads(done.tool_calls[0].arguments) == {"content": "a long note"}
    assert done.finish_reason == "tool_calls"
    assert done.usage.completion_tokens > 0


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply.auth_error(), LLMAuthError),
        (Reply.quota_exceeded(), LLMQuotaError),
        (Reply.error(400, "prompt is too long", type="invalid_request_error"), LLMResponseError),
    ],
)
@needs_anthropic
def test_anthropic_errors_are_mapped(
    server: FakeLLMServer, claude: AnthropicClient, reply: Reply, error: type[LLMError]
) -> None:
    """Anthropic auth, billing and request errors map to the same memstrata errors."""
    server.script(reply)
    with pytest.raises(error):
        claude.complete(user("q"))
    assert len(server.chat_requests) == 1


@needs_anthropic
def test_anthropic_retries_overload(server: FakeLLMServer, claude: AnthropicClient) -> None:
    """Anthropic's 529 overloaded is retried like any server error."""
    server.script(Reply.server_error(529), "recovered")
    assert claude.complete(user("q")).text == "recovered"


@needs_anthropic
def test_anthropic_has_no_embeddings(claude: AnthropicClient) -> None:
    """AnthropicClient.embed explains that embeddings need an OpenAI-compatible endpoint."""
    with pytest.raises(LLMNotConfiguredError, match="OpenAI-compatible"):
        claude.embed(["x"])


@needs_anthropic
def test_client_for_builds_anthropic(server: FakeLLMServer, memstrata_home: Path) -> None:
    """provider = "anthropic" with ANTHROPIC_* variables builds a working AnthropicClient."""
    env = {
        "MEMSTRATA_LLM__PROVIDER": "anthropic",
        "MEMSTRATA_MODEL": "claude-x",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": server.base_url.removesuffix("/v1"),
        "OPENAI_API_KEY": "must-not-be-used",
    }
    llm = client_for("main", environ=env)
    try:
        assert isinstance(llm, AnthropicClient)
        assert llm.complete(user("hi")).text == "You said: hi"
    finally:
        llm.close()
