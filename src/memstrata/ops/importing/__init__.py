"""Import conversations and memories from other tools into memstrata.

Sources: a Hermes Agent home (``state.db`` + ``memories/``), a ChatGPT export, a Claude
export, OpenAI-format JSONL, and memstrata's own export. One module per format turns its
source into session records (:mod:`memstrata.ops.importing.records`); the common core writes
them through the public ``SessionStore`` API so that a second import adds nothing
(:mod:`memstrata.ops.importing.idempotence`) and merges curated memory through
``FileMemory`` (:mod:`memstrata.ops.importing.memories`)::

    with SessionStore() as store:
        report = import_source("~/Downloads/chatgpt/conversations.json", store)
    print(report.sessions_added, report.messages_added, report.bad)
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from memstrata.errors import ImportDataError
from memstrata.ops.importing import chatgpt, claude, hermes, memstrata_jsonl, openai_jsonl
from memstrata.ops.importing.detect import FORMAT_NAMES, detect_format
from memstrata.ops.importing.idempotence import Progress, write_records
from memstrata.ops.importing.memories import merge_memories
from memstrata.ops.importing.records import BadRecord, ParsedSource, SessionRecord
from memstrata.ops.importing.report import ImportReport, RefusedEntry

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory
    from memstrata.store.contract import SessionStoreContract

__all__ = [
    "FORMAT_NAMES",
    "BadRecord",
    "ImportReport",
    "ParsedSource",
    "RefusedEntry",
    "SessionRecord",
    "detect_format",
    "import_source",
    "open_source",
]

_READERS: dict[str, ModuleType] = {
    "hermes": hermes,
    "chatgpt": chatgpt,
    "claude": claude,
    "openai": openai_jsonl,
    "memstrata": memstrata_jsonl,
}


def open_source(path: Path | str, fmt: str | None = None) -> ParsedSource:
    """Read ``path`` as ``fmt`` (detected when None); ImportDataError if unreadable."""
    source = Path(path).expanduser()
    name = fmt or detect_format(source)
    if name not in _READERS:
        raise ImportDataError(
            f"Unknown import format {name!r}; use one of {', '.join(FORMAT_NAMES)}."
        )
    if not source.exists():
        raise ImportDataError(f"{source} does not exist: give a file or a folder to import.")
    parsed: ParsedSource = _READERS[name].read(source)
    return parsed


def import_source(
    path: Path | str,
    store: SessionStoreContract,
    memory: CuratedMemory | None = None,
    *,
    fmt: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import ``path`` into ``store`` (and its memory files into ``memory``, if given).

    ``store`` is a :class:`~memstrata.store.sqlite.store.SessionStore` or any store with the same
    public methods (the PostgreSQL store). Idempotent: sessions already imported are
    skipped or topped up. Bad records are reported in the result, with their position,
    and the rest is imported;
    :class:`~memstrata.errors.ImportDataError` means the source as a whole is unreadable.
    """
    parsed = open_source(path, fmt)
    report = ImportReport(source=parsed.origin, format=parsed.format)
    write_records(store, parsed.records, report, total=parsed.total, progress=progress)
    for folder in parsed.memory_dirs:
        if memory is None:
            report.notes.append(f"{folder}: memory files not merged (no memory given).")
        else:
            merge_memories(memory, folder, report)
    return report
