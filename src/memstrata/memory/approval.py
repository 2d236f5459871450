"""Write approval for curated memory: staged writes a person approves or rejects.

With ``memory.write_approval`` on, the memory tool does not save; it stages the write as
``$MEMSTRATA_HOME/pending/memory/<id>.json`` (atomic, 0600) and tells the model it is
pending. ``memstrata memory pending|approve|reject`` (or :class:`PendingWrites`) reviews
them. Approving replays the write through the memory the CLI opens (files, or rows under
``store.dsn``), so the threat scanner, the budget and the drift guard apply exactly as
for a direct write; a write that no longer applies stays pending and the error says why.

A write is validated and threat-scanned when it is staged, with the same checks
FileMemory makes: a malformed or blocked write is never queued.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from memstrata.config import ensure_home, memstrata_home
from memstrata.errors import (
    CuratedMemoryError,
    InvalidMemoryArgument,
    UnreadableFileError,
)
from memstrata.fileio import atomic_write, file_lock, read_text
from memstrata.memory.args import (
    check_target,
    clean_content,
    clean_old_text,
    scan_content,
    validate_batch,
)
from memstrata.memory.core import CuratedMemory
from memstrata.memory.files import Target, WriteResult

PENDING_SUBDIR = Path("pending") / "memory"
_ID_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]*$")
_FORMAT = 1


class Operation(TypedDict):
    """One write: ``add`` needs content, ``replace`` old_text and content, ``remove`` old_text."""

    action: str
    content: str | None
    old_text: str | None


@dataclass(frozen=True)
class PendingWrite:
    """A staged memory write waiting for approval."""

    id: str
    target: Target
    operations: tuple[Operation, ...]
    batch: bool
    created_at: str
    origin: str
    path: Path

    def describe(self) -> str:
        """The operations on one line, for listings."""
        lines = []
        for op in self.operations:
            parts = [op["action"]]
            if op.get("old_text"):
                parts.append(f"old_text={_clip(op['old_text'] or '')!r}")
            if op.get("content"):
                parts.append(f"content={_clip(op['content'] or '')!r}")
            lines.append(" ".join(parts))
        return "; ".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form written to disk (plus ``path`` for callers)."""
        return {
            "format": _FORMAT,
            "id": self.id,
            "target": self.target,
            "batch": self.batch,
            "operations": [dict(op) for op in self.operations],
            "created_at": self.created_at,
            "origin": self.origin,
            "path": str(self.path),
        }


