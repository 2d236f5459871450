"""``memstrata curate``: consolidate MEMORY.md and USER.md now.

See :mod:`memstrata.memory.curator`.
"""

from __future__ import annotations

import sys
from typing import Literal

import click
from rich.console import Console

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, open_cli_memory
from memstrata.cli.terminal import raw
from memstrata.config import Config
from memstrata.memory.curator import Curator
from memstrata.memory.format import FILE_NAMES, TARGETS, Target
from memstrata.providers.facts.opening import open_facts


@click.command("curate", context_settings=CONTEXT_SETTINGS)
@click.option("--dry-run", is_flag=True, help="Show the plan; write nothing.")
@click.option(
    "--target",
    "-t",
    type=click.Choice(["all", *TARGETS]),
    default="all",
    show_default=True,
    help="Which file to curate: memory (agent notes), user (user profile) or both.",
)
@click.option(
    "--no-model",
    is_flag=True,
    help="Only remove exact and near duplicates; do not call the curator model.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
def curate_command(
    dry_run: bool, target: Literal["all", "memory", "user"], no_model: bool, as_json: bool
) -> None:
    """Consolidate curated memory: merge duplicates, shorten, drop stale entries.

    Duplicates are found without a model; the curator model (llm.curator_model, else
    llm.model) proposes merges, shorter wording, stale entries and episodic facts to move
    to the facts store, until each file is under curator.budget_share of its budget. A
    plan with any problem is rejected whole and nothing changes. An applied plan is one
    change in `memstrata memory history`; `memstrata memory undo N` reverts it.

    \b
    Example:
        memstrata curate --dry-run
        memstrata curate --target memory
        memstrata memory history --limit 1
    """
    config = Config.load()
    memory = open_cli_memory(config)
    curator = Curator(
        memory, config=config, use_model=False if no_model else None, facts=open_facts
    )
    targets: tuple[Target, ...] = TARGETS if target == "all" else (target,)
    console = Console(file=raw(sys.stderr))  # a spinner moves the cursor on purpose
    reports = []
    for t in targets:
        # The model call may take a while: say what is happening meanwhile (on stderr,
        # and only in a terminal, so --json output stays clean).
        with console.status(f"Curating {FILE_NAMES[t]}…", spinner="dots"):
            reports.append(curator.curate(t, dry_run=dry_run))
    if as_json:
        echo_json([r.to_dict() for r in reports])
    else:
        for report in reports:
            click.echo(report.render())
        if any(r.applied for r in reports):
            click.echo("Undo with `memstrata memory undo N` (N: the change number above).")
    if any(r.rejected for r in reports):
        # A rejected plan is a failure for scripts, though nothing was changed.
        raise SystemExit(1)
