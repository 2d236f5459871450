"""The ``memstrata`` command line. Subcommand groups live in sibling modules."""

from __future__ import annotations

import click

from memstrata import __version__
from memstrata.cli.common import CONTEXT_SETTINGS, run_cli
from memstrata.cli.config_cmds import config_group


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="memstrata")
def cli() -> None:
    """Layered long-term memory for LLM agents.

    \b
    Example:
        memstrata memory add "User prefers concise answers" --target user
    """


cli.add_command(config_group)


def main() -> None:
    """Console-script entry point: run the CLI, turning library errors into messages."""
    run_cli(cli)
