"""Shared CLI plumbing: error handling, JSON output, tables, progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memstrata.cli.terminal import raw, shown_output
from memstrata.errors import MemstrataError

if TYPE_CHECKING:
    from memstrata.config import Config
    from memstrata.memory.core import CuratedMemory
    from memstrata.memory.writes import MemoryWrite

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def run_cli(group: click.Group) -> None:
    """Run ``group`` and exit with its verdict: 0 ok, 1 problems found (or an error), 2 usage.

    A MemstrataError becomes ``Error: <message>`` and exit code 1.
    """
    for arg in sys.argv[1:]:
        # Bytes that are not UTF-8 reach Python as lone surrogates, which no file,
        # database or terminal can take: refuse them here, once, for every command.
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            given = arg.encode("utf-8", "surrogateescape")
            click.echo(
                f"Error: the argument {given!r} is not valid UTF-8 text. Re-type it, or use a "
                "UTF-8 terminal (LANG=C.UTF-8).",
                err=True,
            )
            sys.exit(2)
    with shown_output():  # stored text reaches the screen as text (memstrata.cli.terminal)
        code = _run(group)
    # Command callbacks return None (mypy holds them to it), so an int here is an exit code.
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)


def _run(group: click.Group) -> Any:
    try:
        # Outside standalone mode click hands back the code a command exits with
        # (``raise click.exceptions.Exit(1)`` for "problems found") instead of exiting;
        # dropping it would let `doctor` report errors to cron or CI with status 0.
        return group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except MemstrataError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        # A path the file system refuses (a name too long, a folder where a file belongs,
        # no permission): name it and the reason instead of printing a traceback.
        click.echo(f"Error: {os_error_text(exc)}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def os_error_text(exc: OSError) -> str:
    """What the file system refused and why, with the path shortened for the terminal."""
    name = str(exc.filename) if exc.filename is not None else ""
    if len(name) > 80:
        name = f"{name[:40]}…{name[-20:]} ({len(name)} characters)"
    where = f" {name!r}" if name else ""
    reason = exc.strerror or str(exc)
    return (
        f"the file system refused{where}: {reason}. Check the path (its length, that it "
        "names a file and not a folder) and that you may read and write there."
    )


def open_cli_memory(config: Config) -> CuratedMemory:
    """The curated memory ``store.dsn`` names (files, or PostgreSQL rows), closed with the
    command. Editing the files while agents read PostgreSQL rows would change nothing
    they see; writes made here are the user's own, so the history names the CLI.

    When ``memory.provider`` names an external provider, the writes made by the command
    are mirrored to it (``on_memory_write``, origin ``cli``) as the command closes. The
    provider is started only then, and only if something was written: reads and a
    command without a provider stay as fast as the file access.
    """
    from memstrata.backends import open_memory
    from memstrata.closing import Closing

    memory = open_memory(config, actor="cli")
    context = click.get_current_context()
    if str(config.get("memory.provider")).strip():
        writes: list[MemoryWrite] = []
        stop = memory.add_write_listener(writes.append)
        context.call_on_close(lambda: _mirror_cli_writes(config, memory, writes, stop))
    if isinstance(memory, Closing):
        context.call_on_close(memory.close)
    return memory


def _mirror_cli_writes(
    config: Config, memory: CuratedMemory, writes: list[MemoryWrite], stop: Callable[[], None]
) -> None:
    stop()
    if not writes:
        return
    from memstrata.providers.manager import MemoryManager

    try:
        manager = MemoryManager.from_config(config, memory=memory)
    except MemstrataError as exc:
        click.echo(
            f"Warning: the write was saved but not mirrored to memory.provider: {exc}",
            err=True,
        )
        return
    try:
        manager.initialize_all("cli", platform="cli")
        for write in writes:
            manager.mirror_write(write)
    finally:
        report = manager.shutdown_all()
    if not report.drained:
        click.echo(
            "Warning: the memory provider did not take the write within "
            f"{manager.sync_drain_timeout:g} s; it was saved here but not mirrored.",
            err=True,
        )


def echo_json(data: Any) -> None:
    """Print ``data`` as JSON (UTF-8, not ASCII-escaped)."""
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


# Columns holding what a person types back into another command: a narrow terminal
# squeezes the other columns instead, since a cut id ("2026…") resolves to nothing.
WHOLE_COLUMNS = frozenset({"id", "session"})


def echo_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str = "") -> None:
    """Print a rich table in a terminal; tab-separated lines under a header row when piped.

    Cells of the ``id`` and ``session`` columns are never cut short.
    """
    rows = list(rows)
    if not sys.stdout.isatty():
        # The header row lets scripts (cut, awk, pandas) address columns by name.
        for row in [columns, *rows]:
            click.echo("\t".join(_cell(v) for v in row))
        return
    table = Table(title=title or None)
    for index, col in enumerate(columns):
        if col in WHOLE_COLUMNS:
            width = max((len(_cell(row[index])) for row in rows), default=0)
            table.add_column(col, no_wrap=True, min_width=max(width, len(col)))
        else:
            table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    Console().print(table)


def shown_ids(store: Any, session_ids: Iterable[str]) -> dict[str, str]:
    """How a table shows each session id: in a terminal the shortest prefix that every
    command resolves (a full id overflows 80 columns); piped, the full id, since a
    script may keep it while new sessions make a short prefix ambiguous."""
    ids = list(session_ids)
    if not sys.stdout.isatty():
        return {sid: sid for sid in ids}
    return dict(store.short_ids(ids))


def _cell(value: Any) -> str:
    # Tabs and newlines inside a value would break the piped form into extra columns/rows.
    return "" if value is None else " ".join(str(value).split("\t")).replace("\n", " ")


def progress_bar(*, hidden: bool = False) -> Progress:
    """A transient progress bar on stderr (stdout stays clean for ``--json`` and pipes).

    Drawn only when stderr is a terminal (a log file gets no bar remnants) and not
    ``hidden`` (a command's ``--json`` asks for no decoration at all).
    """
    # The raw terminal: a bar moves the cursor on purpose, and shows the command's words.
    console = Console(file=raw(sys.stderr))
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=hidden or not console.is_terminal,
    )


def human_bytes(n: int | float) -> str:
    """``1536`` -> ``"1.5 KB"`` (decimal units, as file managers show sizes)."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"  # pragma: no cover - the loop always returns
