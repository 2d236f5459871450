"""Shared CLI plumbing: error handling, JSON output, tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from memstrata.errors import MemstrataError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def run_cli(group: click.Group) -> None:
    """Run ``group``; a MemstrataError becomes ``Error: <message>`` and exit code 1."""
    try:
        group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except MemstrataError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def echo_json(data: Any) -> None:
    """Print ``data`` as JSON (UTF-8, not ASCII-escaped)."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def echo_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "") -> None:
    """Print a rich table in a terminal, tab-separated lines when piped."""
    rows = list(rows)
    if not sys.stdout.isatty():
        for row in rows:
            click.echo("\t".join("" if v is None else str(v) for v in row))
        return
    table = Table(title=title or None)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console().print(table)
