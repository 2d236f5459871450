"""Provider discovery: entry points, user plugin folders, bundled precedence, the CLI."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import call_provider_tool, record
from memstrata.cli import cli
from memstrata.config import Config
from memstrata.errors import ProviderError
from memstrata.providers import plugins
from memstrata.providers.manager import MemoryManager
from memstrata.providers.plugins import discover_providers, load_provider

PROVIDER_SOURCE = """
from typing import Any, ClassVar
from memstrata.providers.base import MemoryProvider


class {cls}(MemoryProvider):
    name: ClassVar[str] = "{name}"
    origin_marker = "{marker}"

    def is_available(self) -> bool:
        return {available}

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self.session_id = session_id

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [{{"name": "{name}_recall", "parameters": {{"type": "object"}}}}]

    def prefetch(self, query: str, *, session_id: str) -> str:
        return "{marker} recalls " + query
"""


def provider_source(
    name: str, marker: str, *, cls: str = "ToyProvider", available: bool = True
) -> str:
    return PROVIDER_SOURCE.format(name=name, marker=marker, cls=cls, available=available)


def install_distribution(site: Path, module: str, entries: dict[str, str], source: str) -> None:
    """Write a module and a *.dist-info with entry_points.txt into ``site`` (on sys.path)."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{module.replace('_', '-')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[memstrata.providers]\n{lines}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path


def user_plugin(home: Path, folder: str, source: str) -> Path:
    path = home / "plugins" / folder
    path.mkdir(parents=True)
    (path / "__init__.py").write_text(source)
    return path


def test_entry_point_provider_is_discovered_and_loaded(site: Path) -> None:
    """A provider installed through a real entry point (dist-info on sys.path) loads."""
    install_distribution(
        site,
        "memstrata_toy_ep",
        {"toy": "memstrata_toy_ep:ToyProvider", "broken_ep": "memstrata_toy_ep:missing"},
        provider_source("toy", "entry-point"),
    )
    found = discover_providers()
    assert found["toy"].origin == "entry_point"
    assert found["broken_ep"].factory is None
    assert "missing" in (found["broken_ep"].error or "")
    provider = load_provider("toy")
    assert provider.prefetch("q", session_id="s") == "entry-point recalls q"
    with pytest.raises(ProviderError, match="failed to load"):
        load_provider("broken_ep")
    sys.modules.pop("memstrata_toy_ep", None)


def test_user_plugin_folder_is_discovered(memstrata_home: Path) -> None:
    """A MemoryProvider subclass in $MEMSTRATA_HOME/plugins/<name>/ is found and loads."""
    user_plugin(memstrata_home, "toyfolder", provider_source("toyfolder", "folder"))
    info = discover_providers()["toyfolder"]
    assert info.origin == "user"
    assert load_provider("toyfolder").prefetch("x", session_id="s") == "folder recalls x"


def test_user_plugin_with_register_function(memstrata_home: Path) -> None:
    """A plugin may offer providers through register(registry), including a factory."""
    source = provider_source("viareg", "registered") + textwrap.dedent(
        """

        def register(registry):
            registry.register_memory_provider(ToyProvider)
            registry.register_memory_provider(lambda: ToyProvider(), name="viareg_alias")
        """
    )
    user_plugin(memstrata_home, "regfolder", source)
    found = discover_providers()
    assert {"viareg", "viareg_alias"} <= set(found)
    assert load_provider("viareg_alias").name == "viareg"


def test_broken_user_plugin_is_listed_not_fatal(memstrata_home: Path) -> None:
    """A plugin that fails to import, or offers nothing, is listed with its error."""
    user_plugin(memstrata_home, "crashy", "raise RuntimeError('import exploded')\n")
    user_plugin(memstrata_home, "empty", "VALUE = 1\n")
    user_plugin(memstrata_home, "fine", provider_source("fine", "ok"))
    found = discover_providers()
    assert found["crashy"].error == "RuntimeError: import exploded"
    assert "no MemoryProvider subclass" in (found["empty"].error or "")
    assert found["fine"].error is None
    with pytest.raises(ProviderError, match="import exploded"):
        load_provider("crashy")


