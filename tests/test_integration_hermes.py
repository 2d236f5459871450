"""The Hermes Agent provider, against the real ``hermes-agent==0.19.0`` from PyPI.

Hermes runs in its own virtual environment (scripts/hermes_venv.py: cached per machine,
or ``MEMSTRATA_TEST_HERMES_PYTHON``). ``MEMSTRATA_TEST_HERMES=1`` (set by ``.ci/run``) builds
it when missing and makes the test required; elsewhere it is skipped with the reason
when no Hermes environment exists. The plugin is written by the real console script,
and Hermes' own loader and MemoryManager drive the provider (tests/workers/).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import hermes_venv
from memstrata.errors import ConfigError
from memstrata.integrations.hermes import plugin
from memstrata.integrations.hermes.provider import HermesMemstrataProvider, read_settings
from memstrata.testing import FakeLLMServer

WORKER = Path(__file__).resolve().parent / "workers" / "hermes_conversation.py"
MEMSTRATA = Path(sys.executable).parent / "memstrata"


@pytest.fixture(scope="session")
def hermes_python() -> Path:
    """Hermes' interpreter (built when MEMSTRATA_TEST_HERMES=1 and missing)."""
    venv = hermes_venv()
    if os.environ.get("MEMSTRATA_TEST_HERMES") == "1":
        return Path(venv.ensure_python())
    found = venv.find_python()
    if found is None:
        pytest.skip(
            f"no {venv.HERMES_REQUIREMENT} environment: run `python scripts/hermes_venv.py` "
            f"(builds {venv.cache_dir()}) or set MEMSTRATA_TEST_HERMES=1"
        )
    return Path(found)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MEMSTRATA), *args], capture_output=True, text=True, check=False, timeout=120
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTRATA_", "PYTHON"))}


