"""Validation of curated-memory arguments, done before any lock is taken.

Each function returns the cleaned value or raises
:class:`~memstrata.errors.InvalidMemoryArgument` /
:class:`~memstrata.errors.ThreatDetectedError` with a message saying what to send
instead. Batch errors name the operation and end with :data:`BATCH_SUFFIX`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memstrata.errors import InvalidMemoryArgument, MemoryFullError, ThreatDetectedError
from memstrata.memory.format import Target, has_separator_line
from memstrata.scanner import scan as scanner

BATCH_SUFFIX = " No operations were applied (batch is all-or-nothing)."
# No entry is longer than this, whatever the budget: the size is checked before the
# threat scanner reads a character, so an oversized write is refused at once.
MAX_ENTRY_CHARS = 65_536
_SURROGATE_RX = re.compile("[\ud800-\udfff]")
ACTIONS = ("add", "replace", "remove")


@dataclass(frozen=True)
class BatchOp:
    """One validated batch operation (``position`` counts from 1)."""

    position: int
    action: str
    content: str
    old_text: str

    @property
    def label(self) -> str:
        """``"Operation N (action)"``, the prefix of this operation's errors."""
        return f"Operation {self.position} ({self.action})"


def check_target(target: object) -> Target:
    """``target`` if it is ``"memory"`` or ``"user"``."""
    if target == "memory":
        return "memory"
    if target == "user":
        return "user"
    raise InvalidMemoryArgument(f"Invalid target {target!r}. Use 'memory' or 'user'.")


def clean_content(content: object, empty_message: str, *, max_chars: int | None = None) -> str:
    """Entry text as it will be stored: ``\\n`` line endings, stripped, one entry.

    The length is checked first (against ``max_chars``, the target's budget, when given,
    and always against :data:`MAX_ENTRY_CHARS`), before any other work and before the
    threat scanner runs.
    """
    if not isinstance(content, str):
        raise InvalidMemoryArgument(f"content must be a string, got {type(content).__name__}.")
    check_size(content.strip(), max_chars)
    # Line endings are stored as "\n": a file is split after folding "\r\n", so an
    # entry keeping "\r\n" would read back different from what was written.
    text = content.replace("\r\n", "\n").strip()
    if not text:
        raise InvalidMemoryArgument(empty_message)
    if not text.isascii() and _SURROGATE_RX.search(text):
        # A lone surrogate (JSON "\ud800") cannot be written as UTF-8.
        raise InvalidMemoryArgument(
            "Content holds an unpaired UTF-16 surrogate, which is not valid text. Resend "
            "it as plain text."
        )
    if has_separator_line(text):
        raise InvalidMemoryArgument(
            "Content contains a line holding only '§', the entry separator, so it would "
            "split into several entries. Save each part as its own entry (one add each, "
            "or one apply_batch) or drop that line, then retry."
        )
    return text


def check_size(text: str, max_chars: int | None = None) -> None:
    """Refuse an entry longer than the budget ``max_chars`` or :data:`MAX_ENTRY_CHARS`.

    :class:`MemoryFullError` when the target's budget is what it exceeds (the entry could
    never fit), :class:`InvalidMemoryArgument` past the absolute entry limit.
    """
    if max_chars is not None and max_chars <= MAX_ENTRY_CHARS and len(text) > max_chars:
        raise MemoryFullError(
            f"This entry alone is {len(text):,} chars, longer than the whole "
            f"{max_chars:,}-char limit of this target, so it was refused unread. Shorten "
            "it to the essential fact (a sentence or two), or split it into several entries."
        )
    if len(text) > MAX_ENTRY_CHARS:
        raise InvalidMemoryArgument(
            f"Content is {len(text):,} characters, more than the entry limit "
            f"({MAX_ENTRY_CHARS:,}), so it was refused unread. Save a short summary of the "
            "fact instead (a sentence or two), or split it into several entries."
        )


def clean_old_text(old_text: object) -> str:
    """``old_text`` with line endings folded like stored entries, stripped, non-empty."""
    if not isinstance(old_text, str):
        raise InvalidMemoryArgument(f"old_text must be a string, got {type(old_text).__name__}.")
    old = old_text.replace("\r\n", "\n").strip()
    if not old:
        raise InvalidMemoryArgument("old_text cannot be empty.")
    return old


def threat_text(findings: Sequence[scanner.ThreatFinding]) -> str:
    """The refusal message for scanner findings, naming every pattern."""
    make = getattr(scanner, "threat_message", None)
    if callable(make):
        return str(make(list(findings)))
    ids = ", ".join(f"'{f.pattern_id}'" for f in findings)
    return (
        f"Blocked: content matches threat pattern(s) {ids}. Memory is injected into the "
        "system prompt and must not contain injection or exfiltration payloads; write the "
        "fact as a plain declarative note."
    )


def scan_content(text: str, op: BatchOp | None = None) -> None:
    """Raise :class:`ThreatDetectedError` if ``text`` trips the scanner at strict scope."""
    findings = scanner.scan_for_threats(text, "strict")
    if findings:
        message = threat_text(findings)
        if op is not None:
            message = f"{op.label}: {message}{BATCH_SUFFIX}"
        raise ThreatDetectedError(message, patterns=[f.pattern_id for f in findings])


def validate_batch(operations: object, *, max_chars: int | None = None) -> list[BatchOp]:
    """Check every operation, then scan every content, before the file is touched.

    ``max_chars`` is the target's budget: a content longer than it is refused before
    anything is scanned."""
    if isinstance(operations, str | bytes) or not isinstance(operations, Sequence):
        raise InvalidMemoryArgument(
            'operations must be a list of objects like {"action": "add", "content": "..."}.'
        )
    if not operations:
        raise InvalidMemoryArgument("operations list is empty.")
    ops: list[BatchOp] = []
    for position, raw in enumerate(operations, start=1):
        if not isinstance(raw, Mapping):
            raise InvalidMemoryArgument(
                f"Operation {position} must be an object with 'action' and 'content' "
                "and/or 'old_text'." + BATCH_SUFFIX
            )
        action = raw.get("action")
        label = f"Operation {position} ({action or 'unknown'})"
        if action not in ACTIONS:
            raise InvalidMemoryArgument(
                f"{label}: unknown action. Use add, replace, or remove." + BATCH_SUFFIX
            )
        content, old = "", ""
        try:
            if action in ("add", "replace"):
                content = clean_content(
                    raw.get("content") or "",
                    "content is required."
                    if action == "add"
                    else "content is required (use action='remove' to delete).",
                    max_chars=max_chars,
                )
            if action in ("replace", "remove"):
                old = clean_old_text(raw.get("old_text") or "")
        except InvalidMemoryArgument as exc:
            raise InvalidMemoryArgument(f"{label}: {exc}{BATCH_SUFFIX}") from None
        ops.append(BatchOp(position, str(action), content, old))
    # Scanning comes after every operation parsed, and before the lock: one poisoned
    # operation refuses the whole batch without touching the file.
    for op in ops:
        if op.content:
            scan_content(op.content, op)
    return ops
