"""``memstrata hermes install|uninstall``: the Hermes Agent memory-provider plugin folder."""

from __future__ import annotations

from pathlib import Path

import click

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json

_HOME_OPTION = click.option(
    "--hermes-home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Hermes' home folder (default: $HERMES_HOME, else ~/.hermes).",
)


@click.group("hermes", context_settings=CONTEXT_SETTINGS)
def hermes_group() -> None:
    """Use memstrata as Hermes Agent's memory provider.

    \b
    Example:
        memstrata hermes install && hermes config set memory.provider memstrata
    """


@hermes_group.command("install", context_settings=CONTEXT_SETTINGS)
@_HOME_OPTION
@click.option("--force", is_flag=True, help="Replace another plugin folder named memstrata.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def install_command(hermes_home: Path | None, force: bool, as_json: bool) -> None:
    """Write the plugin folder $HERMES_HOME/plugins/memstrata (idempotent).

    The folder imports this memstrata installation; settings are asked by
    `hermes memory setup` and stored in $HERMES_HOME/memstrata.json.

    \b
    Example:
        memstrata hermes install --hermes-home ~/.hermes
    """
    from memstrata.integrations.hermes.plugin import install

    report = install(hermes_home, force=force)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.message)


@hermes_group.command("uninstall", context_settings=CONTEXT_SETTINGS)
@_HOME_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def uninstall_command(hermes_home: Path | None, as_json: bool) -> None:
    """Remove the plugin folder written by `memstrata hermes install`.

    memstrata's data (state.db, facts.db under the memstrata home) is kept.

    \b
    Example:
        memstrata hermes uninstall
    """
    from memstrata.integrations.hermes.plugin import uninstall

    report = uninstall(hermes_home)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.message)