def _hermes(python: Path, hermes_home: Path, script: Path) -> dict[str, Any]:
    env = _clean_env()
    env["HERMES_HOME"] = str(hermes_home)
    done = subprocess.run(
        [str(python), str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        cwd=hermes_home,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_hermes_loads_and_drives_the_provider(hermes_python: Path, tmp_path: Path) -> None:
    """install -> Hermes discovers and loads it -> a scripted two-session conversation ->
    uninstall; every step through Hermes' own code."""
    hermes_home = tmp_path / "hermes"
    hermes_home.mkdir()
    installed = _cli("hermes", "install", "--hermes-home", str(hermes_home))
    assert installed.returncode == 0, installed.stderr
    assert "Installed" in installed.stdout

    selected = subprocess.run(
        [str(hermes_python.parent / "hermes"), "config", "set", "memory.provider", "memstrata"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**_clean_env(), "HERMES_HOME": str(hermes_home)},
        cwd=hermes_home,
        stdin=subprocess.DEVNULL,
    )
    assert selected.returncode == 0, selected.stderr

    out = _hermes(hermes_python, hermes_home, WORKER)

    assert out["active"] == "memstrata"  # what `hermes config set` wrote, as Hermes reads it
    listed = {name: available for name, _, available in out["discovered"]}
    assert listed.get("memstrata") is True
    assert out["loaded"] == "MemstrataMemoryProvider"
    assert "agent.memory_provider.MemoryProvider" in out["mro"]
    # Hermes keeps its own session_search and memory; ours do not shadow them.
    assert out["tools"] == [
        "memstrata_facts",
        "memstrata_forget",
        "memstrata_remember",
        "memstrata_session_search",
    ]
    assert "memstrata_session_search" in out["system_prompt"]
    assert out["config_schema"] == ["home", "import_state_db", "scope", "recall_sessions"]
    # import_state_db: the session Hermes recorded before the provider existed is found.
    legacy = out["search_legacy"]
    assert legacy["results"][0]["session_id"] == "hermes-s-legacy", legacy
    assert "VPN" in legacy["results"][0]["snippet"]
    assert out["flushed_first"] and out["flushed_boundary"]
    # A later session's prefetch recalls what was said in the first one.
    assert "Frankfurt" in out["prefetch"]
    assert "s-first" in out["prefetch"]
    # Two-clause Chinese question and an English one through the provider's tool.
    zh = out["search_zh"]
    assert zh["success"] and zh["results"][0]["session_id"] == "s-first"
    assert "Loki" in zh["results"][0]["snippet"] and "王芳" in zh["results"][0]["snippet"]
    en = out["search_en"]
    assert en["success"] and en["results"][0]["session_id"] == "s-first"
    assert "pg-stage-fra.internal" in json.dumps(en["results"][0])
    # Facts: remember, Hermes' USER.md write mirrored, "remember that ..." captured.
    assert out["remember"]["success"]
    assert [f["source"] for f in out["facts_mirrored"]["facts"]] == ["mirror"]
    assert "metric units" in out["facts_mirrored"]["facts"][0]["content"]
    assert "Helix" in out["facts_captured"]["facts"][0]["content"]
    assert "release train leaves every Thursday" in out["pre_compress"]
    assert "memstrata_nope" in out["unknown_tool"]["error"]
    assert out["bad_args"] == {
        "success": False,
        "error": "limit must be an integer, got string 'many'.",
    }
    # shutdown drained every queued write and left no database open or locked.
    assert out["drain"]["status"] == "drained"
    assert out["drain"]["abandoned_writes"] == 0
    assert out["databases"] == ["facts.db", "state.db"]
    assert out["locked"] == []
    assert out["leftover_wal"] == []

    removed = _cli("hermes", "uninstall", "--hermes-home", str(hermes_home))
    assert removed.returncode == 0, removed.stderr
    assert not (hermes_home / "plugins" / "memstrata").exists()
    # memstrata's data stays for a later reinstall.
    assert (hermes_home / "memstrata" / "state.db").exists()


# -- the plugin folder and settings, without Hermes ------------------------------------


def test_install_is_idempotent_and_refuses_foreign_folders(tmp_path: Path) -> None:
    """A second install changes nothing; another plugin's folder is never overwritten
    or removed without --force, and the exit codes say so."""
    first = _cli("hermes", "install", "--hermes-home", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["changed"] is True
    again = _cli("hermes", "install", "--hermes-home", str(tmp_path), "--json")
    assert json.loads(again.stdout)["changed"] is False

    foreign = tmp_path / "other" / "plugins" / "memstrata"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("# someone else's MemoryProvider\n")
    refused = _cli("hermes", "install", "--hermes-home", str(tmp_path / "other"))
    assert refused.returncode == 1
    assert "--force" in refused.stderr
    kept = _cli("hermes", "uninstall", "--hermes-home", str(tmp_path / "other"))
    assert kept.returncode == 1
    assert "not written by `memstrata hermes install`" in kept.stderr
    assert (foreign / "__init__.py").read_text() == "# someone else's MemoryProvider\n"
    forced = _cli("hermes", "install", "--hermes-home", str(tmp_path / "other"), "--force")
    assert forced.returncode == 0, forced.stderr
    assert plugin.MARKER in (foreign / "__init__.py").read_text()

    absent = _cli("hermes", "uninstall", "--hermes-home", str(tmp_path / "nowhere"))
    assert absent.returncode == 0
    assert "Not installed" in absent.stdout


def test_plugin_folder_is_discoverable_by_text(tmp_path: Path) -> None:
    """Hermes lists a user plugin only when its __init__ names MemoryProvider and the
    folder has plugin.yaml with a description."""
    report = plugin.install(tmp_path)
    init = (report.folder / "__init__.py").read_text()
    assert "MemoryProvider" in init
    assert "register" in init
    compile(init, "__init__.py", "exec")
    yaml_text = (report.folder / "plugin.yaml").read_text()
    assert "name: memstrata" in yaml_text and "description:" in yaml_text


def test_settings_are_validated_and_saved(tmp_path: Path) -> None:
    """save_config writes memstrata.json; a bad value or key says what to do."""
    provider = HermesMemstrataProvider()
    fields = {f["key"] for f in provider.get_config_schema()}
    assert fields == {"home", "import_state_db", "scope", "recall_sessions"}
    provider.save_config({"recall_sessions": "3", "home": "data"}, str(tmp_path))
    assert read_settings(tmp_path)["recall_sessions"] == "3"
    with pytest.raises(ConfigError, match="recall_sessions must be 0 to 5"):
        provider.save_config({"recall_sessions": "9"}, str(tmp_path))
    with pytest.raises(ConfigError, match="Unknown memstrata setting"):
        provider.save_config({"api_key": "x"}, str(tmp_path))
    with pytest.raises(ConfigError, match="scope must be shared or per-user"):
        provider.save_config({"scope": "everyone"}, str(tmp_path))
    with pytest.raises(ConfigError, match="true or false"):
        provider.save_config({"import_state_db": "maybe"}, str(tmp_path))
    (tmp_path / "memstrata.json").write_text("{nope")
    with pytest.raises(ConfigError, match="hermes memory setup"):
        read_settings(tmp_path)


def test_provider_works_without_hermes(tmp_path: Path) -> None:
    """The provider class itself needs no Hermes: sync, recall, tools, shutdown; it uses
    the configured home, and backup_paths names it when it is outside HERMES_HOME."""
    outside = tmp_path / "elsewhere"
    hermes_home = tmp_path / "hermes"
    provider = HermesMemstrataProvider()
    provider.save_config({"home": str(outside)}, hermes_home)
    provider.initialize("a", hermes_home=str(hermes_home), platform="telegram")
    assert provider.backup_paths() == [str(outside)]
    provider.sync_turn("我喜欢喝乌龙茶，不加糖。", "记住了：乌龙茶，不加糖。", session_id="a")
    provider.on_session_switch("b", parent_session_id="a", reset=True)
    recalled = provider.prefetch("你喜欢喝什么茶？", session_id="b")
    assert "乌龙茶" in recalled
    session = provider.store.get_session("a")
    assert session is not None and session["source"] == "telegram"
    found = json.loads(provider.handle_tool_call("memstrata_session_search", {"query": "乌龙茶"}))
    assert found["results"][0]["session_id"] == "a"
    provider.shutdown()
    provider.shutdown()
    assert (outside / "state.db").exists()
    assert not list(outside.glob("*-wal"))
    with pytest.raises(Exception, match="not initialised"):
        _ = provider.store


def test_provider_needs_hermes_home() -> None:
    """initialize without hermes_home explains who passes it."""
    with pytest.raises(Exception, match="hermes_home"):
        HermesMemstrataProvider().initialize("s")


def test_provider_class_outside_hermes_says_what_to_install() -> None:
    """Building the Hermes subclass where Hermes is absent is a clear ConfigError."""
    if importlib.util.find_spec("agent") is not None:
        pytest.skip("a module named 'agent' is importable here")
    with pytest.raises(ConfigError, match="pip install hermes-agent"):
        plugin.provider_class()


def test_lineage_delegation_and_subagents(tmp_path: Path) -> None:
    """A compression continuation keeps lineage (recall pools both halves and leaves the
    live conversation out); a delegation is recorded as a delegate session; a sub-agent's
    provider recalls but never writes."""
    provider = HermesMemstrataProvider()
    provider.initialize("root", hermes_home=str(tmp_path))
    provider.sync_turn("The build cache lives on bucket ci-cache-7.", "Noted.", session_id="root")
    provider.on_session_switch("cont", parent_session_id="root", reason="compression")
    assert provider.store.get_lineage_root("cont") == "root"
    # The continuation's own lineage is the live context: not recalled into it.
    assert provider.prefetch("where is the build cache bucket", session_id="cont") == ""
    assert provider.on_pre_compress([]) == ""
    provider.on_delegation("Count the open tickets", "There are 12.", child_session_id="kid")
    kid = provider.store.get_session("kid")
    assert kid is not None and kid["parent_session_id"] == "cont"
    assert kid["lineage_kind"] == "delegate"
    provider.shutdown()

    sub = HermesMemstrataProvider()
    sub.initialize("sub", hermes_home=str(tmp_path), agent_context="subagent")
    sub.sync_turn("remember that I am a subagent", "ok", session_id="sub")
    assert sub.store.get_session("sub") is None
    refused = json.loads(sub.handle_tool_call("memstrata_remember", {"content": "x y z"}))
    assert refused["success"] is False and "primary agent" in refused["error"]
    assert "ci-cache-7" in sub.prefetch("which bucket holds the build cache", session_id="sub")
    sub.shutdown()


def test_session_search_summaries_are_cached(tmp_path: Path, server: FakeLLMServer) -> None:
    """With a summary model in the memstrata home's config.toml, the provider's
    memstrata_session_search answers with a query-focused summary (the fake model's),
    and asking again is served from the cache without a model call."""
    home = tmp_path / "memstrata"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[llm]\nbase_url = "{server.base_url}"\nmodel = "fake-summary"\napi_key = "test"\n'
        "max_retries = 0\n",
        encoding="utf-8",
    )
    server.set_default("Summary: the staging database moved to Frankfurt.")
    provider = HermesMemstrataProvider()
    provider.initialize("a", hermes_home=str(tmp_path))
    provider.sync_turn("Staging DB moved to Frankfurt.", "Noted.", session_id="a")
    provider.on_session_switch("b", parent_session_id="a", reset=True)
    ask = {"query": "where is the staging database now"}
    first = json.loads(provider.handle_tool_call("memstrata_session_search", ask))
    calls = len(server.chat_requests)
    second = json.loads(provider.handle_tool_call("memstrata_session_search", ask))
    provider.shutdown()
    assert calls >= 1
    assert first["results"][0]["summary"] == "Summary: the staging database moved to Frankfurt."
    assert second["results"][0]["summary"] == first["results"][0]["summary"]
    assert len(server.chat_requests) == calls


@pytest.mark.parametrize("scope", ["shared", "per-user"])
def test_gateway_users_are_kept_apart_with_per_user_scope(tmp_path: Path, scope: str) -> None:
    """scope = per-user: a gateway user's turns and facts are never recalled for another
    user (each gets a folder named by a digest of the id, so "../x" cannot escape);
    shared keeps Hermes' own one-memory model."""
    HermesMemstrataProvider().save_config({"scope": scope}, tmp_path)

    def user(uid: str) -> HermesMemstrataProvider:
        provider = HermesMemstrataProvider()
        provider.initialize(f"s-{len(uid)}", hermes_home=str(tmp_path), user_id=uid)
        return provider

    alice = user("alice")
    alice.sync_turn("My bank PIN hint is the harbour lighthouse.", "Noted.", session_id="s-5")
    alice.handle_tool_call("memstrata_remember", {"content": "Alice's locker code is 4471"})
    alice.shutdown()
    mallory = user("../alice")
    recalled = mallory.prefetch("what is the lighthouse PIN hint and locker code", session_id="x")
    found = json.loads(mallory.handle_tool_call("memstrata_session_search", {"query": "PIN hint"}))
    facts = json.loads(mallory.handle_tool_call("memstrata_facts", {"query": "locker code"}))
    assert mallory.home is not None
    mallory.shutdown()
    if scope == "per-user":
        assert recalled == ""
        assert found["results"] == [] and facts["facts"] == []
        assert mallory.home.parent == tmp_path / "memstrata" / "users"
    else:
        assert "lighthouse" in recalled and "4471" in recalled
        assert found["results"][0]["session_id"] == "s-5"
