"""The ``memstrata`` command line. Subcommand groups live in sibling modules."""

from __future__ import annotations

import click

from memstrata import __version__
from memstrata.cli.chat_cmds import chat_command
from memstrata.cli.common import CONTEXT_SETTINGS, run_cli
from memstrata.cli.config_cmds import config_group
from memstrata.cli.memory_cmds import memory_group
from memstrata.cli.plugins_cmds import plugins_group
from memstrata.cli.search_cmds import search_command
from memstrata.cli.sessions_cmds import sessions_group


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="memstrata")
def cli() -> None:
    """Layered long-term memory for LLM agents.

    \b
    Example:
        memstrata memory add "User prefers concise answers" --target user
    """


cli.add_command(chat_command)
cli.add_command(config_group)
cli.add_command(memory_group)
cli.add_command(plugins_group)
cli.add_command(search_command)
cli.add_command(sessions_group)


def main() -> None:
    """Console-script entry point: run the CLI, turning library errors into messages."""
    run_cli(cli)
