"""The mem0 provider and its setup: mem0's library in-process against the fake LLM server."""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import json
import os
import re
import socket
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import call_provider_tool
from memstrata.config import Config
from memstrata.errors import MemstrataError, ProviderError, ToolArgumentError
from memstrata.providers.manager import MemoryManager
from memstrata.providers.mem0 import provider as mem0_provider
from memstrata.providers.mem0.provider import TARGET_KEY, Mem0Provider
from memstrata.providers.mem0.setup import (
    INSTALL_HINT,
    import_mem0,
    mem0_config,
    mem0_installed,
    normalize_user_id,
)
from memstrata.providers.plugins import discover_providers, load_provider
from memstrata.testing import FakeLLMServer, Reply
from memstrata.tools.toolbox import Toolbox

DIMS = 256
needs_mem0 = pytest.mark.skipif(
    not mem0_installed(), reason=f"mem0ai is not installed ({INSTALL_HINT})"
)

_NEW_MESSAGES = re.compile(r"## New Messages\n(.*?)\n\n## Observation Date", re.S)


def _is_extraction(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or [{}]
    return "Memory Extractor" in str(messages[0].get("content"))


def _extract(body: dict[str, Any]) -> str:
    """Answer mem0's extraction prompt as a model would: one memory per user sentence."""
    prompt = str(body["messages"][-1]["content"])
    match = _NEW_MESSAGES.search(prompt)
    assert match is not None, "mem0's extraction prompt changed shape"
    facts: list[str] = []
    for line in match.group(1).splitlines():
        if line.startswith("user: "):
            sentences = re.split(r"(?<=[.!?])\s+", line[len("user: ") :])
            facts.extend(s.strip() for s in sentences if len(s.split()) >= 3)
    memory = [{"id": str(i), "text": f, "attributed_to": "user"} for i, f in enumerate(facts)]
    return json.dumps({"memory": memory})


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(embedding_mode="bow", embedding_dimensions=DIMS) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeLLMServer) -> FakeLLMServer:
    server.reset()
    server.on(_is_extraction, _extract)
    return server


def _config(home: Path, base_url: str, **mem0: str) -> Config:
    environ = {
        "MEMSTRATA_LLM__BASE_URL": base_url,
        "MEMSTRATA_LLM__MODEL": "fake-model",
        "MEMSTRATA_LLM__EMBEDDING_MODEL": "fake-embedder",
        "MEMSTRATA_LLM__MAX_RETRIES": "0",
        "MEMSTRATA_LLM__TIMEOUT": "20",
        "MEMSTRATA_MEM0__EMBEDDING_DIMS": str(DIMS),
        "MEMSTRATA_MEMORY__PROVIDER": "mem0",
        **{f"MEMSTRATA_MEM0__{k.upper()}": v for k, v in mem0.items()},
    }
    return Config.load(home, environ=environ)


@pytest.fixture
def mem0_env(memstrata_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """mem0's process-wide switches, restored after the test."""
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(memstrata_home / "mem0"))
    return memstrata_home


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every address a socket connects to during the test."""
    seen: list[object] = []
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        seen.append(address)
        original(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def _open(home: Path, fake: FakeLLMServer, session: str = "s1", **mem0: str) -> Mem0Provider:
    provider = Mem0Provider(config=_config(home, fake.base_url, **mem0))
    provider.initialize(session, home=home)
    return provider


def _extractions(fake: FakeLLMServer) -> list[dict[str, Any]]:
    return [body for body in fake.chat_requests if _is_extraction(body)]


# -- configuration, discovery, availability (no mem0 needed) ------------------------------


def test_config_maps_llm_and_mem0_settings(memstrata_home: Path) -> None:
    """mem0's config points LLM, embedder and Qdrant at the [llm] endpoint and the home."""
    cfg = _config(memstrata_home, "http://127.0.0.1:9/v1", top_k="3")
    built = mem0_config(cfg)
    assert built["llm"] == {
        "provider": "openai",
        "config": {
            "model": "fake-model",
            "api_key": "unused",
            "openai_base_url": "http://127.0.0.1:9/v1",
        },
    }
    assert built["embedder"]["config"]["model"] == "fake-embedder"
    assert "embedding_dims" not in built["embedder"]["config"]
    store = built["vector_store"]["config"]
    assert store["path"] == str(memstrata_home / "mem0" / "qdrant")
    assert store["embedding_model_dims"] == DIMS
    assert "url" not in store
    assert built["history_db_path"] == str(memstrata_home / "mem0" / "history.db")


