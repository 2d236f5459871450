"""``memstrata forget``: remove sessions or messages from the store, every index and cache."""

from __future__ import annotations

from datetime import datetime

import click

from memstrata.backends import open_store
from memstrata.cli.common import (
    CONTEXT_SETTINGS,
    echo_json,
    echo_table,
    open_cli_memory,
    progress_bar,
)
from memstrata.config import Config
from memstrata.errors import MemstrataError
from memstrata.memory.core import CuratedMemory
from memstrata.memory.format import FILE_NAMES, TARGETS
from memstrata.ops.forget import ForgetPlan, forget, history_terms, plan_forget
from memstrata.query.paging import MAX_PAGE
from memstrata.tools.session_search import parse_time


def _time(value: str | None, name: str, *, end_of_day: bool = False) -> float | None:
    try:
        return parse_time(value, name, end_of_day=end_of_day)
    except MemstrataError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _still_in_memory(memory: CuratedMemory | None, query: str | None) -> list[str]:
    """The live memory files that still hold every term of ``query``."""
    if memory is None or query is None:
        return []
    terms = history_terms(query)
    return [
        FILE_NAMES[target]
        for target in TARGETS
        if terms and all(t in "\n".join(memory.entries(target)).casefold() for t in terms)
    ]


def _show_plan(plan: ForgetPlan) -> None:
    if plan.session_ids:
        click.echo(f"Sessions: {', '.join(plan.session_ids)}")
    if plan.memory_changes:
        ids = ", ".join(str(i) for i in plan.memory_changes)
        click.echo(f"Memory history changes: {ids}")
    echo_table(
        ["message", "session", "role", "when", "text"],
        [
            (m["id"], m["session_id"], m["role"], _when(m["timestamp"]), m["preview"])
            for m in plan.messages
        ],
        title="Would be forgotten",
    )


@click.command("forget", context_settings=CONTEXT_SETTINGS)
@click.argument("sessions", nargs=-1, metavar="[SESSION]...")
@click.option("--message", "message_ids", multiple=True, type=int, help="A message id.")
@click.option("--query", default=None, help="Forget the messages this search finds.")
@click.option("--since", default=None, help="From this date/time (YYYY-MM-DD[THH:MM], UTC).")
@click.option("--until", default=None, help="Up to this date/time (a date includes the day).")
@click.option(
    "--session-only",
    is_flag=True,
    help="A SESSION brings only itself (and its sub-agents), not its whole conversation.",
)
@click.option(
    "--max",
    "max_messages",
    default=100,
    show_default=True,
    type=click.IntRange(1, MAX_PAGE),
    help="Refuse a query matching more messages than this.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be forgotten; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-scrub", is_flag=True, help="Skip overwriting the freed bytes (faster).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def forget_command(
    sessions: tuple[str, ...],
    message_ids: tuple[int, ...],
    query: str | None,
    since: str | None,
    until: str | None,
    session_only: bool,
    max_messages: int,
    dry_run: bool,
    yes: bool,
    no_scrub: bool,
    as_json: bool,
) -> None:
    """Forget sessions or messages: gone from the store, every index and the summary cache.

    SESSION is an id, an id prefix or a title, and brings its whole conversation (the
    compressed parts before and after it, sub-agent sessions). --query forgets the
    messages a search finds (narrowed by --since/--until); --since/--until alone forget
    every message in that time range. Shows what goes and asks first (unless --yes), then
    reports what was removed from each place. The freed bytes are overwritten too.

    \b
    Example:
        memstrata forget --query '"my old address"' --dry-run
        memstrata forget 20260105_1015 --yes
        memstrata forget --since 2026-03-01 --until 2026-03-02 --json --yes
    """
    if not (sessions or message_ids or query is not None or since or until):
        raise click.UsageError(
            "Say what to forget: a SESSION id, --message ID, --query TEXT or --since/--until."
        )
    # A query also finds the curated-memory history rows holding it (a secret removed
    # with `memory remove` stays in the history until forgotten).
    memory = open_cli_memory(Config.load()) if query is not None else None
    history = memory.history if memory is not None else None
    with open_store() as store:
        plan = plan_forget(
            store,
            sessions=sessions,
            whole_conversations=not session_only,
            message_ids=message_ids,
            query=query,
            since=_time(since, "since"),
            until=_time(until, "until", end_of_day=True),
            max_messages=max_messages,
            memory_history=history,
        )
        if plan.is_empty:
            if as_json:
                echo_json({"dry_run": dry_run, "plan": plan.as_dict(), "report": None})
            else:
                click.echo("Nothing matches: nothing was forgotten.")
            return
        if dry_run:
            if as_json:
                echo_json({"dry_run": True, "plan": plan.as_dict(), "report": None})
            else:
                _show_plan(plan)
                click.echo(f"Would forget {plan.describe()}.")
            return
        if not yes:
            if not as_json:
                _show_plan(plan)
            click.confirm(f"Forget {plan.describe()}? This cannot be undone.", abort=True)
        with progress_bar() as bar:
            # Indeterminate: the index merge that scrubs the file is one long statement.
            bar.add_task("forgetting" if no_scrub else "forgetting and scrubbing", total=None)
            report = forget(store, plan, scrub=not no_scrub, memory_history=history)
        still = _still_in_memory(memory, query)
    if as_json:
        echo_json({"dry_run": False, "plan": plan.as_dict(), "report": report.as_dict()})
        return
    echo_table(["removed", "count"], sorted(report.removed.items()), title="Forgotten")
    if report.sessions:
        click.echo(f"Sessions deleted: {', '.join(report.sessions)}")
    if report.scrubbed:
        click.echo("Freed space overwritten; full-text indexes merged.")
    if still:
        click.echo(
            f"{' and '.join(still)} still hold(s) it: remove the entry with "
            "`memstrata memory remove`, then run this again to clear the history of it.",
            err=True,
        )
