"""Tell an import source's format from its layout and first bytes.

* a folder with ``state.db`` (or only ``memories/``, or only ``MEMORY.md``/``USER.md``):
  a Hermes home or its memories folder;
* a folder with ``sessions.jsonl``: a memstrata export;
* a folder with ``conversations.json``, or that file: ChatGPT (``"mapping"``) or Claude
  (``"chat_messages"``);
* a SQLite file: a Hermes ``state.db``;
* a JSONL file: a memstrata export (its header line) or OpenAI-format conversations.
"""

from __future__ import annotations

from pathlib import Path

from memstrata.errors import ImportDataError
from memstrata.ops.importing import memstrata_jsonl
from memstrata.ops.importing.sources import json_line

FORMAT_NAMES = ("hermes", "chatgpt", "claude", "openai", "memstrata")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SNIFF_BYTES = 1 << 20
MEMORY_FILES = ("MEMORY.md", "USER.md")


def _head(path: Path, size: int = _SNIFF_BYTES) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError as exc:
        raise ImportDataError(
            f"Cannot read {path} ({exc.strerror or exc}). Check the path and its permissions."
        ) from exc


def _conversations_format(path: Path) -> str | None:
    head = _head(path)
    # The first conversation's keys show up early; which marker comes first decides.
    found = {
        name: head.find(marker)
        for name, marker in (("chatgpt", b'"mapping"'), ("claude", b'"chat_messages"'))
    }
    hits = {name: pos for name, pos in found.items() if pos >= 0}
    return min(hits, key=lambda name: hits[name]) if hits else None


def _jsonl_format(path: Path) -> str | None:
    for line in _head(path).decode("utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        try:
            item = json_line(line)
        except ValueError:
            return None
        if memstrata_jsonl.is_header(item):
            return "memstrata"
        if isinstance(item, dict) and "session" in item and "messages" in item:
            return "memstrata"
        if isinstance(item, dict) and "messages" in item:
            return "openai"
        return None
    return None


def detect_format(path: Path) -> str:
    """The format name of ``path`` (one of :data:`FORMAT_NAMES`), or ImportDataError."""
    if not path.exists():
        raise ImportDataError(f"{path} does not exist: give a file or a folder to import.")
    hint = f"Cannot tell the format of {path}; pass --format with one of {', '.join(FORMAT_NAMES)}."
    if path.is_dir():
        if (path / "state.db").exists():
            return "hermes"
        if (path / memstrata_jsonl.SESSIONS_FILE).exists():
            return "memstrata"
        if (path / "conversations.json").exists():
            kind = _conversations_format(path / "conversations.json")
            if kind:
                return kind
        elif (path / "memories").is_dir() or any((path / name).exists() for name in MEMORY_FILES):
            return "hermes"
        raise ImportDataError(hint)
    head = _head(path, 64)
    if head.startswith(_SQLITE_MAGIC):
        return "hermes"
    kind = _jsonl_format(path) if not head.lstrip().startswith(b"[") else None
    kind = kind or _conversations_format(path)
    if kind is None:
        raise ImportDataError(hint)
    return kind