def test_config_uses_a_qdrant_server_when_a_url_is_set(memstrata_home: Path) -> None:
    """mem0.qdrant_url and mem0.qdrant_api_key replace the embedded folder."""
    cfg = _config(
        memstrata_home, "http://127.0.0.1:9/v1", qdrant_url="http://q:6333", qdrant_api_key="k"
    )
    store = mem0_config(cfg)["vector_store"]["config"]
    assert (store["url"], store["api_key"]) == ("http://q:6333", "k")


@pytest.mark.parametrize(
    ("environ", "fix"),
    [
        ({"MEMSTRATA_LLM__EMBEDDING_MODEL": "e", "OPENAI_BASE_URL": "http://x/v1"}, "llm.model"),
        ({"MEMSTRATA_LLM__MODEL": "m", "OPENAI_BASE_URL": "http://x/v1"}, "llm.embedding_model"),
        ({"MEMSTRATA_LLM__MODEL": "m", "MEMSTRATA_LLM__EMBEDDING_MODEL": "e"}, "llm.base_url"),
        (
            {
                "MEMSTRATA_LLM__MODEL": "m",
                "MEMSTRATA_LLM__EMBEDDING_MODEL": "e",
                "MEMSTRATA_LLM__PROVIDER": "anthropic",
            },
            "llm.provider openai",
        ),
    ],
    ids=["no-model", "no-embedder", "no-endpoint", "anthropic"],
)
def test_unconfigured_endpoint_is_unavailable_and_names_the_fix(
    memstrata_home: Path, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], fix: str
) -> None:
    """is_available is false, and the reason and initialize's error name the setting."""
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    provider = Mem0Provider(config=Config.load(memstrata_home))
    assert not provider.is_available()
    reason = provider.unavailable_reason() or ""
    assert fix in reason
    with pytest.raises(ProviderError, match=re.escape(fix)):
        provider.initialize("s1", home=memstrata_home)


