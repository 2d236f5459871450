"""The ``memstrata`` command line. Subcommand groups live in sibling modules.

Subcommands are imported only when they run (or when help lists them): a command's
module pulls in its layer (the store, the LLM seam, ...), and ``memstrata --version`` or
``memstrata memory add`` should not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import cast

import click

from memstrata import __version__
from memstrata.cli.common import CONTEXT_SETTINGS, run_cli

# name -> "module:attribute" of the click command.
COMMANDS: dict[str, str] = {
    "chat": "memstrata.cli.chat:chat_command",
    "config": "memstrata.cli.config:config_group",
    "curate": "memstrata.cli.curate:curate_command",
    "doctor": "memstrata.cli.doctor:doctor_command",
    "export": "memstrata.cli.export:export_command",
    "forget": "memstrata.cli.forget:forget_command",
    "help": "memstrata.cli.help:help_command",
    "hermes": "memstrata.cli.hermes:hermes_group",
    "import": "memstrata.cli.imports:import_command",
    "mcp": "memstrata.cli.mcp:mcp_command",
    "memory": "memstrata.cli.memory:memory_group",
    "migrate": "memstrata.cli.migrate:migrate_command",
    "namespaces": "memstrata.cli.namespaces:namespaces_group",
    "plugins": "memstrata.cli.plugins:plugins_group",
    "search": "memstrata.cli.search:search_command",
    "sessions": "memstrata.cli.sessions:sessions_group",
    "ui": "memstrata.cli.ui:ui_command",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module_name, _, attr = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attr)
            self.add_command(cast(click.Command, command), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="memstrata")
def cli() -> None:
    """Layered long-term memory for LLM agents.

    \b
    Example:
        memstrata memory add "User prefers concise answers" --target user
    """


def main() -> None:
    """Console-script entry point: run the CLI, turning library errors into messages."""
    run_cli(cli)
