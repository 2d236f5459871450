"""Home-folder resolution and config.toml loading with environment overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.config import DEFAULTS, Config, memstrata_home
from memstrata.errors import ConfigError


def test_home_comes_from_environment(memstrata_home: Path) -> None:
    """MEMSTRATA_HOME decides the home folder."""
    from memstrata import config

    assert config.memstrata_home() == memstrata_home


def test_home_defaults_to_dot_memstrata(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without MEMSTRATA_HOME the home is ~/.memstrata."""
    monkeypatch.delenv("MEMSTRATA_HOME")
    assert memstrata_home() == Path.home() / ".memstrata"


def test_defaults_without_file(memstrata_home: Path) -> None:
    """With no config.toml every key has its documented default."""
    cfg = Config.load()
    assert cfg.get("memory.memory_char_limit") == 2200
    assert cfg.get("memory.user_char_limit") == 1375
    assert cfg.values == DEFAULTS


def test_file_values_are_cast_to_the_default_type(memstrata_home: Path) -> None:
    """A limit written as a string in the file is still an int (Hermes kept the string)."""
    (memstrata_home / "config.toml").write_text('[memory]\nmemory_char_limit = "3000"\n')
    assert Config.load().get("memory.memory_char_limit") == 3000


def test_environment_overrides_file(memstrata_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MEMSTRATA_<SECTION>__<KEY> wins over config.toml."""
    (memstrata_home / "config.toml").write_text("[memory]\nuser_char_limit = 2000\n")
    monkeypatch.setenv("MEMSTRATA_MEMORY__USER_CHAR_LIMIT", "2500")
    assert Config.load().get("memory.user_char_limit") == 2500


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('[memory]\nmemory_char_limit = "lots"\n', "not a valid int"),
        ("[memroy]\nx = 1\n", "unknown section [memroy]"),
        ("[memory]\nchar_limit = 1\n", "unknown key memory.char_limit"),
        ("[memory\n", "Cannot read"),
    ],
)
def test_bad_config_names_the_problem(memstrata_home: Path, body: str, needle: str) -> None:
    """Every bad value raises ConfigError saying which key and what to do."""
    (memstrata_home / "config.toml").write_text(body)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace(".", r"\.")):
        Config.load()


def test_unparsable_config_advice_does_not_need_the_config(memstrata_home: Path) -> None:
    """A config.toml that is not TOML gets advice that works without reading it."""
    (memstrata_home / "config.toml").write_text("[memory\n")
    with pytest.raises(ConfigError, match="Fix the TOML syntax") as caught:
        Config.load()
    assert "config show" not in str(caught.value)


def test_bad_environment_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad environment override names the variable."""
    monkeypatch.setenv("MEMSTRATA_STORE__BUSY_TIMEOUT_MS", "soon")
    with pytest.raises(ConfigError, match="MEMSTRATA_STORE__BUSY_TIMEOUT_MS"):
        Config.load()


def test_config_set_keeps_comments(memstrata_home: Path) -> None:
    """`memstrata config set` edits one key and keeps the user's comments."""
    path = memstrata_home / "config.toml"
    path.write_text("# my settings\n[memory]\nuser_char_limit = 2000  # roomy\n")
    result = CliRunner().invoke(cli, ["config", "set", "memory.memory_char_limit", "4000"])
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert "# my settings" in text and "# roomy" in text
    assert Config.load().get("memory.memory_char_limit") == 4000


def test_config_set_rejects_unknown_key() -> None:
    """Setting an unknown key fails without writing anything."""
    result = CliRunner().invoke(cli, ["config", "set", "memory.nope", "1"])
    assert result.exit_code != 0
