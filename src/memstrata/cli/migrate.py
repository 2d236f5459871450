"""``memstrata migrate``: copy the SQLite home into PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table, progress_bar


@click.command("migrate", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--to",
    "dsn",
    required=True,
    metavar="DSN",
    help="PostgreSQL connection string, e.g. postgresql://user@host:5432/db.",
)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="Tenant the copied rows belong to (a user or an agent).",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Home folder to copy (default: MEMSTRATA_HOME or ~/.memstrata).",
)
@click.option(
    "--overwrite-memory",
    is_flag=True,
    help="Replace curated memory that PostgreSQL already holds with different content.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def migrate_command(
    dsn: str, namespace: str, home: Path | None, overwrite_memory: bool, as_json: bool
) -> None:
    """Copy the SQLite home (sessions, messages, meta, memory, facts) into PostgreSQL.

    Every session with all its fields, every message (archived ones too), state_meta
    and MEMORY.md/USER.md are copied into NAMESPACE. The counts of sessions and
    messages are then compared on both sides; the command exits with status 1 when
    they differ. Running it again is safe: what is already copied is skipped.

    \b
    Example:
        memstrata migrate --to postgresql://127.0.0.1:5432/agents --namespace alice
        memstrata migrate --to postgresql://db.internal/agents --json
    """
    try:
        from memstrata.ops.migrate import migrate_home
    except ImportError as exc:  # psycopg is an optional dependency
        raise click.ClickException(
            f"PostgreSQL support is not installed ({exc}). Install it with "
            "`pip install 'memstrata[postgres]'`, then retry."
        ) from exc

    with progress_bar(hidden=as_json) as bar:
        tasks: dict[str, Any] = {}

        def report_progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(f"Copying {stage}", total=total or 1)
            bar.update(tasks[stage], completed=done if total else 1)

        report = migrate_home(
            dsn,
            namespace=namespace,
            home=home,
            overwrite_memory=overwrite_memory,
            progress=report_progress,
        )
    if as_json:
        echo_json(report.as_dict())
    else:
        echo_table(
            ("", "SQLite", "PostgreSQL"),
            [
                ("sessions", report.sqlite_sessions, report.postgres_sessions),
                ("messages", report.sqlite_messages, report.postgres_messages),
                ("facts", report.sqlite_facts, report.postgres_facts),
            ],
            title=f"memstrata migrate → namespace {report.namespace}",
        )
        click.echo(
            f"{report.sessions_copied} session(s) copied, {report.sessions_unchanged} already "
            f"up to date, {report.meta_keys} meta key(s); memory: "
            + ", ".join(f"{k} {v}" for k, v in report.memory.items())
            + f"; facts: {report.facts} ({report.seconds:.1f} s)."
        )
        for warning in report.warnings:
            click.echo(f"Warning: {warning}", err=True)
        click.echo(
            "Verified: both sides hold the same sessions and messages."
            if report.ok
            else "MISMATCH: the counts differ; run the command again, then check the "
            "warnings above."
        )
    if not report.ok:
        raise click.exceptions.Exit(1)
