"""``memstrata sessions``: list, show, rename, delete, prune and maintain stored sessions."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table
from memstrata.errors import SessionNotFoundError
from memstrata.store import SessionStore


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _resolve(store: SessionStore, ref: str) -> str:
    """An id, a unique id prefix, or a title (its newest "#N" continuation)."""
    try:
        return store.resolve_session_id(ref)
    except SessionNotFoundError:
        by_title = store.resolve_session_by_title(ref)
        if by_title is None:
            raise
        return by_title


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


@click.group("sessions", context_settings=CONTEXT_SETTINGS, invoke_without_command=True)
@click.pass_context
def sessions_group(ctx: click.Context) -> None:
    """List, inspect and maintain the stored sessions (state.db).

    \b
    Example:
        memstrata sessions list --limit 5
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(sessions_list)


@sessions_group.command("list")
@click.option("--source", default=None, help="Only sessions from this source (cli, mcp, ...).")
@click.option("--exclude-source", multiple=True, help="Hide sessions from this source.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--offset", default=0, type=click.IntRange(min=0))
@click.option("--all", "include_archived", is_flag=True, help="Include archived sessions.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_list(
    source: str | None,
    exclude_source: tuple[str, ...],
    limit: int,
    offset: int,
    include_archived: bool,
    as_json: bool,
) -> None:
    """List conversations, newest activity first (one row per compression chain).

    \b
    Example:
        memstrata sessions list --source cli --json
    """
    with SessionStore() as store:
        rows = store.list_sessions_rich(
            source=source,
            exclude_sources=list(exclude_source) or None,
            limit=limit,
            offset=offset,
            include_archived=include_archived,
        )
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "title", "source", "msgs", "last active", "preview"],
        [
            (
                r["id"],
                r["title"] or "",
                r["source"],
                r["message_count"],
                _when(r["last_active"] or r["started_at"]),
                r["preview"],
            )
            for r in rows
        ],
        title="Sessions",
    )


@sessions_group.command("show")
@click.argument("session")
@click.option("--all", "include_inactive", is_flag=True, help="Include archived messages.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_show(session: str, include_inactive: bool, as_json: bool) -> None:
    """Print a session's details and messages (SESSION: id, id prefix or title).

    \b
    Example:
        memstrata sessions show 20250101_1200
    """
    with SessionStore() as store:
        sid = _resolve(store, session)
        info = store.get_session(sid)
        messages = store.get_messages(sid, include_inactive=include_inactive)
    if as_json:
        echo_json({"session": info, "messages": messages})
        return
    assert info is not None
    click.echo(f"{sid}  {info['title'] or ''}".rstrip())
    click.echo(
        f"source={info['source']} model={info['model'] or '-'} "
        f"started={_when(info['started_at'])} ended={_when(info['ended_at']) or '-'} "
        f"end_reason={info['end_reason'] or '-'} messages={info['message_count']}"
    )
    if info["parent_session_id"]:
        click.echo(f"parent={info['parent_session_id']} ({info['lineage_kind'] or 'unrecorded'})")
    for m in messages:
        flag = "" if m["active"] else " (archived)"
        name = f" {m['tool_name']}" if m["tool_name"] else ""
        click.echo(f"\n[{m['id']}] {m['role']}{name}{flag} {_when(m['timestamp'])}")
        text = _content_text(m["content"])
        if text:
            click.echo(text)
        if m["tool_calls"]:
            click.echo(f"tool_calls: {json.dumps(m['tool_calls'], ensure_ascii=False)}")


@sessions_group.command("rename")
@click.argument("session")
@click.argument("title")
def sessions_rename(session: str, title: str) -> None:
    """Set a session's TITLE (unique; an empty string clears it).

    \b
    Example:
        memstrata sessions rename 20250101_1200 "Kyoto trip"
    """
    with SessionStore() as store:
        sid = _resolve(store, session)
        clean = store.set_session_title(sid, title)
    click.echo(f"{sid}: title {'cleared' if clean is None else repr(clean)}")


@sessions_group.command("delete")
@click.argument("session")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def sessions_delete(session: str, yes: bool) -> None:
    """Delete a session, its messages (from every index) and its sub-agent sessions.

    \b
    Example:
        memstrata sessions delete 20250101_1200 --yes
    """
    with SessionStore() as store:
        sid = _resolve(store, session)
        if not yes:
            click.confirm(f"Delete session {sid} and its messages?", abort=True)
        deleted = store.delete_session(sid)
    click.echo(f"Deleted {len(deleted)} session(s): {', '.join(deleted)}")


@sessions_group.command("prune")
@click.option(
    "--older-than",
    "days",
    default=90.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Days since the session ended.",
)
@click.option("--source", default=None, help="Only sessions from this source.")
@click.option("--dry-run", is_flag=True, help="List what would be deleted.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the ids as JSON.")
def sessions_prune(
    days: float, source: str | None, dry_run: bool, yes: bool, as_json: bool
) -> None:
    """Delete sessions that ended more than --older-than days ago (live ones are kept).

    \b
    Example:
        memstrata sessions prune --older-than 30 --source cron --dry-run
    """
    with SessionStore() as store:
        candidates = store.prune_sessions(older_than=days, source=source, dry_run=True)
        if dry_run or not candidates:
            ids = candidates
        else:
            if not yes:
                click.confirm(f"Delete {len(candidates)} session(s)?", abort=True)
            ids = store.prune_sessions(older_than=days, source=source)
    if as_json:
        echo_json({"dry_run": dry_run, "sessions": ids})
        return
    verb = "Would delete" if dry_run else "Deleted"
    click.echo(f"{verb} {len(ids)} session(s).")
    for sid in ids:
        click.echo(sid)


@sessions_group.command("reindex")
def sessions_reindex() -> None:
    """Rebuild the three full-text indexes (word, trigram, CJK) from the messages.

    \b
    Example:
        memstrata sessions reindex
    """
    with (
        SessionStore(verify_indexes=False) as store,
        Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), transient=True
        ) as bar,
    ):
        tasks: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or 1)
            bar.update(tasks[stage], completed=done if total else 1)

        counts = store.reindex(report)
    for table, rows in counts.items():
        click.echo(f"{table}: {rows} rows")


@sessions_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_check(as_json: bool) -> None:
    """Check the database file and the full-text indexes; exit 1 when damaged.

    \b
    Example:
        memstrata sessions check
    """
    with SessionStore(verify_indexes=False) as store:
        report = store.integrity_check()
    if as_json:
        echo_json(report)
    else:
        click.echo("ok" if report["ok"] else "damaged")
        for line in [*(x for x in report["sqlite"] if x != "ok"), *report["indexes"]]:
            click.echo(f"  {line}")
        if report["fix"]:
            click.echo(report["fix"])
    if not report["ok"]:
        raise click.exceptions.Exit(1)


@sessions_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_stats(as_json: bool) -> None:
    """Print counts, sizes and the durability mode of the session store.

    \b
    Example:
        memstrata sessions stats --json
    """
    with SessionStore() as store:
        stats = store.stats()
    if as_json:
        echo_json(stats)
        return
    for key, value in stats.items():
        click.echo(f"{key}: {value}")
