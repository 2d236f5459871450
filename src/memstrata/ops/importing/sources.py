"""Reading a source file whole: bytes, UTF-8 text and JSON, with errors that name the fix."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from memstrata import fileio
from memstrata.errors import ImportDataError


def read_bytes(path: Path) -> bytes:
    """The file's bytes; ImportDataError when it cannot be read.

    A symlink is refused (:class:`~memstrata.errors.SymlinkRefusedError`): an export
    carrying a link would otherwise import whatever local file it points at.
    """
    try:
        return fileio.read_bytes(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise fileio.symlink_refused(path, "an import source") from None
        raise ImportDataError(
            f"Cannot read {path} ({exc.strerror or exc}). Check the path and its permissions."
        ) from exc


def decode_text(raw: bytes, origin: str) -> str:
    """UTF-8 text (a byte-order mark is dropped); ImportDataError otherwise."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportDataError(
            f"{origin} is not UTF-8 text ({exc.reason} at byte {exc.start}): give the "
            "export file itself, unzipped."
        ) from exc


def decode_json(raw: bytes, origin: str) -> Any:
    """The JSON document in ``raw``; ImportDataError when it is not JSON."""
    text = decode_text(raw, origin)
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ImportDataError(f"{origin} nests JSON too deeply to be an export.") from exc
    except ValueError as exc:
        raise ImportDataError(
            f"{origin} is not valid JSON ({exc}). If the export was cut short, download "
            "it again; give conversations.json from the unzipped export."
        ) from exc


def jsonl_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the non-blank lines.

    Split on ``\\n`` only: ``str.splitlines`` would also split inside a JSON string
    holding a raw U+2028 or U+0085, which JSON allows unescaped.
    """
    return [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def json_line(line: str) -> Any:
    """Decode one JSONL line; ValueError (a bad record) when it is not JSON."""
    try:
        return json.loads(line)
    except RecursionError as exc:
        raise ValueError("the line nests JSON too deeply") from exc
