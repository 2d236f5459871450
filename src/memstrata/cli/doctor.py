"""``memstrata doctor``: check the home folder and say how to fix what is wrong."""

from __future__ import annotations

import click

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table
from memstrata.ops.doctor import apply_fixes, run_doctor

_STYLE = {"error": "red", "warning": "yellow", "info": "blue"}


@click.command("doctor", context_settings=CONTEXT_SETTINGS)
@click.option("--fix", is_flag=True, help="Apply the safe fixes (marked auto), then re-check.")
@click.option("--verbose", "-v", is_flag=True, help="Show info findings too.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor_command(fix: bool, verbose: bool, as_json: bool) -> None:
    """Check the configuration, session store, indexes and curated memory.

    Reports database damage, full-text indexes out of step with the messages, memory
    budget use per file, duplicate and near-duplicate entries, entries the threat
    scanner flags, files left by crashed writers and an invalid config.toml; each
    finding with its severity and the command that fixes it. --fix removes stale temp
    files, rebuilds damaged indexes and drops exact duplicate entries. Exits 1 when an
    error remains.

    \b
    Example:
        memstrata doctor
        memstrata doctor --fix --json
    """
    report = run_doctor()
    fixed: list[str] = []
    if fix:
        fixed = apply_fixes(report)
        if fixed:
            report = run_doctor()
            report.fixed = fixed
    if as_json:
        echo_json(report.as_dict())
    else:
        shown = [f for f in report.findings if verbose or f.severity != "info"]
        for line in fixed:
            click.echo(f"fixed: {line}")
        if shown:
            echo_table(
                ["severity", "finding", "fix"],
                [
                    (f.severity, f.message, (f.fix or "") + (" (auto)" if f.auto else ""))
                    for f in shown
                ],
                title=f"memstrata doctor: {report.home}",
            )
        counts = report.counts()
        status = "ok" if report.ok else "problems found"
        click.secho(
            f"{status}: {counts['error']} error(s), {counts['warning']} warning(s), "
            f"{counts['info']} note(s); checked {', '.join(report.checks)}.",
            fg="green" if report.ok else _STYLE["error"],
        )
        if any(f.auto for f in report.findings) and not fix:
            click.echo("Run `memstrata doctor --fix` to apply the fixes marked (auto).")
    if not report.ok:
        raise click.exceptions.Exit(1)
