"""``memstrata memory``: read and edit curated memory, review staged writes, history, undo.

Every command works on the memory ``store.dsn`` names (:func:`memstrata.backends.open_memory`):
``MEMORY.md``/``USER.md`` in the home folder, or the namespace's PostgreSQL rows, which
the MCP server and agents of that deployment read. Writes made here are the user's own:
they are saved at once and never staged, even with ``memory.write_approval`` on (that
setting gates the model's tool calls).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, echo_table, open_cli_memory
from memstrata.config import Config, memstrata_home
from memstrata.errors import CuratedMemoryError, MemstrataError
from memstrata.memory.approval import PendingWrite, PendingWrites
from memstrata.memory.args import check_target
from memstrata.memory.core import CuratedMemory
from memstrata.memory.files import FileMemory, Target, WriteResult
from memstrata.memory.format import FILE_NAMES
from memstrata.memory.history import MemoryChange
from memstrata.memory.tool import MemoryTool
from memstrata.query.paging import MAX_PAGE

if TYPE_CHECKING:
    from memstrata.memory.postgres import PostgresMemory

FC = TypeVar("FC", bound=Callable[..., Any])
TARGETS: tuple[Target, ...] = ("memory", "user")
TARGET_TITLES: dict[Target, str] = {
    "memory": "MEMORY.md — agent notes",
    "user": "USER.md — user profile",
}

target_option = click.option(
    "--target",
    "-t",
    type=click.Choice(TARGETS),
    default="memory",
    show_default=True,
    help="Which file: memory (agent notes) or user (user profile).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _all_targets_option(help: str) -> Callable[[FC], FC]:
    return click.option(
        "--target",
        "-t",
        type=click.Choice(["all", *TARGETS]),
        default="all",
        show_default=True,
        help=help,
    )


# The library's messages are written for the model, which sees the recovery data as the
# `current_entries` field of the tool response; a person sees the numbered list instead.
_MODEL_FIELD_WORDING: tuple[tuple[str, str], ...] = (
    ("Check current_entries and retry", "Check the current entries listed below and retry"),
    ("(see current_entries)", "(the current entries are listed below)"),
    ("(see matches)", "(the matching entries are listed below)"),
    ("current_entries", "the current entries listed below"),
    (" — all in this turn", ""),
)


def _user_words(text: str) -> str:
    for model_words, user_words in _MODEL_FIELD_WORDING:
        text = text.replace(model_words, user_words)
    return text


def _error_text(exc: MemstrataError) -> str:
    """The message in user words, plus the numbered entries a refused write carries."""
    text = _user_words(str(exc))
    if isinstance(exc, CuratedMemoryError):
        entries = exc.details.get("current_entries")
        if entries:
            text += "\nCurrent entries:\n" + _numbered(entries)
        matches = exc.details.get("matches")
        if matches:
            text += "\nMatching entries:\n" + _numbered(matches)
    return text


class _MemoryGroup(click.Group):
    """Turns library errors into ``Error: ...`` and exit code 1 in every run mode."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemstrataError as exc:
            raise click.ClickException(_error_text(exc)) from exc


def _memory() -> CuratedMemory:
    return open_cli_memory(Config.load())


def _rows(memory: CuratedMemory) -> PostgresMemory:
    """``memory`` as PostgreSQL rows (it is not files, so store.dsn named a server)."""
    from memstrata.memory.postgres import PostgresMemory

    assert isinstance(memory, PostgresMemory)  # open_memory returns one of the two
    return memory


def _name(memory: CuratedMemory, target: Target) -> str:
    """How messages name a target: the file, or the file of a namespace."""
    if isinstance(memory, FileMemory):
        return memory.path(target).name
    return f"{FILE_NAMES[target]} of namespace {_rows(memory).namespace!r}"


def _numbered(entries: Sequence[str]) -> str:
    lines = []
    width = len(str(len(entries)))
    for number, entry in enumerate(entries, start=1):
        first, *rest = entry.splitlines() or [""]
        lines.append(f"  {number:>{width}}. {first}")
        lines.extend(f"  {'':>{width}}  {line}" for line in rest)
    return "\n".join(lines)


def _content_arg(value: str) -> str:
    """``-`` reads the text from standard input (for long or multi-line entries)."""
    return sys.stdin.read() if value == "-" else value


