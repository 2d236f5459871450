"""The outcome of an import: what was added, skipped, topped up, refused, or bad."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstrata.ops.importing.records import BadRecord


@dataclass(frozen=True)
class RefusedEntry:
    """A curated-memory entry that was not merged: the target, its start, and why."""

    target: str
    entry: str
    reason: str


@dataclass
class ImportReport:
    """Counts and problems of one import.

    A session is *added* when it was new, *topped up* when it existed with fewer
    messages than the source (the missing tail was appended), and *skipped* when it
    already held everything. ``bad`` lists skipped records and messages with their
    position in the source; ``memory_refused`` the curated-memory entries the scanner or
    the budget refused.
    """

    source: str
    format: str
    sessions_added: int = 0
    sessions_topped_up: int = 0
    sessions_skipped: int = 0
    messages_added: int = 0
    messages_skipped: int = 0
    bad_messages: int = 0
    """How many of ``bad`` are single messages (their session was imported)."""
    memory_added: int = 0
    memory_skipped: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    memory_refused: list[RefusedEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (``--json`` output)."""
        return {
            "source": self.source,
            "format": self.format,
            "sessions": {
                "added": self.sessions_added,
                "topped_up": self.sessions_topped_up,
                "skipped": self.sessions_skipped,
                "bad": len(self.bad) - self.bad_messages,
            },
            "messages": {
                "added": self.messages_added,
                "skipped": self.messages_skipped,
                "bad": self.bad_messages,
            },
            "memory": {
                "added": self.memory_added,
                "skipped": self.memory_skipped,
                "refused": len(self.memory_refused),
            },
            "bad_records": [{"location": b.location, "reason": b.reason} for b in self.bad],
            "refused_entries": [
                {"target": r.target, "entry": r.entry, "reason": r.reason}
                for r in self.memory_refused
            ],
            "notes": list(self.notes),
        }
