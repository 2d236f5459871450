"""``memstrata config``: show, set and locate config.toml."""

from __future__ import annotations

import click
import tomlkit

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json
from memstrata.config import CONFIG_FILENAME, Config, ensure_home, memstrata_home, parse_assignment
from memstrata.fileio import atomic_write, file_lock, read_text
from memstrata.scanner.redaction import redact_data, redact_value


@click.group("config", context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.pass_context
def config_group(ctx: click.Context) -> None:
    """Show or change settings in $MEMSTRATA_HOME/config.toml.

    \b
    Example:
        memstrata config set memory.memory_char_limit 4000
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(config_show)


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_show(as_json: bool) -> None:
    """Print every setting in effect (defaults, file, environment).

    \b
    Example:
        memstrata config show --json
    """
    cfg = Config.load()
    # Secret-like keys are masked and DSN passwords hidden, in both forms alike.
    shown = {s: redact_data(dict(v)) for s, v in cfg.values.items()}
    if as_json:
        echo_json(shown)
        return
    for section, values in shown.items():
        click.echo(f"[{section}]")
        for key, value in values.items():
            click.echo(f"{key} = {value!r}")
        click.echo()


@config_group.command("set")
@click.argument("key")
@click.argument("value")
def config_set(key: str, value: str) -> None:
    """Set KEY (section.key) to VALUE in config.toml, keeping comments.

    \b
    Example:
        memstrata config set store.durability full
    """
    section, name, cast = parse_assignment(key, value)
    home = ensure_home()
    path = home / CONFIG_FILENAME
    with file_lock(path.with_name(CONFIG_FILENAME + ".lock")):
        doc = tomlkit.parse(read_text(path) or "")
        table = doc.get(section)
        if table is None:
            table = tomlkit.table()
            doc[section] = table
        table[name] = cast
        # A config.toml linked from a dotfiles folder is a user's choice: write the real file.
        atomic_write(path, tomlkit.dumps(doc), follow_symlinks=True)
    Config.load()  # refuse nothing silently: re-validate the whole file now
    click.echo(f"{key} = {redact_value(key, cast)!r}")


@config_group.command("path")
def config_path() -> None:
    """Print the path of config.toml.

    \b
    Example:
        memstrata config path
    """
    click.echo(str(memstrata_home() / CONFIG_FILENAME))
