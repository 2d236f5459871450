"""``memstrata namespaces``: the tenants of a PostgreSQL database, listed and deleted.

Every tenant's rows share the database's tables, told apart by their namespace; these
commands are the administrator's view across them (``store.namespace`` picks the one the
other commands work on).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from memstrata.backends import open_store, postgres_dsn
from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table
from memstrata.config import Config

__all__ = ["namespaces_group"]


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M")


@click.group("namespaces", context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.pass_context
def namespaces_group(ctx: click.Context) -> None:
    """List or delete the namespaces (tenants) of the PostgreSQL database in store.dsn.

    \b
    Example:
        memstrata namespaces list
        memstrata namespaces delete alice --yes
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(namespaces_list)


@namespaces_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def namespaces_list(as_json: bool) -> None:
    """List every namespace with its sessions, messages and memory rows.

    On the default SQLite store there is one (this home's state.db).

    \b
    Example:
        memstrata namespaces list --json
    """
    config = Config.load()
    with open_store(config) as store:
        rows = store.list_namespaces()
    current = str(config.get("store.namespace")) if postgres_dsn(config) else None
    if as_json:
        echo_json([{**r, "current": r["namespace"] == current} for r in rows])
        return
    if not rows:
        click.echo("No namespace holds any rows yet.")
        return
    echo_table(
        ["namespace", "sessions", "messages", "memory", "last active (UTC)"],
        [
            (
                "(this home's state.db)"
                if r["namespace"] is None
                else r["namespace"] + (" *" if r["namespace"] == current else ""),
                r["sessions"],
                r["messages"],
                r["memory_rows"],
                _when(r["last_active"]),
            )
            for r in rows
        ],
        title="Namespaces (* = store.namespace)" if current else "Namespaces",
    )


@namespaces_group.command("delete")
@click.argument("namespace")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows deleted per table.")
def namespaces_delete(namespace: str, yes: bool, as_json: bool) -> None:
    """Delete every row of NAMESPACE: sessions, messages, memory and its history.

    Other namespaces are untouched. There is no undo: export first
    (`MEMSTRATA_STORE__NAMESPACE=NAME memstrata export --out DIR`) if in doubt.

    \b
    Example:
        memstrata namespaces delete alice --yes
    """
    config = Config.load()
    dsn = postgres_dsn(config)
    if dsn is None:
        raise click.ClickException(
            "Namespaces live in PostgreSQL; this home keeps its sessions in state.db, where "
            "`memstrata sessions prune` or `memstrata forget` delete them. Point store.dsn "
            "at a server to manage its namespaces."
        )
    from memstrata.store.postgres import PostgresSessionStore

    with PostgresSessionStore(dsn, namespace=namespace, config=config) as store:
        found: dict[str, Any] | None = next(
            (r for r in store.list_namespaces() if r["namespace"] == store.namespace), None
        )
        if found is None:
            names = ", ".join(str(r["namespace"]) for r in store.list_namespaces()) or "none"
            raise click.ClickException(
                f"No namespace {namespace!r} holds any rows (namespaces: {names})."
            )
        if not yes:
            click.confirm(
                f"Delete namespace {namespace!r}: {found['sessions']} session(s), "
                f"{found['messages']} message(s) and its curated memory, for good?",
                abort=True,
            )
        deleted = store.delete_namespace()
    if as_json:
        echo_json({"namespace": namespace, "deleted": deleted})
        return
    click.echo(
        f"Deleted namespace {namespace!r}: "
        + ", ".join(f"{n} {table}" for table, n in deleted.items() if n)
        + "."
    )