def _target_state(memory: CuratedMemory, target: Target) -> dict[str, Any]:
    entries = memory.entries(target)
    usage = memory.usage(target)
    where: dict[str, Any]
    if isinstance(memory, FileMemory):
        where = {"path": str(memory.path(target))}
    else:
        where = {"path": None, "namespace": _rows(memory).namespace}
    return {
        "target": target,
        **where,
        "entries": entries,
        "entry_count": len(entries),
        "chars": usage.chars,
        "limit": usage.limit,
        "usage": str(usage),
    }


def _echo_state(state: dict[str, Any]) -> None:
    target: Target = state["target"]
    count = state["entry_count"]
    noun = "entry" if count == 1 else "entries"
    click.echo(f"{TARGET_TITLES[target]}: {count} {noun}, {state['usage']}")
    if state["entries"]:
        click.echo(_numbered(state["entries"]))


def _result_dict(result: WriteResult) -> dict[str, Any]:
    return {
        "target": result.target,
        "action": result.action,
        "changed": result.changed,
        "message": result.message,
        "entry_count": result.entry_count,
        "usage": str(result.usage),
    }


def _echo_result(result: WriteResult, as_json: bool) -> None:
    if as_json:
        echo_json(_result_dict(result))
    else:
        click.echo(f"{result.message} {result.target}: {result.usage}")


