"""``memstrata plugins``: list the memory providers that can be selected."""

from __future__ import annotations

import click

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table
from memstrata.config import Config
from memstrata.providers.plugins import discover_providers, provider_status


@click.group("plugins", context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.pass_context
def plugins_group(ctx: click.Context) -> None:
    """Memory providers: bundled, installed with pip, or in $MEMSTRATA_HOME/plugins.

    \b
    Example:
        memstrata plugins list --json
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(plugins_list)


@plugins_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins_list(as_json: bool) -> None:
    """List memory providers with their origin and whether they can run here.

    The one named by memory.provider is marked active. A plugin that fails to import
    is listed with its error.

    \b
    Example:
        memstrata plugins list
        memstrata config set memory.provider NAME
    """
    config = Config.load()
    active = str(config.get("memory.provider")).strip()
    rows = []
    for info in discover_providers(config.home).values():
        status = dict(provider_status(info, config))
        status["active"] = info.name == active
        rows.append(status)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(
            "No memory providers found. Install one with pip, or put one in "
            f"{config.home / 'plugins'}/<name>/__init__.py (see `memstrata help providers`)."
        )
        return
    echo_table(
        ["name", "origin", "available", "active", "error"],
        [
            [
                r["name"],
                r["origin"],
                "yes" if r["available"] else "no",
                "*" if r["active"] else "",
                r["error"] or r["reason"] or "",
            ]
            for r in rows
        ],
        title="Memory providers",
    )
    if active and active not in {r["name"] for r in rows}:
        click.echo(f"memory.provider = {active!r} names no installed provider.", err=True)