def _clip(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def validate(target: Target, operations: Sequence[Operation], *, batch: bool) -> None:
    """Make the checks FileMemory makes before a write, so a staged write is well-formed
    and nothing the threat scanner blocks is ever queued."""
    check_target(target)
    if batch or len(operations) != 1:
        validate_batch(operations)
        return
    op = operations[0]
    if op["action"] in ("replace", "remove"):
        clean_old_text(op.get("old_text"))
    if op["action"] in ("add", "replace"):
        scan_content(clean_content(op.get("content"), "content cannot be empty."))
    elif op["action"] != "remove":
        raise InvalidMemoryArgument(
            f"Unknown action {op['action']!r}. Use add, replace, or remove."
        )


class PendingWrites:
    """The queue of staged memory writes under ``$MEMSTRATA_HOME/pending/memory``."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home if home is not None else memstrata_home()
        self.folder = self.home / PENDING_SUBDIR

    # Approve and reject hold this lock, so two reviewers cannot replay one write twice.
    @property
    def _lock_path(self) -> Path:
        return self.folder / ".lock"

    def stage(
        self,
        target: Target,
        operations: Sequence[Operation],
        *,
        batch: bool = False,
        origin: str = "tool",
    ) -> PendingWrite:
        """Scan and queue a write; return it with its new id. Nothing is saved to memory."""
        if not operations:
            raise InvalidMemoryArgument("Nothing to stage: give at least one operation.")
        validate(target, operations, batch=batch)
        ensure_home(self.home)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        now = datetime.now(UTC)
        # Sortable by time; the random tail keeps two writes in one microsecond apart.
        write_id = f"{now:%Y%m%d-%H%M%S-%f}-{secrets.token_hex(3)}"
        staged = PendingWrite(
            id=write_id,
            target=target,
            operations=tuple(
                Operation(
                    action=op["action"], content=op.get("content"), old_text=op.get("old_text")
                )
                for op in operations
            ),
            batch=batch,
            created_at=now.isoformat(timespec="seconds"),
            origin=origin,
            path=self.folder / f"{write_id}.json",
        )
        payload = staged.to_dict()
        del payload["path"]
        atomic_write(staged.path, json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
        return staged

    def _ids(self) -> builtins.list[str]:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        stems = (n[: -len(".json")] for n in names if n.endswith(".json"))
        return sorted(stem for stem in stems if _ID_RE.match(stem))

    def resolve(self, write_id: str) -> str:
        """Return the full id for ``write_id`` or a unique prefix of one."""
        if not isinstance(write_id, str) or not _ID_RE.match(write_id):
            raise InvalidMemoryArgument(
                f"{write_id!r} is not a pending-write id. "
                "List them with `memstrata memory pending`."
            )
        ids = self._ids()
        if write_id in ids:
            return write_id
        matches = [i for i in ids if i.startswith(write_id)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise InvalidMemoryArgument(
                f"No pending write with id {write_id!r}. List them with `memstrata memory pending`."
            )
        raise InvalidMemoryArgument(
            f"{write_id!r} matches {len(matches)} pending writes ({', '.join(matches[:5])}). "
            "Give more of the id."
        )

    def _load(self, write_id: str) -> PendingWrite:
        path = self.folder / f"{write_id}.json"
        text = read_text(path)
        if text is None:
            raise InvalidMemoryArgument(
                f"No pending write with id {write_id!r}. List them with `memstrata memory pending`."
            )
        try:
            data = json.loads(text)
            ops = tuple(
                Operation(
                    action=str(op["action"]),
                    content=op.get("content"),
                    old_text=op.get("old_text"),
                )
                for op in data["operations"]
            )
            target = data["target"]
            if target not in ("memory", "user") or not ops:
                raise ValueError("bad target or no operations")
            return PendingWrite(
                id=write_id,
                target=target,
                operations=ops,
                batch=bool(data.get("batch", len(ops) > 1)),
                created_at=str(data.get("created_at", "")),
                origin=str(data.get("origin", "")),
                path=path,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise UnreadableFileError(
                f"{path} is not a valid staged memory write ({exc}). It was left untouched: "
                f"inspect it, then drop it with `memstrata memory reject {write_id}`."
            ) from exc

    def list(self) -> builtins.list[PendingWrite]:
        """Every staged write, oldest first."""
        return [self._load(i) for i in self._ids()]

    def get(self, write_id: str) -> PendingWrite:
        """The staged write with this id (or unique id prefix)."""
        return self._load(self.resolve(write_id))

    def approve(self, write_id: str, memory: CuratedMemory) -> WriteResult:
        """Apply a staged write to ``memory`` and drop it from the queue.

        The write goes through ``memory`` (files or PostgreSQL rows) as if made now. If
        it is refused (budget, no match, threat, drift), the pending file is kept and the
        error says why and what to do; approve again once memory has room or the entry
        exists.
        """
        full = self.resolve(write_id)  # before locking: a fresh home has no folder yet
        with file_lock(self._lock_path):
            # Loaded under the lock: if another reviewer approved it meanwhile, it is gone.
            staged = self._load(full)
            try:
                result = _replay(staged, memory)
            except CuratedMemoryError as exc:
                raise type(exc)(_kept(staged, str(exc)), **exc.details) from exc
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged.path)
            return result

    def reject(self, write_id: str) -> str:
        """Drop a staged write without applying it; return its full id.

        Works on a damaged file too, so nothing unreadable can clog the queue.
        """
        full = self.resolve(write_id)
        with file_lock(self._lock_path):
            try:
                os.unlink(self.folder / f"{full}.json")
            except FileNotFoundError:
                raise InvalidMemoryArgument(
                    f"Pending write {full} was already approved or rejected."
                ) from None
            return full


def _kept(staged: PendingWrite, message: str) -> str:
    return (
        f"Pending write {staged.id} was not applied and stays pending: {message} "
        f"Approve it again once that is fixed, or drop it with "
        f"`memstrata memory reject {staged.id}`."
    )


def _replay(staged: PendingWrite, memory: CuratedMemory) -> WriteResult:
    ops = staged.operations
    if staged.batch or len(ops) != 1:
        return memory.apply_batch(staged.target, list(ops))
    op = ops[0]
    if op["action"] == "add":
        return memory.add(staged.target, op["content"] or "")
    if op["action"] == "replace":
        return memory.replace(staged.target, op["old_text"] or "", op["content"] or "")
    if op["action"] == "remove":
        return memory.remove(staged.target, op["old_text"] or "")
    raise InvalidMemoryArgument(
        f"Pending write {staged.id} has unknown action {op['action']!r}; reject it."
    )
