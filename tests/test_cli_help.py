"""Every CLI command has help text with an example."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from memstrata.cli import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = [prefix]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p) or "memstrata")
def test_command_help_has_example(path: tuple[str, ...]) -> None:
    """`memstrata ... --help` exits 0 and shows an Example block."""
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output, f"{' '.join(path)} has no example in its help"


def test_version_flag() -> None:
    """`memstrata --version` prints the version."""
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert "memstrata, version" in result.output
