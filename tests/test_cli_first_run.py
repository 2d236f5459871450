"""A first run on a machine with no home folder yet: reading commands just work."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memstrata.cli import cli


@pytest.mark.parametrize(
    "args",
    [
        ["search", "what did we decide about caching?"],
        ["search"],
        ["sessions", "list"],
        ["memory", "list"],
        ["memory", "show"],
        ["plugins", "list"],
        ["config", "show"],
    ],
    ids=" ".join,
)
def test_reading_commands_work_before_the_home_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """With MEMSTRATA_HOME pointing at a folder that does not exist, exit code is 0."""
    monkeypatch.setenv("MEMSTRATA_HOME", str(tmp_path / "not-yet"))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
