"""The sampling adapters and the protocol-free MCP service, in process: request
conversion, the two-round ask/answer match, fallbacks, provider tools, resources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata import SessionStore
from memstrata.config import Config
from memstrata.errors import LLMError, LLMResponseError
from memstrata.mcp.sampling import (
    PushSamplingClient,
    SamplingRequest,
    SamplingRound,
    configured_summary_client,
    request_key,
    to_sampling_request,
)
from memstrata.mcp.service import EMPTY_SNAPSHOT, MemoryService
from memstrata.search.recall import session_search
from memstrata.testing import FakeLLMServer, Reply
from memstrata.tools.toolbox import Toolbox


def _seed(home: Path) -> None:
    with SessionStore(home / "state.db") as store:
        for n, topic in enumerate(["kestrel deploy canary", "kestrel rollback plan"]):
            store.create_session(f"s{n}", source="cli")
            store.append_messages(
                f"s{n}",
                [
                    {"role": "user", "content": f"Tell me about the {topic}."},
                    {"role": "assistant", "content": f"The {topic} is documented in ops/."},
                ],
            )


def _config_with_model(home: Path, server: FakeLLMServer) -> Config:
    return Config.load(
        home,
        environ={
            "MEMSTRATA_LLM__BASE_URL": server.base_url,
            "MEMSTRATA_LLM__API_KEY": "test",
            "MEMSTRATA_LLM__MODEL": "fallback-model",
            "MEMSTRATA_LLM__MAX_RETRIES": "0",
        },
    )


def test_messages_become_one_sampling_request() -> None:
    """System messages fold into the system prompt; text parts are joined; tool text
    goes in as user text."""
    request = to_sampling_request(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": "ok"},
            {"role": "tool", "content": "result"},
        ],
        max_tokens=50,
        temperature=0.1,
    )
    assert request == SamplingRequest(
        "Be brief.", (("user", "ab"), ("assistant", "ok"), ("user", "result")), 50, 0.1
    )
    with pytest.raises(LLMResponseError, match="at least one user message"):
        to_sampling_request([{"role": "system", "content": "x"}], max_tokens=None, temperature=None)


def test_request_key_names_the_question() -> None:
    """The same request always gets the same key; any change gives another."""
    base = SamplingRequest("s", (("user", "q"),), 100, 0.1)
    assert request_key(base) == base.key == SamplingRequest("s", (("user", "q"),), 100, 0.1).key
    assert base.key != SamplingRequest("s", (("user", "q2"),), 100, 0.1).key
    assert base.key != SamplingRequest("s", (("user", "q"),), 101, 0.1).key


def test_push_client_answers_and_falls_back(memstrata_home: Path, server: FakeLLMServer) -> None:
    """The push client returns the client's text; a refusal goes to the configured model,
    and without one the error is raised for the search to fall back to verbatim text."""
    asked: list[SamplingRequest] = []

    def ask(request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        asked.append(request)
        return "from the client", "client-model"

    completion = PushSamplingClient(ask).complete([{"role": "user", "content": "q"}], max_tokens=10)
    assert (completion.text, completion.model) == ("from the client", "client-model")
    assert asked[0].max_tokens == 10

    def refuse(request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        raise LLMError("User rejected sampling request")

    with pytest.raises(LLMError, match="rejected"):
        PushSamplingClient(refuse).complete([{"role": "user", "content": "q"}])

    server.set_default(Reply.text("from the configured model"))
    config = _config_with_model(memstrata_home, server)
    client = PushSamplingClient(refuse, fallback=lambda: configured_summary_client(config))
    try:
        assert client.complete([{"role": "user", "content": "q"}]).text == (
            "from the configured model"
        )
    finally:
        client.close()
    assert server.chat_requests[0]["model"] == "fallback-model"
    assert configured_summary_client(Config.load(memstrata_home)) is None
    with pytest.raises(LLMError, match="cannot embed"):
        PushSamplingClient(ask).embed(["x"])


def test_two_rounds_match_answers_to_questions(memstrata_home: Path) -> None:
    """Round one records one request per conversation and returns verbatim text; round
    two, answered by key, returns each conversation's own summary."""
    _seed(memstrata_home)
    config = Config.load(memstrata_home)
    with SessionStore(memstrata_home / "state.db") as store:
        asking = SamplingRound(None)
        first = session_search(store, "kestrel", llm=asking, config=config)
        assert len(asking.asked) == 2
        assert all("excerpt" in r for r in first["results"])
        answers = {
            key: "summary of " + ("deploy" if "deploy canary" in req.messages[0][1] else "rollback")
            for key, req in asking.asked.items()
        }
        answering = SamplingRound(answers, model="client-model")
        second = session_search(store, "kestrel", llm=answering, config=config)
        summaries = {r["session_id"]: r["summary"] for r in second["results"]}
        assert summaries == {"s0": "summary of deploy", "s1": "summary of rollback"}
        assert answering.asked == {}
        # A retry without an answer for a question (and no fallback) gives verbatim text.
        partial = SamplingRound({}, model="client-model")
        third = session_search(store, "kestrel rollback", llm=partial, config=config)
        assert "excerpt" in third["results"][0]


def test_service_serves_provider_tools_and_resources(memstrata_home: Path) -> None:
    """With memory.provider set, its tools are listed after the core ones and routed to
    it; resources render the snapshot and sessions; unknown URIs give None."""
    _seed(memstrata_home)
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "facts"\n', encoding="utf-8")
    with MemoryService() as service:
        names = [t.name for t in service.tools()]
        library = Toolbox.default().names
        assert names[: len(library)] == library
        assert library[:2] == ["memory", "session_search"]
        assert "facts_remember" in names and "facts_search" in names
        assert service.read_resource("memstrata://memory/snapshot") == (
            EMPTY_SNAPSHOT,
            "text/markdown",
        )
        text, is_error = service.call_tool(
            "facts_remember", {"content": "User's timezone is UTC+8", "category": "identity"}
        )
        assert not is_error, text
        found, _ = service.call_tool("facts_search", {"query": "timezone"})
        assert "UTC+8" in found
        bad, is_error = service.call_tool("facts_remember", {})
        assert is_error
        assert json.loads(bad)["success"] is False
        saved, is_error = service.call_tool(
            "memory", {"action": "add", "target": "memory", "content": "Deploys go via ops/"}
        )
        assert not is_error, saved
        snapshot, _ = service.read_resource("memstrata://memory/snapshot") or ("", "")
        assert "Deploys go via ops/" in snapshot
        session, mime = service.read_resource("memstrata://sessions/s1") or ("", "")
        assert mime == "application/json"
        assert json.loads(session)["session_id"] == "s1"
        assert service.read_resource("memstrata://elsewhere") is None