@click.group(
    "memory", cls=_MemoryGroup, context_settings=CONTEXT_SETTINGS, invoke_without_command=True
)
@click.pass_context
def memory_group(ctx: click.Context) -> None:
    """Curated memory: MEMORY.md (agent notes) and USER.md (user profile).

    Without a subcommand, lists both files. Writes made here are yours and are saved
    at once; only the model's memory-tool writes are staged when memory.write_approval
    is on. When store.dsn names a PostgreSQL server, every command works on the rows of
    store.namespace, the memory the MCP server and agents read.

    \b
    Example:
        memstrata memory add "User prefers concise answers" --target user
        memstrata memory list
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(memory_list)


@memory_group.command("list")
@json_option
def memory_list(as_json: bool) -> None:
    """List the live entries of both files, numbered, with their usage.

    \b
    Example:
        memstrata memory list --json
    """
    memory = _memory()
    states = {t: _target_state(memory, t) for t in TARGETS}
    if as_json:
        echo_json(states)
        return
    for index, target in enumerate(TARGETS):
        if index:
            click.echo()
        _echo_state(states[target])


@memory_group.command("read")
@target_option
@json_option
def memory_read(target: Target, as_json: bool) -> None:
    """Print the live entries of one file (what the tool's read action returns).

    \b
    Example:
        memstrata memory read --target user
    """
    memory = _memory()
    if as_json:
        echo_json(MemoryTool(memory).handle({"action": "read", "target": target}))
        return
    _echo_state(_target_state(memory, target))


@memory_group.command("show")
@_all_targets_option("Show one block or the whole snapshot.")
@json_option
def memory_show(target: Literal["all", "memory", "user"], as_json: bool) -> None:
    """Print the frozen snapshot exactly as it is injected into a system prompt.

    A session freezes this text when it starts; writes show up in the next session.

    \b
    Example:
        memstrata memory show
    """
    memory = _memory()
    text = memory.snapshot() if target == "all" else memory.snapshot_block(target)
    if as_json:
        echo_json({"target": target, "snapshot": text})
        return
    if not text:
        click.echo("(nothing is injected: the snapshot is empty)", err=True)
        return
    click.echo(text)


@memory_group.command("add")
@click.argument("content")
@target_option
@json_option
def memory_add(content: str, target: Target, as_json: bool) -> None:
    """Add CONTENT as a new entry (use - to read it from standard input).

    \b
    Example:
        memstrata memory add "Project uses pnpm, not npm"
    """
    _echo_result(_memory().add(target, _content_arg(content)), as_json)


@memory_group.command("replace")
@click.argument("old_text")
@click.argument("content")
@target_option
@json_option
def memory_replace(old_text: str, content: str, target: Target, as_json: bool) -> None:
    """Replace the entry containing OLD_TEXT (or #N of `memory list`) with CONTENT.

    CONTENT - reads standard input.

    \b
    Example:
        memstrata memory replace "pnpm" "Project uses pnpm 9 workspaces" --target memory
    """
    memory = _memory()
    old = _designated(memory, target, old_text, None)
    _echo_result(memory.replace(target, old, _content_arg(content)), as_json)


def _by_number(memory: CuratedMemory, target: Target, number: int) -> str:
    """The text of entry ``number`` as `memory list` numbers it (1-based)."""
    entries = memory.entries(target)
    if not 1 <= number <= len(entries):
        listing = f"\n{_numbered(entries)}" if entries else ""
        raise click.ClickException(
            f"{FILE_NAMES[target]} has no entry #{number}: it holds {len(entries)} "
            f"(see `memstrata memory list`).{listing}"
        )
    return entries[number - 1]


def _designated(memory: CuratedMemory, target: Target, old_text: str, index: int | None) -> str:
    """The text that designates one entry: OLD_TEXT, ``#N`` or ``--index N``.

    A bare number is read as text when it occurs in an entry ("Born in 1992" for 2): when
    it is also a list number, both readings are shown and the command is refused, since
    guessing would delete the wrong entry one time in two.
    """
    if index is not None:
        if old_text:
            raise click.UsageError("Give OLD_TEXT or --index, not both.")
        return _by_number(memory, target, index)
    if not old_text.strip():
        raise click.UsageError("Say which entry: OLD_TEXT, #N or --index N (see memory list).")
    spelled = old_text.strip()
    numeric = spelled.removeprefix("#")
    if not (numeric.isascii() and numeric.isdigit()):
        return old_text
    entries = memory.entries(target)
    number = int(numeric)
    as_text = [e for e in entries if spelled in e]
    if spelled.startswith("#") and not as_text:
        return _by_number(memory, target, number)
    if not 1 <= number <= len(entries):
        return old_text  # only the text reading exists
    if not as_text:
        return entries[number - 1]
    raise click.ClickException(
        f"'{spelled}' could mean two entries of {FILE_NAMES[target]}:\n"
        f"  as list number {number}: {entries[number - 1]}\n"
        + "".join(f"  as text it occurs in: {e}\n" for e in as_text)
        + f"Say which: `--index {number}` for the list number, or quote more of the "
        "entry's text."
    )


@memory_group.command("remove")
@click.argument("old_text", required=False, default="")
@click.option(
    "--index",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    help="Remove entry N as `memory list` numbers it (also written #N).",
)
@target_option
@json_option
def memory_remove(old_text: str, index: int | None, target: Target, as_json: bool) -> None:
    """Remove the entry containing OLD_TEXT, or entry #N of `memory list`.

    Matching ignores case and full-width forms when that leaves one entry. A bare
    number that also occurs in an entry's text is refused with both readings shown.

    \b
    Example:
        memstrata memory remove "pnpm"
        memstrata memory remove '#2'
        memstrata memory remove --index 2 --target user
    """
    memory = _memory()
    _echo_result(memory.remove(target, _designated(memory, target, old_text, index)), as_json)


def _pending_row(write: PendingWrite) -> list[str]:
    return [write.id, write.target, write.created_at, write.origin, write.describe()]


@memory_group.command("pending")
@json_option
def memory_pending(as_json: bool) -> None:
    """List memory-tool writes staged for approval (memory.write_approval on).

    \b
    Example:
        memstrata memory pending
    """
    writes = PendingWrites(memstrata_home()).list()
    if as_json:
        echo_json([w.to_dict() for w in writes])
        return
    if not writes:
        click.echo("No pending memory writes.")
        return
    echo_table(
        ["id", "target", "created", "origin", "operations"],
        (_pending_row(w) for w in writes),
        title="Pending memory writes",
    )


@memory_group.command("approve")
@click.argument("write_id", metavar="ID")
@json_option
def memory_approve(write_id: str, as_json: bool) -> None:
    """Apply the staged write ID (or a unique prefix of it) to memory.

    If it no longer applies (memory full, entry gone), it stays pending and the error
    says why.

    \b
    Example:
        memstrata memory approve 20260101-120000-000000-a1b2c3
    """
    result = PendingWrites(memstrata_home()).approve(write_id, _memory())
    _echo_result(result, as_json)


@memory_group.command("reject")
@click.argument("write_id", metavar="ID")
def memory_reject(write_id: str) -> None:
    """Drop the staged write ID without applying it.

    \b
    Example:
        memstrata memory reject 20260101-120000-000000-a1b2c3
    """
    full = PendingWrites(memstrata_home()).reject(write_id)
    click.echo(f"Rejected {full}; memory was not changed.")


@memory_group.command("path")
@click.option(
    "--target", "-t", type=click.Choice(TARGETS), default=None, help="Print only this file."
)
@json_option
def memory_path(target: Target | None, as_json: bool) -> None:
    """Print the paths of MEMORY.md and USER.md.

    When store.dsn names a PostgreSQL server, memory is kept in its rows, not in files:
    the command then fails and says where the memory is.

    \b
    Example:
        memstrata memory path --target user
    """
    memory = _memory()
    if not isinstance(memory, FileMemory):
        rows = _rows(memory)
        raise click.ClickException(
            f"Curated memory is kept in PostgreSQL at {rows.dsn_label}, namespace "
            f"{rows.namespace!r} (the store.dsn setting), not in files, so there is no path "
            "to print. Read it with `memstrata memory list`, or run "
            "`memstrata config set store.dsn ''` to keep memory in the home folder's files."
        )
    paths = {t: str(memory.path(t)) for t in TARGETS}
    if as_json:
        echo_json(paths if target is None else {target: paths[target]})
    elif target is not None:
        click.echo(paths[target])
    else:
        for name, path in paths.items():
            click.echo(f"{name}\t{path}")


@memory_group.command("reset")
@_all_targets_option("Which file(s) to empty.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def memory_reset(target: Literal["all", "memory", "user"], yes: bool) -> None:
    """Empty MEMORY.md and/or USER.md, keeping a .bak.<timestamp> copy of each.

    Under a PostgreSQL store.dsn there is no file to copy: the history keeps the deleted
    entries and `memstrata memory undo` brings them back.

    \b
    Example:
        memstrata memory reset --target user --yes
    """
    memory = _memory()
    targets: tuple[Target, ...] = TARGETS if target == "all" else (target,)
    names = " and ".join(_name(memory, t) for t in targets)
    files = isinstance(memory, FileMemory)
    kept = "A backup copy is kept." if files else "The history keeps them (undo brings them back)."
    if not yes:
        click.confirm(f"Delete every entry of {names}? {kept}", abort=True)
    for t in targets:
        name = _name(memory, t)
        with memory.attributed("cli", "memstrata memory reset"):
            if isinstance(memory, FileMemory):
                backup = memory.reset(t)
                done = None if backup is None else f"the deleted entries are in {backup}"
            else:
                change = _rows(memory).reset(t)
                done = (
                    None if change is None else f"undo it with `memstrata memory undo {change.id}`"
                )
        if done is None:
            click.echo(f"{name} is already empty.")
        else:
            click.echo(f"Emptied {name}; {done}")


def _history_row(change: MemoryChange) -> list[str]:
    info = change.summary()
    delta = change.size_delta
    if change.after is None:
        size = f"(no file) ({delta:,})"
    else:
        size = f"{len(change.after):,} B ({'+' if delta >= 0 else ''}{delta:,})"
    why = change.why + (f" [undoes #{change.undoes}]" if change.undoes else "")
    return [str(change.id), info["at"], change.target, change.action, change.who, size, why]


@memory_group.command("history")
@click.option(
    "--target", "-t", type=click.Choice(TARGETS), default=None, help="Only this file's changes."
)
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(1, MAX_PAGE),
    default=20,
    show_default=True,
    help="How many changes to show, newest first.",
)
@json_option
def memory_history(target: Target | None, limit: int, as_json: bool) -> None:
    """List recorded changes of MEMORY.md and USER.md, newest first.

    Every write is recorded (memory tool, CLI, curator, import, undo) with who made it,
    why, and the exact bytes before and after; the number in the first column is what
    `memstrata memory undo` takes.

    \b
    Example:
        memstrata memory history --target memory --limit 5
        memstrata memory undo 12
    """
    changes = _memory().history.list(target=target, limit=limit)
    if as_json:
        echo_json([c.summary() for c in changes])
        return
    if not changes:
        click.echo("No memory changes recorded yet.")
        return
    echo_table(
        ["#", "when (UTC)", "target", "action", "who", "size after", "why"],
        (_history_row(c) for c in changes),
        title="Memory history",
    )


@memory_group.command("undo")
@click.argument("change_id", metavar="N", type=int)
@click.option(
    "--force",
    is_flag=True,
    help="Restore even if the file changed after change N (later edits are lost, but the "
    "undo is recorded and can itself be undone).",
)
@json_option
def memory_undo(change_id: int, force: bool, as_json: bool) -> None:
    """Restore the exact bytes the file held before change N.

    Refused when the file changed after change N, so later edits are never thrown away
    by accident: undo the newer changes first, or pass --force.

    \b
    Example:
        memstrata memory history
        memstrata memory undo 12
    """
    memory = _memory()
    with memory.attributed("cli"):
        change = memory.undo(change_id, force=force)
    if as_json:
        echo_json(change.summary())
        return
    name = _name(memory, check_target(change.target))
    click.echo(
        f"Undid change #{change_id}: {name} is back to the bytes it held before it "
        f"(recorded as change #{change.id})."
    )