def test_missing_package_says_how_to_install(
    memstrata_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without mem0ai the provider is unavailable and initialize names the pip extra."""
    monkeypatch.setitem(sys.modules, "mem0", None)  # what an uninstalled package looks like
    provider = Mem0Provider(config=_config(memstrata_home, "http://127.0.0.1:9/v1"))
    assert not provider.is_available()
    assert INSTALL_HINT in (provider.unavailable_reason() or "")
    with pytest.raises(ProviderError, match=re.escape(INSTALL_HINT)):
        provider.initialize("s1", home=memstrata_home)


def test_discovery_lists_mem0_without_importing_it(memstrata_home: Path) -> None:
    """plugins discovery and status build the provider but never import mem0."""
    code = (
        "import sys, json\n"
        "from memstrata.providers.plugins import discover_providers, provider_status\n"
        "info = discover_providers()['mem0']\n"
        "status = provider_status(info)\n"
        "print(json.dumps([status['origin'], status['error'], 'mem0' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["bundled", None, False]


def test_user_id_whitespace_is_normalised() -> None:
    """mem0 rejects whitespace in ids, so runs of it become one underscore."""
    assert normalize_user_id("  Alice  Smith\t") == "Alice_Smith"


# -- end to end against the fake server ---------------------------------------------------


@needs_mem0
def test_turns_extracted_in_one_session_are_recalled_in_a_later_one(
    mem0_env: Path, fake: FakeLLMServer, connections: list[object]
) -> None:
    """Facts synced through a MemoryManager are recalled by a new provider next session."""
    home = mem0_env
    cfg = _config(home, fake.base_url)
    turns = [
        ("My sister Alice moved to Lisbon last spring.", "Lisbon is lovely in spring."),
        ("I am allergic to peanuts and avoid satay.", "Noted, no peanuts."),
        ("Our team deploys the billing service on Fridays.", "Friday deploys, got it."),
    ]
    manager = MemoryManager(config=cfg)
    assert manager.add_provider(load_provider("mem0", cfg))
    assert manager.initialize_all("s1") == []
    assert "mem0_search" in manager.build_system_prompt()
    for user, assistant in turns:
        manager.sync_all(user, assistant, session_id="s1")
    report = manager.shutdown_all()
    assert report.drained and not report.shutdown_errors

    extractions = _extractions(fake)
    assert len(extractions) == len(turns)
    for body, (user, assistant) in zip(extractions, turns, strict=True):
        assert body["model"] == "fake-model"
        assert body["response_format"] == {"type": "json_object"}
        prompt = body["messages"][-1]["content"]
        assert f"user: {user}" in prompt and f"assistant: {assistant}" in prompt

    later = MemoryManager.from_config(cfg)  # memory.provider = "mem0"
    assert later.provider_names == ["builtin", "mem0"]
    assert later.initialize_all("s2") == []
    recall = later.prefetch_all("Where does my sister Alice live now?", session_id="s2")
    lines = recall.splitlines()
    assert lines[0] == "## mem0 memories"
    assert "Alice moved to Lisbon" in lines[1]
    peanuts = later.prefetch_all("Which foods with peanuts should I avoid?", session_id="s2")
    assert "allergic to peanuts" in peanuts.splitlines()[1]
    assert later.shutdown_all().drained

    # Nothing but the configured endpoint was contacted: mem0's telemetry is off.
    assert connections
    assert set(connections) == {("127.0.0.1", fake.port)}
    telemetry = sys.modules["mem0.memory.telemetry"]
    assert telemetry.MEM0_TELEMETRY is False
    assert (home / "mem0" / "history.db").is_file()


@needs_mem0
def test_prefetch_is_empty_for_an_empty_store_and_bounded(
    mem0_env: Path, fake: FakeLLMServer
) -> None:
    """An empty store recalls "", and recall never exceeds recall_chars."""
    provider = Mem0Provider(config=_config(mem0_env, fake.base_url), recall_chars=120)
    provider.initialize("s1", home=mem0_env)
    try:
        assert provider.prefetch("sister Lisbon", session_id="s1") == ""
        for n in range(4):
            provider.handle_tool_call(
                "mem0_add", {"content": f"Lisbon fact {n}: " + "tram rides and pastries " * 4}
            )
        recall = provider.prefetch("Lisbon tram pastries", session_id="s1")
        body = recall.split("\n", 1)[1]
        assert 0 < len(body) <= 120
        assert body.startswith("- Lisbon fact")
    finally:
        provider.shutdown()


@needs_mem0
def test_tools_add_search_update_delete(mem0_env: Path, fake: FakeLLMServer) -> None:
    """The four tools work on the current user's memories without any LLM call."""
    provider = _open(mem0_env, fake)
    try:
        added = provider.handle_tool_call("mem0_add", {"content": "User prefers green tea"})
        assert added["success"] is True
        memory_id = added["id"]
        found = provider.handle_tool_call("mem0_search", {"query": "green tea", "limit": 3})
        assert found["success"] and found["memories"][0]["id"] == memory_id

        updated = provider.handle_tool_call(
            "mem0_update", {"id": memory_id, "content": "User prefers oolong tea"}
        )
        assert updated == {
            "success": True,
            "id": memory_id,
            "memory": "User prefers oolong tea",
            "previous": "User prefers green tea",
        }
        found = provider.handle_tool_call("mem0_search", {"query": "oolong tea"})
        assert found["memories"][0]["memory"] == "User prefers oolong tea"

        deleted = provider.handle_tool_call("mem0_delete", {"id": memory_id})
        assert deleted == {"success": True, "id": memory_id, "deleted": "User prefers oolong tea"}
        assert provider.handle_tool_call("mem0_search", {"query": "oolong tea"})["count"] == 0
        assert fake.chat_requests == []
    finally:
        provider.shutdown()


@needs_mem0
def test_tool_errors_are_reported_not_raised(mem0_env: Path, fake: FakeLLMServer) -> None:
    """Bad arguments, unknown ids and unknown tools raise; the toolbox reports success=false."""
    provider = _open(mem0_env, fake)
    try:
        cases = [
            ("mem0_search", {}, "'query' is required"),
            ("mem0_search", {"query": "x", "limit": 0}, "'limit' must be"),
            ("mem0_add", {"content": "  "}, "'content' is required"),
            ("mem0_delete", {"id": "not-a-uuid"}, "No memory with id"),
            ("mem0_delete", {"id": "6f19fd2b-7c2a-42a5-813c-ad704eecdb54"}, "mem0_search"),
            ("mem0_update", {"id": "x"}, "'content' is required"),
            ("mem0_forget", {}, "Unknown tool"),
        ]
        box = Toolbox()
        for schema in provider.get_tool_schemas():
            name = schema["function"]["name"] if "function" in schema else schema["name"]
            box.register(name, schema, functools.partial(provider.handle_tool_call, name))
        box.register("mem0_forget", {}, functools.partial(provider.handle_tool_call, "mem0_forget"))
        for name, args, message in cases:
            with pytest.raises(MemstrataError, match=re.escape(message)):
                provider.handle_tool_call(name, args)
            result = box.call(name, args)
            assert result["success"] is False, name
            assert message in result["error"], result
    finally:
        provider.shutdown()


@needs_mem0
def test_one_user_cannot_touch_another_users_memories(mem0_env: Path, fake: FakeLLMServer) -> None:
    """Memories are scoped by user id: search and delete see only the caller's own."""
    alice = Mem0Provider(config=_config(mem0_env, fake.base_url))
    alice.initialize("s1", home=mem0_env, user_id="alice")
    try:
        memory_id = alice.handle_tool_call("mem0_add", {"content": "Alice keeps bees"})["id"]
        alice.initialize("s2", home=mem0_env, user_id="bob")  # the gateway switches user
        assert alice.user_id == "bob"
        assert alice.handle_tool_call("mem0_search", {"query": "bees"})["count"] == 0
        with pytest.raises(ToolArgumentError, match="No memory with id"):
            alice.handle_tool_call("mem0_delete", {"id": memory_id})
        alice.initialize("s3", home=mem0_env, user_id="alice")
        assert alice.handle_tool_call("mem0_search", {"query": "bees"})["count"] == 1
    finally:
        alice.shutdown()


@needs_mem0
def test_curated_memory_writes_are_mirrored_without_llm(
    mem0_env: Path, fake: FakeLLMServer
) -> None:
    """Built-in memory add, replace and remove reach mem0 verbatim, with no chat request."""
    cfg = _config(mem0_env, fake.base_url)
    manager = MemoryManager(config=cfg)
    provider = Mem0Provider(config=cfg)
    manager.add_provider(provider)
    manager.initialize_all("s1")
    try:

        def mirrored() -> list[str]:
            assert manager.flush_pending(60)
            listed = provider._run(
                "list",
                lambda m: m.get_all(filters={"user_id": provider.user_id, TARGET_KEY: "user"}),
                wait=None,
            )
            return sorted(r["memory"] for r in listed["results"])

        add = {"action": "add", "target": "user", "content": "User's timezone is UTC+8"}
        assert call_provider_tool(manager, "memory", add)["success"]
        assert mirrored() == ["User's timezone is UTC+8"]

        replace = {
            "action": "replace",
            "target": "user",
            "old_text": "UTC+8",
            "content": "User's timezone is UTC+1",
        }
        assert call_provider_tool(manager, "memory", replace)["success"]
        assert mirrored() == ["User's timezone is UTC+1"]

        remove = {"action": "remove", "target": "user", "old_text": "UTC+1"}
        assert call_provider_tool(manager, "memory", remove)["success"]
        assert mirrored() == []
        assert fake.chat_requests == []
    finally:
        manager.shutdown_all()


@needs_mem0
def test_extraction_failure_raises_provider_error(mem0_env: Path, fake: FakeLLMServer) -> None:
    """A failing LLM endpoint surfaces as ProviderError naming what failed."""
    provider = _open(mem0_env, fake)
    try:
        fake.script(Reply.server_error(503))
        with pytest.raises(ProviderError, match="mem0 could not store memories"):
            provider.sync_turn("My cat is called Miso.", "Cute!", session_id="s1")
    finally:
        provider.shutdown()


@needs_mem0
def test_subagent_turns_are_not_extracted(mem0_env: Path, fake: FakeLLMServer) -> None:
    """A delegated agent's turns never reach mem0: its "user" is the parent agent."""
    provider = Mem0Provider(config=_config(mem0_env, fake.base_url))
    provider.initialize("child", home=mem0_env, agent_context="subagent")
    try:
        provider.sync_turn("Summarise the repository layout.", "Done.", session_id="child")
        assert fake.requests == []
    finally:
        provider.shutdown()


@needs_mem0
def test_store_in_use_is_refused_with_the_fix(mem0_env: Path, fake: FakeLLMServer) -> None:
    """A second opener of the embedded store gets a ProviderError naming mem0.qdrant_url."""
    first = _open(mem0_env, fake)
    try:
        with pytest.raises(ProviderError, match=r"mem0\.qdrant_url"):
            _open(mem0_env, fake, session="s2")
    finally:
        first.shutdown()
    _open(mem0_env, fake, session="s3").shutdown()  # free again once the first closed


@needs_mem0
def test_changed_embedding_dims_are_refused(mem0_env: Path, fake: FakeLLMServer) -> None:
    """A store created for one vector size refuses another with the way out."""
    _open(mem0_env, fake).shutdown()
    provider = Mem0Provider(config=_config(mem0_env, fake.base_url, embedding_dims="128"))
    with pytest.raises(ProviderError, match=rf"holds {DIMS}-dimensional.*qdrant_path"):
        provider.initialize("s2", home=mem0_env)


@needs_mem0
def test_unreachable_qdrant_server_is_reported(mem0_env: Path, fake: FakeLLMServer) -> None:
    """A Qdrant URL nobody listens on fails initialize with the URL in the message."""
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    provider = Mem0Provider(config=_config(mem0_env, fake.base_url, qdrant_url=url))
    with pytest.raises(ProviderError, match=re.escape(url)):
        provider.initialize("s1", home=mem0_env)


def test_bundled_registry_names_the_provider(memstrata_home: Path) -> None:
    """memory.provider = "mem0" resolves to the bundled Mem0Provider."""
    info = discover_providers(memstrata_home)["mem0"]
    assert (info.origin, info.factory) == ("bundled", Mem0Provider)


@needs_mem0
def test_spacy_without_its_model_never_downloads(
    mem0_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With spaCy but no en_core_web_sm, mem0 skips lemmas instead of pip-installing it."""
    import_mem0(mem0_env / "mem0")  # loaded before spaCy "appears"
    models = importlib.import_module("mem0.utils.spacy_models")
    for flag in ("_load_failed_full", "_load_failed_lemma"):
        monkeypatch.setattr(models, flag, False)
    downloads: list[str] = []
    spacy = types.ModuleType("spacy")
    spacy.__spec__ = importlib.machinery.ModuleSpec("spacy", None)
    spacy.util = types.SimpleNamespace(is_package=lambda name: False)  # type: ignore[attr-defined]
    spacy.cli = types.SimpleNamespace(download=downloads.append)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spacy", spacy)
    monkeypatch.setitem(sys.modules, "spacy.cli", spacy.cli)  # type: ignore[attr-defined]

    mem0_module = import_mem0(mem0_env / "mem0")

    assert mem0_module.Memory is not None
    assert models.get_nlp_lemma() is None and models.get_nlp_full() is None
    assert downloads == []


@needs_mem0
def test_telemetry_is_off_and_home_untouched_even_if_enabled(tmp_path: Path) -> None:
    """A fresh process with MEM0_TELEMETRY=True still gets no PostHog client or ~/.mem0."""
    home, user_home = tmp_path / "ms", tmp_path / "user"
    user_home.mkdir()
    code = (
        "import json, os, sys\n"
        "from pathlib import Path\n"
        "from memstrata.providers.mem0.provider import Mem0Provider\n"
        "p = Mem0Provider()\n"
        "p.initialize('s1', home=Path(os.environ['MEMSTRATA_HOME']))\n"
        "t = sys.modules['mem0.memory.telemetry']\n"
        "print(json.dumps([t.MEM0_TELEMETRY, t.client_telemetry.posthog is None]))\n"
        "p.shutdown()\n"
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MEM0_", "MEMSTRATA_", "OPENAI_"))
    }
    env.update(
        HOME=str(user_home),
        MEM0_TELEMETRY="True",
        MEMSTRATA_HOME=str(home),
        MEMSTRATA_LLM__BASE_URL="http://127.0.0.1:9/v1",
        MEMSTRATA_LLM__MODEL="m",
        MEMSTRATA_LLM__EMBEDDING_MODEL="e",
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True]
    assert not (user_home / ".mem0").exists()
    assert (home / "mem0" / "config.json").is_file()  # mem0's own id file, kept in our home


@needs_mem0
def test_a_running_extraction_delays_recall_only_briefly(
    mem0_env: Path, fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the store is busy, prefetch recalls nothing and tools report "busy"."""
    monkeypatch.setattr(mem0_provider, "PREFETCH_LOCK_WAIT", 0.05)
    monkeypatch.setattr(mem0_provider, "TOOL_LOCK_WAIT", 0.05)
    provider = _open(mem0_env, fake)
    try:
        provider.handle_tool_call("mem0_add", {"content": "User rides a red bicycle"})
        with provider._lock:  # what a long extraction on the background worker holds
            assert provider.prefetch("red bicycle", session_id="s1") == ""
            with pytest.raises(ProviderError, match="still storing"):
                provider.handle_tool_call("mem0_search", {"query": "bicycle"})
        assert "red bicycle" in provider.prefetch("red bicycle", session_id="s1")
    finally:
        provider.shutdown()


def test_cli_plugins_list_says_why_mem0_is_unavailable(memstrata_home: Path) -> None:
    """`memstrata plugins list` names what mem0 is missing when it cannot run."""
    from click.testing import CliRunner

    from memstrata.cli import cli

    result = CliRunner().invoke(cli, ["plugins", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["mem0"]["available"] is False
    assert "llm.model" in rows["mem0"]["reason"]
    assert rows["facts"]["reason"] is None
