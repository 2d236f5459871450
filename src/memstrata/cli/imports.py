"""``memstrata import``: bring conversations and memories in from Hermes, ChatGPT, Claude,
OpenAI-format JSONL or a memstrata export."""

from __future__ import annotations

from pathlib import Path

import click

from memstrata.backends import open_memory, open_store
from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table, progress_bar
from memstrata.ops.importing import FORMAT_NAMES, ImportReport, import_source

SHOWN_PROBLEMS = 20


def _summary(report: ImportReport) -> None:
    bad_messages = report.bad_messages
    echo_table(
        ["", "added", "topped up", "skipped", "bad / refused"],
        [
            (
                "sessions",
                report.sessions_added,
                report.sessions_topped_up,
                report.sessions_skipped,
                len(report.bad) - bad_messages,
            ),
            ("messages", report.messages_added, "", report.messages_skipped, bad_messages),
            (
                "memory entries",
                report.memory_added,
                "",
                report.memory_skipped,
                len(report.memory_refused),
            ),
        ],
        title=f"Imported {report.source} ({report.format})",
    )
    problems = [f"bad record {b}" for b in report.bad]
    problems += [f"refused {r.target} entry {r.entry!r}: {r.reason}" for r in report.memory_refused]
    problems += report.notes
    for line in problems[:SHOWN_PROBLEMS]:
        click.echo(line, err=True)
    if len(problems) > SHOWN_PROBLEMS:
        click.echo(
            f"... and {len(problems) - SHOWN_PROBLEMS} more; --json lists every one.", err=True
        )


@click.command("import", context_settings=CONTEXT_SETTINGS)
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *FORMAT_NAMES]),
    default="auto",
    show_default=True,
    help="Source format; auto tells it from the files.",
)
@click.option("--no-memory", is_flag=True, help="Do not merge MEMORY.md / USER.md entries.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def import_command(source: Path, fmt: str, no_memory: bool, as_json: bool) -> None:
    """Import sessions (and memory files) from another tool or a memstrata export.

    SOURCE is a Hermes home (state.db and memories/), a ChatGPT or Claude
    conversations.json, an OpenAI-format JSONL file (one {"messages": [...]} per line),
    or a folder written by `memstrata export`. Importing twice adds nothing: sessions
    already imported are skipped, or topped up when the source has more messages. Bad
    records are listed with their position and skipped; the rest is imported. Memory
    entries go through the threat scanner and the budget; refused ones are listed.

    \b
    Example:
        memstrata import ~/.hermes
        memstrata import ~/Downloads/chatgpt-export/conversations.json
        memstrata import chats.jsonl --format openai --json
    """
    memory = None if no_memory else open_memory()
    with open_store() as store, progress_bar() as bar:
        task = bar.add_task(f"importing {source.name}", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = import_source(
            source, store, memory, fmt=None if fmt == "auto" else fmt, progress=progress
        )
    if as_json:
        echo_json(report.as_dict())
    else:
        _summary(report)
