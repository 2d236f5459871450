"""The on-disk format of curated memory files and the frozen system-prompt rendering.

A memory file is a list of entries joined by :data:`ENTRY_DELIMITER` (``"\\n§\\n"``) with
no trailing newline; an empty list is an empty file. Reading splits on that exact string
(a ``§`` inside a line does not split), strips each entry, drops empties and keeps the
first of any duplicates. Usage is the length of the joined text, delimiters included.

Everything here is pure: :mod:`memstrata.memory.files` does the locking, reading and writing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Target = Literal["memory", "user"]
TARGETS: tuple[Target, ...] = ("memory", "user")

ENTRY_DELIMITER = "\n§\n"
SEPARATOR_MARK = "§"
FILE_NAMES: dict[Target, str] = {"memory": "MEMORY.md", "user": "USER.md"}
BLOCK_HEADERS: dict[Target, str] = {
    "memory": "MEMORY (your personal notes)",
    "user": "USER PROFILE (who the user is)",
}
# A label for messages: "Memory at 2,100/2,200 chars", "User profile at ...".
TARGET_LABELS: dict[Target, str] = {"memory": "Memory", "user": "User profile"}
BLOCK_RULE = "═" * 46
PREVIEW_WIDTH = 80


@dataclass(frozen=True)
class Usage:
    """Characters used by a memory file and its budget."""

    chars: int
    limit: int

    @property
    def percent(self) -> int:
        """Share of the budget in use, capped at 100."""
        if self.limit <= 0:
            return 100
        return min(100, int(self.chars / self.limit * 100))

    @property
    def over_limit(self) -> bool:
        """True when the file holds more than its budget (only a hand edit or a lowered
        limit can cause that: memstrata never writes past the budget)."""
        return self.chars > self.limit

    def __str__(self) -> str:
        if self.over_limit and self.limit > 0:
            # "100% — 107/50 chars" reads as a contradiction: say how far over it is.
            share = int(self.chars / self.limit * 100)
            over = self.chars - self.limit
            return f"{share}% — {self.chars:,}/{self.limit:,} chars, {over:,} over the limit"
        return f"{self.percent}% — {self.chars:,}/{self.limit:,} chars"


_WORD = re.compile(r"\w+")


def fold(text: str) -> str:
    """``text`` compatibility-folded (full-width letters become ASCII) and case-folded:
    what a person means when they type "pnpm" for "PNPM" or "ＰＮＰＭ"."""
    return unicodedata.normalize("NFKC", text).casefold()


def normalize_entry(text: str) -> str:
    """Folded text with punctuation dropped and spaces collapsed: two entries with equal
    normal forms say the same thing."""
    return " ".join(_WORD.findall(fold(text)))


def split_raw(raw: str) -> list[str]:
    """Split file text into stripped, non-empty entries, duplicates kept.

    Windows line endings are folded to ``\\n`` first so a file saved by a Windows editor
    still splits into its entries (the drift guard still reports it: see
    :func:`roundtrip_mismatch`).
    """
    text = raw.replace("\r\n", "\n")
    parts = (part.strip() for part in text.split(ENTRY_DELIMITER))
    return [part for part in parts if part]


def dedupe(entries: Iterable[str]) -> list[str]:
    """Drop repeated entries, keeping the first occurrence and the order."""
    seen: set[str] = set()
    kept: list[str] = []
    for entry in entries:
        if entry not in seen:
            seen.add(entry)
            kept.append(entry)
    return kept


def parse_entries(raw: str | None) -> list[str]:
    """Entries of a file's text (``None`` for a missing file gives no entries)."""
    if raw is None:
        return []
    return dedupe(split_raw(raw))


def serialize(entries: Sequence[str]) -> str:
    """File text for ``entries``: joined by the delimiter, no trailing newline."""
    return ENTRY_DELIMITER.join(entries)


def char_count(entries: Sequence[str]) -> int:
    """Usage of ``entries``: the length of the serialised text."""
    return len(serialize(entries))


