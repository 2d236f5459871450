"""The doubles memstrata.testing ships: a scripted client, a recording provider, a home."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.errors import LLMAuthError, LLMNetworkError, LLMQuotaError, LLMResponseError
from memstrata.llm.types import LLMClient
from memstrata.testing import (
    RecordingProvider,
    Reply,
    ScriptedClient,
    TemporaryHome,
    hash_embedding,
    tool_schema,
)
from memstrata.tools.toolbox import Toolbox


def test_scripted_client_answers_in_order_and_records_requests() -> None:
    client: LLMClient = ScriptedClient(
        [Reply.tool_call("memory", {"action": "read"}, id="c1"), "第二个回答"], model="m"
    )
    assert isinstance(client, ScriptedClient)
    first = client.complete([{"role": "user", "content": "read"}], tools=[tool_schema("memory")])
    assert first.finish_reason == "tool_calls" and first.model == "m"
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("c1", "memory", '{"action": "read"}')
    ]
    events = list(client.stream([{"role": "user", "content": "again"}], temperature=0.2))
    assert "".join(e.text for e in events if e.kind == "text") == "第二个回答"
    assert events[-1].kind == "done" and events[-1].completion is not None
    assert events[-1].completion.text == "第二个回答"
    assert [r.kind for r in client.requests] == ["complete", "stream"]
    assert client.requests[0].tool_names == ["memory"]
    assert client.requests[1].temperature == 0.2
    assert client.requests[1].messages == [{"role": "user", "content": "again"}]


def test_an_exhausted_script_fails_loudly_unless_a_default_is_set() -> None:
    client = ScriptedClient(["only one"])
    client.complete([{"role": "user", "content": "1"}])
    with pytest.raises(LLMResponseError, match="no reply left for call 2; add one"):
        client.complete([{"role": "user", "content": "2"}])
    patient = ScriptedClient(default="same again")
    assert patient.complete([]).text == patient.complete([]).text == "same again"
    assert patient.remaining == 0
    patient.add("queued")
    assert patient.remaining == 1 and patient.complete([]).text == "queued"


def test_scripted_errors_raise_what_a_real_client_raises() -> None:
    client = ScriptedClient(
        [Reply.error(401), Reply.error(429), Reply.error(500), Reply(disconnect=True)]
    )
    for expected in (LLMAuthError, LLMQuotaError, LLMResponseError, LLMNetworkError):
        with pytest.raises(expected):
            client.complete([{"role": "user", "content": "x"}])


def test_scripted_embeddings_are_the_fake_servers_hash_vectors() -> None:
    client = ScriptedClient()
    assert client.embed(["tea", "茶"]) == [hash_embedding("tea", 64), hash_embedding("茶", 64)]
    with pytest.raises(TypeError, match="a Reply or a str"):
        ScriptedClient([42])  # type: ignore[list-item]


def test_recording_provider_scripts_tools_and_failures() -> None:
    def lookup(args: dict[str, object]) -> dict[str, object]:
        if not args.get("key"):
            raise ValueError("send a key")
        return {"success": True, "value": args["key"]}

    provider = RecordingProvider(
        "notes",
        tools=[tool_schema("notes_lookup", key="string")],
        replies={"notes_lookup": lookup},
        fail=["prefetch"],
    )
    with TemporaryHome() as home:
        manager = home.manager(provider)
        assert manager.initialize_all("s1") == []
        assert manager.prefetch_all("anything") == ""  # a failing provider is skipped
        box = Toolbox()
        box.register_provider_tools(manager)
        assert box.call("notes_lookup", {"key": "k"}) == {"success": True, "value": "k"}
        refused = box.call("notes_lookup", {})
        assert refused["success"] is False and "send a key" in refused["error"]
    assert provider.hooks() == [
        "initialize",
        "prefetch",
        "handle_tool_call",
        "handle_tool_call",
        "shutdown",
    ]
    assert provider.calls_to("handle_tool_call")[0] == {
        "name": "notes_lookup",
        "args": {"key": "k"},
    }
    with pytest.raises(Exception, match="has no tool 'other'"):
        provider.handle_tool_call("other", {})


def test_temporary_home_writes_settings_and_is_removed() -> None:
    with TemporaryHome(memory={"user_char_limit": 40, "provider": ""}) as home:
        path = home.home
        assert (path / "config.toml").read_text().startswith("[memory]\nuser_char_limit = 40\n")
        assert home.memory.limit("user") == 40
        home.store.create_session("s1", source="test")
        assert home.store.get_session("s1") is not None
        manager = home.manager(RecordingProvider())
    assert not path.exists()
    assert manager.shutdown_report is not None
    with pytest.raises(TypeError, match="bools, numbers and strings"):
        TemporaryHome(memory={"provider": ["x"]})


def test_temporary_home_refuses_a_provider_the_manager_refuses(tmp_path: Path) -> None:
    with TemporaryHome() as home, pytest.raises(ValueError, match="refused provider"):
        home.manager(RecordingProvider("builtin"))
