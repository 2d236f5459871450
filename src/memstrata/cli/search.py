"""``memstrata search``: recall past conversations from the terminal (session_search)."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from memstrata.backends import open_store, postgres_dsn
from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table, shown_ids
from memstrata.config import Config
from memstrata.errors import MemstrataError, StorageError
from memstrata.search.read import MAX_WINDOW
from memstrata.search.recall import MAX_LIMIT, session_search
from memstrata.store.contract import SessionStoreContract
from memstrata.store.sqlite.store import DB_FILENAME
from memstrata.tools.session_search import parse_time


def _time(value: str | None, name: str, *, end_of_day: bool = False) -> float | None:
    try:
        return parse_time(value, name, end_of_day=end_of_day)
    except MemstrataError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


def _open(config: Config) -> SessionStoreContract:
    try:
        return open_store(config)
    except StorageError:
        if postgres_dsn(config) is not None or not (config.home / DB_FILENAME).exists():
            raise
        # A home we may read but not write (a read-only mount, another user's folder):
        # searching needs no write, and the summary cache is best effort.
        return open_store(config, readonly=True)


def _indent(text: str) -> str:
    return textwrap.indent(text.strip(), "    ")


def _print_discover(result: dict[str, Any]) -> None:
    for number, hit in enumerate(result["results"], start=1):
        label = hit["title"] or hit["conversation_root"]
        click.secho(
            f"{number}. {label}  [{hit['source']}, {hit['started']}]  "
            f"session {hit['session_id']}, message {hit['match_message_id']}",
            bold=True,
        )
        if "summary" in hit:
            origin = " (cached)" if hit.get("summary_origin") == "cache" else ""
            click.echo(f"  Summary{origin}:")
            click.echo(_indent(hit["summary"]))
        else:
            if "summary_error" in hit:
                click.echo(f"  (no summary: {hit['summary_error']})")
            click.echo(_indent(hit["excerpt"]))
        click.echo()
    click.echo(result["message"])
    unavailable = result.get("summaries", {}).get("unavailable")
    if unavailable and result["results"]:
        click.echo(f"Summaries off: {unavailable}.", err=True)


def _print_messages(result: dict[str, Any]) -> None:
    for message in result["messages"]:
        marker = "> " if message.get("anchor") else "  "
        body = message["content"] or "; ".join(message.get("tool_calls", []))
        click.echo(f"{marker}#{message['id']} {message['role']} ({message['when']}):")
        click.echo(_indent(body))
    if result.get("hint"):
        click.echo(result["hint"])


@click.command("search", context_settings=CONTEXT_SETTINGS)
@click.argument("query", required=False, default="")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=None,
    help=f"Conversations to show (default: search.limit, max {MAX_LIMIT}).",
)
@click.option("--role", "roles", multiple=True, help="Only match this role (repeatable).")
@click.option("--source", "sources", multiple=True, help="Only this source (repeatable).")
@click.option("--since", default=None, help="From this date/time (YYYY-MM-DD[THH:MM], UTC).")
@click.option("--until", default=None, help="Up to this date/time (a date includes the day).")
@click.option("--session", "session_id", default=None, help="Read this session instead.")
@click.option(
    "--around",
    "around_message_id",
    type=int,
    default=None,
    help="With --session: show the messages around this message id.",
)
@click.option(
    "--window",
    type=click.IntRange(1, MAX_WINDOW),
    default=None,
    help="Messages each side of --around (default 5).",
)
@click.option("--no-summary", is_flag=True, help="Verbatim excerpts only; no model call.")
@click.option("--json", "as_json", is_flag=True, help="Print the tool's JSON result.")
def search_command(
    query: str,
    limit: int | None,
    roles: tuple[str, ...],
    sources: tuple[str, ...],
    since: str | None,
    until: str | None,
    session_id: str | None,
    around_message_id: int | None,
    window: int | None,
    no_summary: bool,
    as_json: bool,
) -> None:
    """Search everything you ever discussed; without QUERY, list recent conversations.

    Each match comes with a summary focused on QUERY when a summary model is configured
    (llm.summary_model or llm.model), or a verbatim excerpt otherwise.

    \b
    Example:
        memstrata search "nginx deadlock" --since 2026-01-01 --limit 5
        memstrata search --session 20260105_101500_ab12cd --around 4182 --window 10
    """
    config = Config.load()
    try:
        with _open(config) as store:
            result = session_search(
                store,
                query,
                limit=limit if limit is not None else int(config.get("search.limit")),
                role_filter=list(roles) or None,
                source=list(sources) or None,
                since=_time(since, "since"),
                until=_time(until, "until", end_of_day=True),
                session_id=session_id,
                around_message_id=around_message_id,
                window=window,
                summarize=False if no_summary else None,
                config=config,
            )
            listed = (
                [r["session_id"] for r in result["results"]] if result["mode"] == "recent" else []
            )
            short = {} if as_json else shown_ids(store, listed)
    except MemstrataError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(result)
        return
    if result["mode"] == "recent":
        echo_table(
            ("session", "title", "source", "last active", "messages", "preview"),
            (
                (
                    short[r["session_id"]],
                    r["title"],
                    r["source"],
                    r["last_active"],
                    r["message_count"],
                    r["preview"],
                )
                for r in result["results"]
            ),
            title="Recent conversations",
        )
        return
    if result["mode"] == "discover":
        _print_discover(result)
        return
    _print_messages(result)
