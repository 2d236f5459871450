"""The fake OpenAI-compatible server: wire format, scripting, rules, failures, recording."""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from memstrata.testing import (
    FakeLLMServer,
    Reply,
    bag_of_words_embedding,
    common_prefix_length,
    cosine,
    hash_embedding,
)


@pytest.fixture(scope="module")
def shared_sdk(shared_server: FakeLLMServer) -> Iterator[openai.OpenAI]:
    """The real openai SDK pointed at the fake server, without SDK retries."""
    client = openai.OpenAI(base_url=shared_server.base_url, api_key="test-key", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def sdk(server: FakeLLMServer, shared_sdk: openai.OpenAI) -> openai.OpenAI:
    """The module's SDK client, used with a freshly reset server."""
    return shared_sdk


def post(server: FakeLLMServer, path: str, body: Any, headers: dict[str, str] | None = None):
    """POST JSON with urllib; return (status, headers, raw bytes)."""
    request = urllib.request.Request(
        server.base_url.removesuffix("/v1") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def sse_data(raw: bytes) -> list[str]:
    return [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]


def test_base_url_points_at_loopback(server: FakeLLMServer) -> None:
    """The server listens on 127.0.0.1 with an OS-chosen port and a /v1 base URL."""
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert server.port > 0


def test_base_url_needs_a_running_server() -> None:
    """Asking a stopped server for its URL explains how to start it."""
    with pytest.raises(RuntimeError, match="context manager"):
        _ = FakeLLMServer().base_url


def test_default_reply_echoes_the_last_user_message(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Without script or rules the reply is a deterministic echo of the last user message."""
    messages = [*user("first"), {"role": "assistant", "content": "x"}, *user("second")]
    for _ in range(2):
        response = sdk.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert response.choices[0].message.content == "You said: second"
        assert response.choices[0].finish_reason == "stop"
        assert response.model == "m"


def test_script_is_consumed_in_order_then_default(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Scripted replies answer requests first in first out, then the default applies."""
    server.script("one", Reply.text("two"))
    assert server.pending_script() == 2
    texts = [
        sdk.chat.completions.create(model="m", messages=user("q")).choices[0].message.content
        for _ in range(3)
    ]
    assert texts == ["one", "two", "You said: q"]
    assert server.pending_script() == 0


def test_rules_match_regex_callable_and_limit_uses(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Rules fire in the order added, by regex or predicate, and `times` caps their uses."""
    server.on(r"weather", "sunny", times=1)
    server.on(lambda body: body.get("temperature") == 0.5, Reply.text("warm"))
    server.on(r"^count", lambda body: f"{len(body['messages'])} messages")

    def ask(text: str, **kwargs: Any) -> str | None:
        response = sdk.chat.completions.create(model="m", messages=user(text), **kwargs)
        return response.choices[0].message.content

    assert ask("what is the weather?") == "sunny"
    assert ask("what is the weather?") == "You said: what is the weather?"
    assert ask("anything", temperature=0.5) == "warm"
    assert ask("count them") == "1 messages"


def test_set_default_replaces_the_echo(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """set_default takes a reply or a callable of the request body."""
    server.set_default(lambda body: Reply.text(body["model"].upper()))
    response = sdk.chat.completions.create(model="abc", messages=user("q"))
    assert response.choices[0].message.content == "ABC"
    server.set_default("fixed")
    response = sdk.chat.completions.create(model="abc", messages=user("q"))
    assert response.choices[0].message.content == "fixed"


def test_requests_are_recorded_with_path_headers_and_body(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Every request is recorded with its path, lower-cased headers and parsed body."""
    sdk.chat.completions.create(model="m", messages=user("hello"), temperature=0.1)
    sdk.embeddings.create(model="e", input="text")
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.body["messages"] == user("hello")
    assert first.body["temperature"] == 0.1
    assert json.loads(first.raw) == first.body
    assert second.path == "/v1/embeddings"
    assert server.chat_requests == [first.body]


def test_tool_calls_non_streaming(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """A tool-call reply arrives as OpenAI tool_calls with finish_reason tool_calls."""
    server.script(Reply.tool_calls_of([("memory", {"action": "add"}), ("search", '{"q": "tea"}')]))
    response = sdk.chat.completions.create(model="m", messages=user("remember"))
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("memory", {"action": "add"}),
        ("search", {"q": "tea"}),
    ]
    assert len({c.id for c in calls}) == 2


def test_streaming_is_sse_with_done_and_optional_usage(server: FakeLLMServer) -> None:
    """Streams are `data:` lines ending in [DONE]; a usage chunk only with include_usage."""
    body = {"model": "m", "messages": user("hi"), "stream": True}
    status, headers, raw = post(server, "/v1/chat/completions", body)
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    data = sse_data(raw)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "You said: hi"
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"

    body["stream_options"] = {"include_usage": True}
    chunks = [json.loads(d) for d in sse_data(post(server, "/v1/chat/completions", body)[2])[:-1]]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_streamed_tool_call_arguments_arrive_in_fragments(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Streamed tool-call arguments come in several fragments that join to the JSON."""
    arguments = {"action": "add", "content": "the user likes green tea"}
    server.script(Reply.tool_call("memory", arguments))
    fragments: list[str] = []
    names: list[str] = []
    stream = sdk.chat.completions.create(model="m", messages=user("x"), stream=True)
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.function and call.function.name:
                names.append(call.function.name)
            if call.function and call.function.arguments:
                fragments.append(call.function.arguments)
    assert names == ["memory"]
    assert len(fragments) > 1
    assert json.loads("".join(fragments)) == arguments


def test_error_replies_have_openai_error_bodies(server: FakeLLMServer) -> None:
    """Error replies send their status, headers and an OpenAI-style error object."""
    server.script(Reply.quota_exceeded(), Reply.rate_limited(retry_after=2))
    status, _, raw = post(server, "/v1/chat/completions", {"messages": user("x")})
    assert status == 429
    assert json.loads(raw)["error"]["code"] == "insufficient_quota"
    status, headers, raw = post(server, "/v1/chat/completions", {"messages": user("x")})
    assert status == 429
    assert headers["retry-after"] == "2"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"


def test_sdk_sees_scripted_errors_as_its_exceptions(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """The real SDK turns scripted failures into its own exception classes."""
    server.script(Reply.auth_error(), Reply.server_error(503), Reply.disconnected())
    with pytest.raises(openai.AuthenticationError):
        sdk.chat.completions.create(model="m", messages=user("x"))
    with pytest.raises(openai.InternalServerError):
        sdk.chat.completions.create(model="m", messages=user("x"))
    with pytest.raises(openai.APIConnectionError):
        sdk.chat.completions.create(model="m", messages=user("x"))


def test_api_key_is_enforced_when_set() -> None:
    """With api_key set, a request without the matching bearer token gets 401."""
    with FakeLLMServer(api_key="secret") as fake:
        status, _, raw = post(fake, "/v1/chat/completions", {"messages": user("x")})
        assert status == 401
        assert json.loads(raw)["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer secret"}
        status, _, _ = post(fake, "/v1/chat/completions", {"messages": user("x")}, auth)
        assert status == 200


def test_bad_request_bodies_get_400(server: FakeLLMServer) -> None:
    """A chat body without messages, or embeddings without input, is a 400 with a reason."""
    status, _, raw = post(server, "/v1/chat/completions", {"model": "m"})
    assert status == 400
    assert "messages" in json.loads(raw)["error"]["message"]
    status, _, raw = post(server, "/v1/embeddings", {"model": "e", "input": []})
    assert status == 400
    assert "input" in json.loads(raw)["error"]["message"]


def test_models_and_unknown_paths(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """GET /v1/models lists the server's model; unknown paths get 404."""
    assert [m.id for m in sdk.models.list()] == ["fake-model"]
    status, _, _ = post(server, "/v1/nothing", {})
    assert status == 404


def test_usage_is_estimated_and_cached_prefix_counted(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Usage is chars/4; cached_tokens counts the prefix shared with an earlier request."""
    history = [{"role": "system", "content": "S" * 400}, *user("first question")]
    first = sdk.chat.completions.create(model="m", messages=history)  # type: ignore[arg-type]
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    prompt_chars = len(json.dumps(history))
    assert first.usage.prompt_tokens == -(-prompt_chars // 4)
    assert first.usage.completion_tokens == -(-len("You said: first question") // 4)

    longer = [*history, {"role": "assistant", "content": "ok"}, *user("next")]
    second = sdk.chat.completions.create(model="m", messages=longer)  # type: ignore[arg-type]
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    # Everything but the closing bracket of the first request's messages is shared.
    assert cached == (prompt_chars - 1) // 4


def test_common_prefix_length_counts_the_shared_start() -> None:
    """common_prefix_length is the length of the longest shared start of two texts."""
    assert common_prefix_length("abcdef", "abcxyz") == 3
    assert common_prefix_length("abc", "abcdef") == 3
    assert common_prefix_length("abc", "abc") == 3
    assert common_prefix_length("xbc", "abc") == 0
    assert common_prefix_length("", "abc") == 0
    long = "p" * 10_000
    assert common_prefix_length(long + "a", long + "b") == 10_000


def test_usage_override(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """A reply may dictate the usage numbers the server reports."""
    server.script(Reply(content="x", usage={"prompt_tokens": 1000, "cached_tokens": 900}))
    usage = sdk.chat.completions.create(model="m", messages=user("q")).usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (1000, 900)


def test_embeddings_are_deterministic_unit_vectors(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """Embeddings depend only on the text, are normalised and honour `dimensions`."""
    first = sdk.embeddings.create(model="e", input=["alpha", "beta"])
    again = sdk.embeddings.create(model="e", input="alpha")
    assert first.data[0].embedding == again.data[0].embedding
    assert first.data[0].embedding != first.data[1].embedding
    # The SDK may ask for base64 (float32) on the wire, so compare at float32 precision.
    assert first.data[0].embedding == pytest.approx(hash_embedding("alpha", 64), abs=1e-6)
    assert sum(x * x for x in first.data[1].embedding) == pytest.approx(1.0)
    small = sdk.embeddings.create(model="e", input="alpha", dimensions=8)
    assert len(small.data[0].embedding) == 8


def test_embeddings_base64_encoding(server: FakeLLMServer) -> None:
    """encoding_format=base64 returns little-endian float32 of the same vector."""
    body = {"model": "e", "input": "alpha", "encoding_format": "base64", "dimensions": 16}
    _, _, raw = post(server, "/v1/embeddings", body)
    packed = base64.b64decode(json.loads(raw)["data"][0]["embedding"])
    assert list(struct.unpack("<16f", packed)) == pytest.approx(hash_embedding("alpha", 16))


def test_bag_of_words_mode_makes_overlapping_texts_similar() -> None:
    """In bow mode texts sharing words (or CJK bigrams) are closer than unrelated ones."""
    with FakeLLMServer(embedding_mode="bow", embedding_dimensions=256) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
        texts = ["the user likes green tea", "green tea every morning", "deploy the server"]
        vectors = [d.embedding for d in client.embeddings.create(model="e", input=texts).data]
        client.close()
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2
    assert vectors[0] == pytest.approx(bag_of_words_embedding(texts[0], 256))
    cjk = [bag_of_words_embedding(t, 256) for t in ("我喜欢喝绿茶", "绿茶很好喝", "部署服务器")]
    assert cosine(cjk[0], cjk[1]) > cosine(cjk[0], cjk[2])


def test_scripted_embedding_failures(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """Embedding requests can be scripted to fail without touching chat replies."""
    server.script(Reply.server_error(), endpoint="embeddings")
    with pytest.raises(openai.InternalServerError):
        sdk.embeddings.create(model="e", input="x")
    assert len(sdk.embeddings.create(model="e", input="x").data) == 1
    assert sdk.chat.completions.create(model="m", messages=user("q")).choices


def test_in_flight_counter_sees_concurrent_requests(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """max_in_flight reports the most chat requests answered at the same time."""
    barrier = threading.Barrier(3, timeout=10)

    def meet(body: dict[str, Any]) -> str:
        barrier.wait()  # three requests are inside the server together
        return "met"

    server.on(lambda body: True, meet)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [
            pool.submit(sdk.chat.completions.create, model="m", messages=user(str(i)))
            for i in range(6)
        ]
        texts = [f.result().choices[0].message.content for f in futures]
    assert texts == ["met"] * 6
    assert server.max_in_flight == 3
    # A handler leaves the count just after its last byte, possibly after the client read it.
    deadline = threading.Event()
    for _ in range(500):
        if server.in_flight == 0:
            break
        deadline.wait(0.01)
    assert server.in_flight == 0


def test_rule_times_hold_under_concurrency(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """A rule limited to N uses fires exactly N times when requests race."""
    server.on(r".", "limited", times=3)
    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(
            pool.map(
                lambda i: (
                    sdk.chat.completions.create(model="m", messages=user(f"q{i}"))
                    .choices[0]
                    .message.content
                ),
                range(10),
            )
        )
    assert replies.count("limited") == 3


def test_failing_rule_answers_500_and_is_kept(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """An exception in a rule becomes a 500 naming it, and is listed in server.errors."""

    def broken(body: dict[str, Any]) -> str:
        raise KeyError("no such field")

    server.on(r".", broken)
    with pytest.raises(openai.InternalServerError, match="no such field"):
        sdk.chat.completions.create(model="m", messages=user("q"))
    assert isinstance(server.errors[0], KeyError)


def test_cut_stream_breaks_the_connection_mid_stream(
    server: FakeLLMServer, sdk: openai.OpenAI
) -> None:
    """cut_stream_after drops the connection after N chunks, like a crashed server."""
    server.script(Reply(content="a long reply that will not finish", cut_stream_after=3))
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in sdk.chat.completions.create(model="m", messages=user("x"), stream=True):
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "a long r"


def test_stop_does_not_wait_for_pending_delays() -> None:
    """Stopping the server ends a request sleeping through a long delay."""
    fake = FakeLLMServer().start()
    fake.script(Reply.text("late").after(120))
    client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=60)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            client.chat.completions.create(model="m", messages=user("x"))
        except openai.APIError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    while fake.in_flight == 0:
        threading.Event().wait(0.01)
    fake.stop()
    worker.join(timeout=30)
    client.close()
    assert not worker.is_alive()
    assert isinstance(outcome[0], openai.APIConnectionError)


def test_reset_forgets_requests_and_replies(server: FakeLLMServer, sdk: openai.OpenAI) -> None:
    """reset() clears recorded requests, queued replies, rules and the default."""
    server.script("queued")
    server.on(r".", "rule")
    server.set_default("default")
    sdk.models.list()
    server.reset()
    assert server.requests == []
    assert server.pending_script() == 0
    reply = sdk.chat.completions.create(model="m", messages=user("q")).choices[0].message
    assert reply.content == "You said: q"


def test_anthropic_messages_endpoint(server: FakeLLMServer) -> None:
    """POST /v1/messages answers in Anthropic's shape, text and tool_use blocks."""
    server.script(Reply.tool_call("memory", {"a": 1}, content="calling"))
    body = {"model": "claude", "max_tokens": 10, "messages": user("hi")}
    status, _, raw = post(server, "/v1/messages", body)
    message = json.loads(raw)
    assert status == 200
    assert message["type"] == "message"
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0] == {"type": "text", "text": "calling"}
    assert message["content"][1]["input"] == {"a": 1}
    server.script(Reply.auth_error())
    status, _, raw = post(server, "/v1/messages", body)
    assert status == 401
    assert json.loads(raw)["error"]["type"] == "authentication_error"


def test_importable_without_pytest_or_sdks() -> None:
    """memstrata.testing and memstrata.llm import without loading pytest or any model SDK."""
    code = (
        "import sys, memstrata.llm, memstrata.testing as t; "
        "loaded = [m for m in ('pytest', 'openai', 'anthropic') if m in sys.modules]; "
        "assert not loaded, loaded; "
        "s = t.FakeLLMServer().start(); print(s.base_url); s.stop()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("http://127.0.0.1:")


def test_abandoned_request_leaves_the_in_flight_count(server: FakeLLMServer) -> None:
    """When a client times out during a delay, the server stops counting that request."""
    server.script(Reply.text("late").after(60))
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=user("x"))
    client.close()
    for _ in range(500):
        if server.in_flight == 0:
            break
        threading.Event().wait(0.01)
    assert server.in_flight == 0


def python_blocks(doc: str) -> list[str]:
    text = (Path(__file__).resolve().parent.parent / "docs" / doc).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_testing_doc_example_runs() -> None:
    """The runnable example in docs/testing.md passes against the fake server."""
    example = next(
        block
        for block in python_blocks("testing.md")
        if "def test_" in block and "fake_llm" in block
    )
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)
    tests = [name for name in namespace if name.startswith("test_")]
    assert len(tests) == 2
    for name in tests:
        with FakeLLMServer() as fake:
            namespace[name](fake)


def test_llm_doc_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The fake-server example in docs/llm.md prints what its comments say."""
    example = next(block for block in python_blocks("llm.md") if "FakeLLMServer" in block)
    exec(compile(example, "docs/llm.md", "exec"), {})
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("Hello! TokenUsage(prompt_tokens=9,")
    assert second == "2"