def has_separator_line(text: str) -> bool:
    """True if a line of ``text`` holds only ``§`` (ignoring spaces).

    Such a line is an entry separator to a human reader. Inside an entry it means two
    entries were merged (a hand edit with odd spacing, CRLF endings), and written by
    ``add`` it would split into two entries on the next read.
    """
    return any(line.strip() == SEPARATOR_MARK for line in text.splitlines())


def roundtrip_mismatch(raw: str) -> bool:
    """True when rewriting the file from its parse would change more than its ends.

    The comparison ignores whitespace at the very start and end of the file, so the
    trailing newline an editor adds is tolerated, and it ignores duplicates (dropping
    a repeated entry loses nothing). It catches different spacing around delimiters,
    blank entries and Windows line endings: signs of a hand edit that a rewrite would
    silently reformat.
    """
    return raw.strip() != serialize(split_raw(raw))


def suspicious_entry(entry: str, limit: int) -> str | None:
    """Why ``entry`` looks like several entries merged by an outside edit, or ``None``.

    memstrata never writes an entry longer than the whole budget nor one holding a
    separator line, so either means text was appended or pasted outside the tool.
    """
    if len(entry) > limit:
        return f"an entry is {len(entry):,} chars, longer than the whole {limit:,}-char budget"
    if has_separator_line(entry):
        return "an entry contains a '§' line that is not an exact entry separator"
    return None


def preview(entry: str, width: int = PREVIEW_WIDTH) -> str:
    """One entry shortened to ``width`` characters plus ``...`` for error details."""
    return entry[:width] + ("..." if len(entry) > width else "")


def blocked_placeholder(file_name: str, pattern_ids: Sequence[str]) -> str:
    """The text shown in the system prompt instead of an entry the scanner flagged."""
    return (
        f"[BLOCKED: {file_name} entry contained threat pattern(s): {', '.join(pattern_ids)}. "
        "Removed from system prompt; use memory(action=remove) to delete the original.]"
    )


def omitted_note(file_name: str, count: int, chars: int, usage: Usage) -> str:
    """The note closing a block whose file holds more than its budget."""
    noun = "entry" if count == 1 else "entries"
    return (
        f"[{count} {noun} ({chars:,} chars) of {file_name} not shown: the file holds "
        f"{usage.chars:,} chars, over its {usage.limit:,}-char limit. Consolidate with "
        "memory(action=replace) or memory(action=remove) to bring it under the limit.]"
    )


def fit_to_budget(entries: Sequence[str], limit: int) -> tuple[list[str], list[str]]:
    """Split ``entries`` into those shown and those left out of a prompt block.

    Entries are taken in order while the joined text stays within ``limit``; an entry
    that does not fit is skipped and later, smaller ones are still tried, so one huge
    pasted entry does not hide everything after it.
    """
    shown: list[str] = []
    left_out: list[str] = []
    used = 0
    for entry in entries:
        cost = len(entry) + (len(ENTRY_DELIMITER) if shown else 0)
        if used + cost <= limit:
            shown.append(entry)
            used += cost
        else:
            left_out.append(entry)
    return shown, left_out


def render_block(target: Target, entries: Sequence[str], usage: Usage, footer: str = "") -> str:
    """Render one system-prompt block: rule, header with usage, rule, entries."""
    if not entries and not footer:
        return ""
    header = f"{BLOCK_HEADERS[target]} [{usage}]"
    body = serialize(entries)
    if footer:
        body = f"{body}\n\n{footer}" if body else footer
    return f"{BLOCK_RULE}\n{header}\n{BLOCK_RULE}\n{body}"


def render_unavailable(target: Target, reason: str) -> str:
    """Render the block of a file that could not be read, so the model knows why."""
    header = f"{BLOCK_HEADERS[target]} [unavailable]"
    return (
        f"{BLOCK_RULE}\n{header}\n{BLOCK_RULE}\n[{FILE_NAMES[target]} could not be read and "
        f"was left untouched; writes to it are refused until it is fixed. {reason}]"
    )


def join_blocks(blocks: Iterable[str]) -> str:
    """The snapshot: the non-empty blocks separated by a blank line."""
    return "\n\n".join(block for block in blocks if block)