def test_precedence_bundled_then_entry_points_then_user(
    site: Path, memstrata_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a name clash bundled wins over entry points, which win over user plugins."""
    install_distribution(
        site,
        "memstrata_clash_ep",
        {"clash": "memstrata_clash_ep:ToyProvider", "second": "memstrata_clash_ep:ToyProvider"},
        provider_source("clash", "entry-point"),
    )
    (site / "memstrata_clash_bundled.py").write_text(provider_source("clash", "bundled"))
    user_plugin(memstrata_home, "clash", provider_source("clash", "user"))
    user_plugin(memstrata_home, "second", provider_source("second", "user"))
    monkeypatch.setitem(plugins.BUNDLED_PROVIDERS, "clash", "memstrata_clash_bundled:ToyProvider")
    found = discover_providers()
    assert found["clash"].origin == "bundled"
    assert found["clash"].shadowed == ("entry_point", "user")
    assert load_provider("clash").prefetch("q", session_id="s") == "bundled recalls q"
    assert found["second"].origin == "entry_point"
    assert found["second"].shadowed == ("user",)
    for module in ("memstrata_clash_ep", "memstrata_clash_bundled"):
        sys.modules.pop(module, None)


def test_unknown_provider_names_the_installed_ones(memstrata_home: Path) -> None:
    """Asking for a provider that does not exist says which ones do."""
    user_plugin(memstrata_home, "real", provider_source("real", "r"))
    with pytest.raises(
        ProviderError, match=r"No memory provider named 'ghost' \(installed: .*real"
    ):
        load_provider("ghost")


def test_manager_from_config_loads_the_configured_provider(memstrata_home: Path) -> None:
    """memory.provider names the external provider MemoryManager.from_config registers."""
    user_plugin(memstrata_home, "cfgtoy", provider_source("cfgtoy", "configured"))
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "cfgtoy"\n')
    manager = MemoryManager.from_config(Config.load(memstrata_home))
    assert manager.provider_names == ["builtin", "cfgtoy"]
    assert manager.has_tool("cfgtoy_recall")
    assert manager.prefetch_all("hello", session_id="s") == "configured recalls hello"
    manager.shutdown_all()


def test_manager_from_config_refuses_an_unavailable_provider(memstrata_home: Path) -> None:
    """A configured provider reporting itself unavailable stops startup with advice."""
    user_plugin(memstrata_home, "offline", provider_source("offline", "o", available=False))
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "offline"\n')
    with pytest.raises(ProviderError, match="not available here"):
        MemoryManager.from_config(Config.load(memstrata_home))


def test_cli_plugins_list_json(memstrata_home: Path) -> None:
    """`memstrata plugins list --json` shows name, origin, availability and errors."""
    user_plugin(memstrata_home, "up", provider_source("up", "u"))
    user_plugin(memstrata_home, "down", provider_source("down", "d", available=False))
    user_plugin(memstrata_home, "bad", "import not_a_module_anywhere\n")
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "up"\n')
    result = CliRunner().invoke(cli, ["plugins", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["up"]["available"] is True and rows["up"]["active"] is True
    assert rows["up"]["origin"] == "user"
    assert rows["down"]["available"] is False and rows["down"]["error"] is None
    assert "not_a_module_anywhere" in rows["bad"]["error"]


def test_cli_plugins_list_without_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing installed the listing says where providers come from."""
    monkeypatch.setattr(plugins, "BUNDLED_PROVIDERS", {})
    result = CliRunner().invoke(cli, ["plugins", "list"])
    assert result.exit_code == 0, result.output
    assert "No memory providers found" in result.output


def test_cli_plugins_list_table(memstrata_home: Path) -> None:
    """The plain listing prints one line per provider (tab-separated when piped)."""
    user_plugin(memstrata_home, "up", provider_source("up", "u"))
    result = CliRunner().invoke(cli, ["plugins"])
    assert result.exit_code == 0, result.output
    assert any(line.split("\t")[:3] == ["up", "user", "yes"] for line in result.output.splitlines())


DOCS = Path(__file__).resolve().parent.parent / "docs" / "providers.md"


def _doc_block(marker: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("```python\n", text.index(marker)) + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the provider API importable from `memstrata` as the docs show it."""
    import memstrata
    from memstrata.prompt import fencing
    from memstrata.providers import base as providers
    from memstrata.providers import manager

    for module, name in [
        (providers, "MemoryProvider"),
        (providers, "MemoryWriteMetadata"),
        (manager, "MemoryManager"),
        (fencing, "StreamingContextScrubber"),
        (fencing, "build_memory_context_block"),
    ]:
        monkeypatch.setattr(memstrata, name, getattr(module, name), raising=False)


@pytest.mark.usefixtures("exported")
def test_documented_toy_plugin_works_end_to_end(memstrata_home: Path) -> None:
    """The toy plugin printed in docs/providers.md loads, syncs, recalls and mirrors writes."""
    user_plugin(memstrata_home, "toynotes", _doc_block("<!-- toy-plugin -->"))
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "toynotes"\n')
    manager = MemoryManager.from_config(Config.load(memstrata_home))
    manager.initialize_all("s1")
    manager.sync_all("Which database do we use?", "PostgreSQL since March.", session_id="s1")
    call_provider_tool(
        manager, "memory", {"action": "add", "target": "memory", "content": "Backups run nightly."}
    )
    assert manager.flush_pending(10)
    recall = manager.prefetch_all("remind me about the database", session_id="s1")
    assert recall == (
        "## Earlier notes\n- User said: Which database do we use? | "
        "Assistant said: PostgreSQL since March."
    )
    found = call_provider_tool(manager, "toynotes_search", {"query": "backups"})
    assert found == {"success": True, "results": ["Curated memory note: Backups run nightly."]}
    assert manager.shutdown_all().drained


@pytest.mark.usefixtures("exported")
def test_documented_scrubber_example_runs() -> None:
    """The streaming example in docs/providers.md does what it says."""
    marker = "## Fencing"
    exec(compile(_doc_block(marker), str(DOCS), "exec"), {})


# -- security: a plugin runs only when it can win, and only from a private home ---------

SIDE_EFFECT = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")
"""


def test_a_plugin_losing_its_name_is_never_imported(
    site: Path, memstrata_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder whose declared names are all taken (bundled `facts`, an entry point, an
    earlier folder) is skipped before its code runs, and reported; a folder with a free
    name still loads."""
    install_distribution(
        site,
        "memstrata_taken_ep",
        {"taken": "memstrata_taken_ep:ToyProvider"},
        provider_source("taken", "entry-point"),
    )
    markers = {name: tmp_path / f"{name}.ran" for name in ("facts", "taken", "twice", "free")}
    user_plugin(
        memstrata_home,
        "a_facts",
        SIDE_EFFECT.format(marker=str(markers["facts"])) + provider_source("facts", "user"),
    )
    user_plugin(
        memstrata_home,
        "b_taken",
        SIDE_EFFECT.format(marker=str(markers["taken"])) + provider_source("taken", "user"),
    )
    user_plugin(memstrata_home, "c_first", provider_source("twice", "first"))
    user_plugin(
        memstrata_home,
        "d_second",
        SIDE_EFFECT.format(marker=str(markers["twice"])) + provider_source("twice", "second"),
    )
    user_plugin(
        memstrata_home,
        "e_free",
        SIDE_EFFECT.format(marker=str(markers["free"])) + provider_source("freshname", "user"),
    )
    found = discover_providers()
    load_provider("freshname")
    assert not markers["facts"].exists()
    assert not markers["taken"].exists()
    assert not markers["twice"].exists()
    assert markers["free"].exists()
    assert found["twice"].source.endswith("c_first")
    problems = plugins.plugin_problems(memstrata_home)
    assert any("a_facts" in p and "'facts'" in p and "not loaded" in p for p in problems)
    assert any("b_taken" in p for p in problems) and any("d_second" in p for p in problems)
    assert not any("e_free" in p for p in problems)
    sys.modules.pop("memstrata_taken_ep", None)
    record(kind="attack", category="Plugins losing a name clash (never run)", tried=3, stopped=3)


def test_declared_names_are_read_without_running_the_plugin(tmp_path: Path) -> None:
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        "raise SystemExit('must not run')\n"
        "class A:\n    name = 'alpha'\n"
        "def register(registry):\n    registry.register_memory_provider(A, name='beta')\n"
    )
    assert plugins.declared_names(folder) == ["alpha", "beta"]
    (folder / "__init__.py").write_text("x = 1\n")
    assert plugins.declared_names(folder) == ["toy"]


@pytest.mark.parametrize("where", ["home", "plugins", "folder", "file"])
def test_plugins_in_a_home_writable_by_others_are_not_loaded(
    where: str, memstrata_home: Path, tmp_path: Path
) -> None:
    """Group- or world-writable home, plugins folder, plugin folder or file: no plugin
    runs, `plugins list` shows why, and `doctor` reports it as an error with the chmod."""
    marker = tmp_path / "ran"
    folder = user_plugin(
        memstrata_home,
        "toy",
        SIDE_EFFECT.format(marker=str(marker)) + provider_source("toyname", "user"),
    )
    target = {
        "home": memstrata_home,
        "plugins": memstrata_home / "plugins",
        "folder": folder,
        "file": folder / "__init__.py",
    }[where]
    target.chmod(target.stat().st_mode | 0o022)
    found = discover_providers()
    assert not marker.exists()
    assert found["toy"].factory is None and "other users" in (found["toy"].error or "")
    with pytest.raises(ProviderError, match="other users"):
        load_provider("toy")
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    findings = json.loads(result.output)["findings"]
    unsafe = [f for f in findings if f["code"] == "plugin_unsafe"]
    assert unsafe and unsafe[0]["severity"] == "error"
    assert unsafe[0]["fix"] == f"chmod go-w {target}"
    record(kind="attack", category="Plugins in a home writable by others", tried=1, stopped=1)
    target.chmod(target.stat().st_mode & ~0o022)
    assert load_provider("toyname", Config.load()).prefetch("q", session_id="s") == "user recalls q"
    assert marker.exists()


def test_doctor_reports_a_shadowed_plugin(memstrata_home: Path) -> None:
    user_plugin(memstrata_home, "myfacts", provider_source("facts", "user"))
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    findings = json.loads(result.output)["findings"]
    shadowed = [f for f in findings if f["code"] == "plugin_shadowed"]
    assert shadowed and "myfacts" in shadowed[0]["message"]
    assert "'facts'" in shadowed[0]["message"]
