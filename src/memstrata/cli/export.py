"""``memstrata export``: write sessions (JSONL and Markdown) and memory files to a folder."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click
from rich.progress import Progress, TaskID

from memstrata.backends import open_memory, open_store
from memstrata.cli.common import CONTEXT_SETTINGS, echo_json, progress_bar
from memstrata.errors import AtomicWriteError
from memstrata.fileio import private_dir, refuse_symlink
from memstrata.memory.format import FILE_NAMES, TARGETS
from memstrata.ops.export import export_memory, export_sessions
from memstrata.ops.importing.memstrata_jsonl import SESSIONS_FILE
from memstrata.store.contract import SessionStoreContract

MARKDOWN_FILE = "sessions.md"


def _write(
    path: Path,
    store: SessionStoreContract,
    fmt: str,
    ids: list[str] | None,
    progress: Callable[[int, int], None],
) -> int:
    """Export into a temp file beside ``path`` and rename it: never a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            written = export_sessions(
                store,
                out,
                fmt="jsonl" if fmt == "jsonl" else "markdown",
                session_ids=ids,
                progress=progress,
            )
        os.replace(tmp, path)
    except OSError as exc:
        raise AtomicWriteError(
            f"Cannot write {path} ({exc.strerror or exc}): free disk space or choose another "
            "--out folder."
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return written


def _advance(bar: Progress, task: TaskID, done: int, total: int) -> None:
    bar.update(task, completed=done, total=total)


@click.command("export", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write into (created if missing).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "markdown", "both"]),
    default="both",
    show_default=True,
    help="jsonl is lossless and re-importable; markdown is for reading.",
)
@click.option("--session", "sessions", multiple=True, help="Export only this session id.")
@click.option("--no-memory", is_flag=True, help="Leave MEMORY.md / USER.md out.")
@click.option(
    "--overwrite", is_flag=True, help="Replace the files of an earlier export in the folder."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def export_command(
    out_dir: Path,
    fmt: str,
    sessions: tuple[str, ...],
    no_memory: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Export sessions and memory files to a folder.

    Writes sessions.jsonl (every session and message field; `memstrata import DIR`
    reads it back into another home), sessions.md (readable transcripts) and
    memories/MEMORY.md and USER.md.

    \b
    Example:
        memstrata export --out ~/memstrata-backup
        memstrata import ~/memstrata-backup      # in a fresh MEMSTRATA_HOME
        memstrata export --out ~/memstrata-backup --overwrite   # refresh that backup
    """
    formats = ["jsonl", "markdown"] if fmt == "both" else [fmt]
    targets = [out_dir / (SESSIONS_FILE if kind == "jsonl" else MARKDOWN_FILE) for kind in formats]
    if not no_memory:
        targets += [out_dir / "memories" / FILE_NAMES[t] for t in TARGETS]
    for path in [out_dir / "memories", *targets]:
        # A planted link would redirect the export onto another file, even a dangling one.
        refuse_symlink(path, "an export")
    taken = [str(p.relative_to(out_dir)) for p in targets if os.path.lexists(p)]
    if taken and not overwrite:
        # An earlier export (a backup, perhaps the only one) would be replaced silently.
        raise click.ClickException(
            f"{out_dir} already holds {', '.join(taken)} (an earlier export?). Choose another "
            "--out folder, or pass --overwrite to replace them."
        )
    private_dir(out_dir)
    ids = list(sessions) or None
    files: list[str] = []
    count = 0
    with open_store() as store, progress_bar() as bar:
        if ids is not None:
            ids = [store.resolve_session(ref) for ref in ids]
        for kind in formats:
            path = out_dir / (SESSIONS_FILE if kind == "jsonl" else MARKDOWN_FILE)
            task = bar.add_task(f"export {path.name}", total=None)

            count = _write(path, store, kind, ids, partial(_advance, bar, task))
            files.append(str(path))
    if not no_memory:
        files += [str(p) for p in export_memory(open_memory(), out_dir / "memories")]
    if as_json:
        echo_json({"sessions": count, "files": files})
        return
    click.echo(f"Exported {count} session(s) to {out_dir}:")
    for name in files:
        click.echo(f"  {name}")
