"""``memstrata sessions``: list, show, search, export, rename, delete, prune, maintain."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import click

from memstrata.backends import open_store, postgres_dsn
from memstrata.cli.common import (
    CONTEXT_SETTINGS,
    echo_json,
    echo_table,
    human_bytes,
    progress_bar,
    shown_ids,
)
from memstrata.config import Config
from memstrata.errors import MemstrataError
from memstrata.fileio import open_private_output, refuse_symlink
from memstrata.query.paging import MAX_PAGE
from memstrata.query.spelling import searched_as
from memstrata.tools.session_search import parse_time


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


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
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, MAX_PAGE))
@click.option("--offset", default=0, type=click.IntRange(0, MAX_PAGE))
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
    with open_store() as store:
        rows = store.list_sessions_rich(
            source=source,
            exclude_sources=list(exclude_source) or None,
            limit=limit,
            offset=offset,
            include_archived=include_archived,
        )
        # A terminal table shows the shortest prefix each command resolves; --json full ids.
        short = {} if as_json else shown_ids(store, [r["id"] for r in rows])
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["id", "title", "source", "msgs", "last active", "preview"],
        [
            (
                short[r["id"]],
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
@click.option(
    "--session-only",
    is_flag=True,
    help="Only this session, not the rest of its compressed conversation.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_show(session: str, include_inactive: bool, session_only: bool, as_json: bool) -> None:
    """Print a conversation's details and messages (SESSION: id, id prefix or title).

    A compressed conversation is stored as a chain of sessions ("Trip", "Trip #2", ...);
    any of them shows the whole chain, oldest first, as `sessions list` counts it.
    --session-only shows the one session.

    \b
    Example:
        memstrata sessions show 20250101_1200
        memstrata sessions show "Kyoto trip #2" --session-only --json
    """
    with open_store() as store:
        sid = store.resolve_session(session)
        chain = store.get_compression_chain(sid)
        shown = [sid] if session_only else chain
        infos = {i: store.get_session(i) for i in shown}
        messages = {i: store.get_messages(i, include_inactive=include_inactive) for i in shown}
    if as_json:
        echo_json(
            {
                "session": infos[sid],
                "chain": chain,
                "shown": shown,
                "messages": [{**m, "session_id": i} for i in shown for m in messages[i]],
            }
        )
        return
    if len(chain) > 1:
        part = chain.index(sid) + 1
        if session_only:
            click.echo(
                f"Showing session {sid} only: part {part} of {len(chain)} of a compressed "
                "conversation (drop --session-only to see it all)."
            )
        else:
            total = sum(len(v) for v in messages.values())
            click.echo(
                f"Conversation of {len(chain)} sessions ({chain[0]} ... {chain[-1]}), "
                f"{total} messages."
            )
    for index, current in enumerate(shown):
        info = infos[current]
        assert info is not None
        if len(shown) > 1:
            click.echo(f"\n=== part {index + 1} of {len(shown)} ===")
        _print_session(current, info, messages[current])


def _print_session(
    sid: str, info: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> None:
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


def _time(value: str | None, name: str, *, end_of_day: bool = False) -> float | None:
    try:
        return parse_time(value, name, end_of_day=end_of_day)
    except MemstrataError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{name}") from None


@sessions_group.command("search")
@click.argument("query")
@click.option("--role", "roles", multiple=True, help="Only this role (repeatable).")
@click.option("--source", "sources", multiple=True, help="Only this source (repeatable).")
@click.option("--since", default=None, help="From this date/time (YYYY-MM-DD[THH:MM], UTC).")
@click.option("--until", default=None, help="Up to this date/time (a date includes the day).")
@click.option(
    "--sort",
    type=click.Choice(["relevance", "newest", "oldest"]),
    default="relevance",
    show_default=True,
)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, MAX_PAGE))
@click.option("--offset", default=0, type=click.IntRange(0, MAX_PAGE))
@click.option("--all", "include_inactive", is_flag=True, help="Include rewound messages.")
@click.option(
    "--include-tool-traffic",
    is_flag=True,
    help="Also match session_search calls and results (left out: they quote what they found).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
def sessions_search(
    query: str,
    roles: tuple[str, ...],
    sources: tuple[str, ...],
    since: str | None,
    until: str | None,
    sort: str,
    limit: int,
    offset: int,
    include_inactive: bool,
    include_tool_traffic: bool,
    as_json: bool,
) -> None:
    """Search every stored message; one row per matching message, best first.

    The full-text engine behind `memstrata search` and the session_search tool, at
    message level: natural language by default; "phrases", prefix*, AND/OR/NOT,
    substrings of identifiers and Chinese/Japanese text work too. Message ids feed
    `memstrata forget --message` and `memstrata search --session ID --around ID`.

    \b
    Example:
        memstrata sessions search "nginx deadlock" --since 2026-01-01 --limit 5
        memstrata sessions search '"exact phrase"' --role user --json
    """
    with open_store() as store:
        # What the search reads for a misspelt word (memstrata.query.spelling), said once:
        # corrected first, so the search's own correction finds nothing left to correct
        # (one lookup, where correcting the query twice asked the store twice as much).
        searched, corrected = (query, {}) if as_json else store.respell(query)
        hits = store.search_messages(
            searched,
            role_filter=list(roles) or None,
            source_filter=list(sources) or None,
            since=_time(since, "since"),
            until=_time(until, "until", end_of_day=True),
            sort=None if sort == "relevance" else sort,
            limit=limit,
            offset=offset,
            include_inactive=include_inactive,
            include_tool_traffic=include_tool_traffic,
        )
        short = {} if as_json else shown_ids(store, {h["session_id"] for h in hits})
    if as_json:
        echo_json(hits)
        return
    if corrected:
        click.echo(searched_as(corrected), err=True)
    if not hits:
        click.echo("No message matches.", err=True)
        return
    echo_table(
        ["message", "session", "role", "when", "source", "snippet"],
        [
            (
                h["id"],
                short[h["session_id"]],
                h["role"],
                _when(h["timestamp"]),
                h["source"],
                h["snippet"],
            )
            for h in hits
        ],
        title=f"Messages matching {query!r}",
    )


@sessions_group.command("export")
@click.argument("sessions", nargs=-1, metavar="[SESSION]...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "markdown"]),
    default="jsonl",
    show_default=True,
    help="jsonl round-trips through `memstrata import`; markdown is for reading.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here instead of standard output.",
)
@click.option("--overwrite", is_flag=True, help="Replace the --output file if it exists.")
def sessions_export(
    sessions: tuple[str, ...], fmt: str, output: Path | None, overwrite: bool
) -> None:
    """Export sessions (all, or the conversations of each SESSION) as JSONL or Markdown.

    A SESSION (id, id prefix or title) brings its whole compressed conversation.

    \b
    Example:
        memstrata sessions export --format markdown -o sessions.md
        memstrata sessions export "Kyoto trip" --format jsonl > kyoto.jsonl
    """
    if output is not None:
        refuse_symlink(output, "an export")
    if output is not None and output.exists() and not overwrite:
        raise click.ClickException(
            f"{output} already exists. Choose another --output file, or pass --overwrite "
            "to replace it."
        )
    try:
        exporting = importlib.import_module("memstrata.ops.export")
    except ImportError as exc:  # pragma: no cover - shipped together
        raise click.ClickException(f"Export is unavailable in this build: {exc}") from exc
    with open_store() as store:
        ids: list[str] | None = None
        if sessions:
            ids = []
            for ref in sessions:
                for member in store.get_lineage_ids(store.resolve_session(ref)):
                    if member not in ids:
                        ids.append(member)
        handle: TextIO = (
            os.fdopen(
                open_private_output(output, overwrite=overwrite),
                "w",
                encoding="utf-8",
                newline="\n",
            )
            if output
            else sys.stdout
        )
        try:
            with progress_bar() as bar:
                task = bar.add_task("exporting", total=None)

                def report(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                count = exporting.export_sessions(
                    store, handle, fmt=fmt, session_ids=ids, progress=report
                )
        finally:
            if output:
                handle.close()
    if output:
        click.echo(f"Exported {count} session(s) to {output}", err=True)


@sessions_group.command("rename")
@click.argument("session")
@click.argument("title")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_rename(session: str, title: str, as_json: bool) -> None:
    """Set a session's TITLE (unique; an empty string clears it).

    \b
    Example:
        memstrata sessions rename 20250101_1200 "Kyoto trip"
    """
    with open_store() as store:
        sid = store.resolve_session(session)
        clean = store.set_session_title(sid, title)
    if as_json:
        echo_json({"id": sid, "title": clean})
        return
    click.echo(f"{sid}: title {'cleared' if clean is None else repr(clean)}")


@sessions_group.command("delete")
@click.argument("session")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the ids deleted as JSON.")
def sessions_delete(session: str, yes: bool, as_json: bool) -> None:
    """Delete a session, its messages (from every index) and its sub-agent sessions.

    \b
    Example:
        memstrata sessions delete 20250101_1200 --yes
    """
    with open_store() as store:
        sid = store.resolve_session(session)
        if not yes:
            click.confirm(f"Delete session {sid} and its messages?", abort=True)
        deleted = store.delete_session(sid)
    if as_json:
        echo_json({"deleted": deleted})
        return
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
    with open_store() as store:
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


# What each index is, in words: the counts are keyed by the SQLite index tables on both
# backends (PostgreSQL keeps the same three indexes as columns and GIN indexes).
INDEX_LABELS = {
    "messages_fts": "word index",
    "messages_fts_trigram": "substring (trigram) index",
    "messages_fts_cjk": "CJK bigram index",
}


@sessions_group.command("reindex")
@click.option("--json", "as_json", is_flag=True, help="Print the rows per index as JSON.")
def sessions_reindex(as_json: bool) -> None:
    """Rebuild the three full-text indexes (word, trigram, CJK) from the messages.

    \b
    Example:
        memstrata sessions reindex
    """
    with open_store(verify_indexes=False) as store, progress_bar() as bar:
        tasks: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or 1)
            bar.update(tasks[stage], completed=done if total else 1)

        counts = store.reindex(report)
    if as_json:
        echo_json(counts)
        return
    for key, rows in counts.items():
        click.echo(f"{INDEX_LABELS.get(key, key)}: {rows} rows")


@sessions_group.command("embed")
@click.option("--limit", type=click.IntRange(0, MAX_PAGE), help="Embed at most this many messages.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def sessions_embed(limit: int | None, as_json: bool) -> None:
    """Compute the vectors hybrid recall uses for messages and facts that have none yet.

    Uses the embedder `search.embedder` names ("minilm" offline for English, "e5" offline
    for Chinese and other languages, or "openai" for llm.embedding_model). Writes never
    compute vectors, so run this after imports or on a schedule; an interrupted run
    keeps what it wrote and the next one continues. The
    facts are embedded too (facts.db when it exists, the namespace's under store.dsn).

    \b
    Example:
        memstrata config set search.embedder minilm
        memstrata sessions embed --limit 10000
    """
    from memstrata.providers.facts.opening import open_facts
    from memstrata.providers.facts.store import FACTS_FILENAME
    from memstrata.search.embedders import embedder_from_config, index_pending, pending_count

    config = Config.load()
    embedder = embedder_from_config(config)
    if embedder is None:
        raise click.ClickException(
            "No embedder is configured: set one with `memstrata config set search.embedder "
            "minilm` (offline, English), `e5` (offline, multilingual) or `openai` "
            "(llm.embedding_model); see `memstrata help recall`."
        )
    with open_store(config) as store:
        pending = pending_count(store, embedder.name)
        total = pending if limit is None else min(limit, pending)
        with progress_bar() as bar:
            task = bar.add_task(f"embed messages ({embedder.name})", total=total or 1)
            done = index_pending(
                store, embedder, limit=limit, progress=lambda n: bar.update(task, completed=n)
            )
        left = pending_count(store, embedder.name)
    counts: dict[str, Any] = {"embedder": embedder.name, "embedded": done, "pending": left}
    # The facts the configuration names: the tenant's under a DSN, else facts.db if any.
    if postgres_dsn(config) is not None or (config.home / FACTS_FILENAME).exists():
        with open_facts(config, embedder=embedder) as facts:
            counts["facts_embedded"] = facts.index_vectors()
            counts["facts_pending"] = facts.pending_vectors()
    if as_json:
        echo_json(counts)
        return
    click.echo(f"Embedded {done} message(s) with {embedder.name}; {left} still without a vector.")
    if "facts_embedded" in counts:
        click.echo(f"Embedded {counts['facts_embedded']} fact(s).")


@sessions_group.command("salvage")
@click.argument("damaged", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the rows copied per table as JSON.")
def sessions_salvage(damaged: Path, target: Path, as_json: bool) -> None:
    """Copy every readable row of a damaged state.db into a new file TARGET.

    The damaged file is only read. Stop every memstrata process, keep a copy of the
    damaged file (and its -wal), salvage, then move TARGET into place as state.db.

    \b
    Example:
        cp ~/.memstrata/state.db /tmp/state.db.damaged
        memstrata sessions salvage /tmp/state.db.damaged /tmp/state.db.salvaged
        mv /tmp/state.db.salvaged ~/.memstrata/state.db
    """
    from memstrata.store.sqlite.salvage import salvage

    copied = salvage(damaged, target)
    if as_json:
        echo_json(copied)
        return
    echo_table(["table", "rows copied"], sorted(copied.items()), title=f"Salvaged into {target}")


@sessions_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_check(as_json: bool) -> None:
    """Check the database file and the full-text indexes; exit 1 when damaged.

    \b
    Example:
        memstrata sessions check
    """
    with open_store(verify_indexes=False) as store:
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
    with open_store() as store:
        stats = store.stats()
    if as_json:
        echo_json(stats)
        return
    rows: list[tuple[str, Any]] = []
    for key, value in stats.items():
        if key == "sessions_by_source":
            rows += [(f"sessions from {src}", n) for src, n in value.items()]
        elif key.endswith("_bytes"):
            rows.append((key, human_bytes(value)))
        else:
            rows.append((key, value))
    echo_table(["stat", "value"], rows, title="Session store")


_SHARED_TABLES = (
    "PostgreSQL keeps every namespace's rows in the same tables, so VACUUM and ANALYZE "
    "act on all tenants at once and the server's autovacuum already runs them. Nothing "
    "was changed. A database administrator runs them for everyone with "
    "`memstrata sessions optimize --all-namespaces`."
)


@sessions_group.command("optimize")
@click.option("--no-vacuum", is_flag=True, help="Skip the file rewrite (VACUUM).")
@click.option(
    "--all-namespaces",
    is_flag=True,
    help="PostgreSQL: VACUUM and ANALYZE the tables every namespace shares.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sessions_optimize(no_vacuum: bool, all_namespaces: bool, as_json: bool) -> None:
    """Merge the full-text index segments, VACUUM the file and refresh planner statistics.

    Makes searches faster after many writes and gives freed space back to the disk;
    the store is locked for writers meanwhile (seconds on a large store). Prints the
    file sizes before and after. On PostgreSQL the tables are shared by every
    namespace: without --all-namespaces nothing is done to them.

    \b
    Example:
        memstrata sessions optimize
    """
    with open_store() as store:
        shared = getattr(store, "namespace", None) is not None
        if shared and not all_namespaces:
            if as_json:
                echo_json({"steps": [], "sizes": {}, "skipped": _SHARED_TABLES})
            else:
                click.echo(_SHARED_TABLES)
            return
        before = store.stats()
        steps: list[tuple[str, Any]] = [("merge full-text indexes", store.optimize)]
        if not no_vacuum:
            steps.append(("vacuum", store.vacuum))
        steps.append(("analyze", store.analyze))
        with progress_bar() as bar:
            task = bar.add_task("optimize", total=len(steps))
            for label, step in steps:
                bar.update(task, description=label)
                step()
                bar.advance(task)
        checkpoint = getattr(store, "checkpoint", None)  # SQLite only: a server keeps its own WAL
        if checkpoint is not None:
            checkpoint()  # VACUUM and ANALYZE went through the WAL: fold it in, truncate it
        after = store.stats()
    sizes = {
        key: {"before": before[key], "after": after[key]}
        for key in ("db_bytes", "wal_bytes", "tenant_bytes")
        if key in before and key in after
    }
    if as_json:
        echo_json({"steps": [label for label, _ in steps], "sizes": sizes})
        return
    echo_table(
        ["file", "before", "after"],
        [
            (key.removesuffix("_bytes"), human_bytes(v["before"]), human_bytes(v["after"]))
            for key, v in sizes.items()
        ],
        title="Optimized",
    )
