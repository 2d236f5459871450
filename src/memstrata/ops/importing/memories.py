"""Merge imported ``MEMORY.md``/``USER.md`` entries into curated memory through FileMemory.

Each entry goes through :meth:`FileMemory.add`, so the threat scanner, the character
budget and the lock apply exactly as for the agent's own writes. An entry that is
already there is skipped (so a second import adds nothing); an entry the scanner or the
budget refuses is reported with the reason, never dropped silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from memstrata import fileio
from memstrata.errors import CuratedMemoryError, SymlinkRefusedError, UnreadableFileError
from memstrata.memory.format import FILE_NAMES, TARGETS, parse_entries, preview
from memstrata.ops.importing.records import BadRecord
from memstrata.ops.importing.report import ImportReport, RefusedEntry

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory


def merge_memories(memory: CuratedMemory, folder: Path, report: ImportReport) -> None:
    """Add the entries of ``folder``'s ``MEMORY.md`` and ``USER.md`` to ``memory``."""
    for target in TARGETS:
        path = folder / FILE_NAMES[target]
        try:
            raw = fileio.read_text(path, follow_symlinks=False)
        except (UnreadableFileError, SymlinkRefusedError) as exc:
            report.bad.append(BadRecord(str(path), str(exc)))
            continue
        for entry in parse_entries(raw):
            try:
                # Recorded in the memory history as an import, so `memstrata memory undo`
                # can take back exactly what the import added.
                with memory.attributed("import", f"imported from {path}"):
                    result = memory.add(target, entry)
            except CuratedMemoryError as exc:
                report.memory_refused.append(RefusedEntry(target, preview(entry), str(exc)))
                continue
            if result.changed:
                report.memory_added += 1
            else:
                report.memory_skipped += 1
