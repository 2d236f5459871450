"""Export sessions (JSONL, lossless; Markdown, readable) and the curated memory files.

The JSONL export is memstrata's own interchange format and what ``memstrata import``
reads back: a header line, then one line per session, parents before children::

    {"format": "memstrata-sessions", "version": 1, "exported_at": 1767225600.0}
    {"session": {"id": "...", "title": "...", ...every column...},
     "messages": [{"role": "user", "content": "...", "timestamp": ..., "active": 1, ...}]}

Every session column and every message field needed to rebuild the store is kept:
structured content, tool calls, reasoning, archived rows with their ``compacted`` flag,
lineage, token counters. Only the public ``SessionStore`` methods are used, so the
PostgreSQL store exports the same way.

    with SessionStore() as store, open("sessions.jsonl", "w") as out:
        export_sessions(store, out, fmt="jsonl")
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from memstrata import fileio
from memstrata.errors import SessionStoreError
from memstrata.memory.format import FILE_NAMES, TARGETS, serialize
from memstrata.ops.importing.memstrata_jsonl import EXPORT_FORMAT, EXPORT_VERSION
from memstrata.ops.importing.records import parents_first
from memstrata.query.paging import MAX_PAGE

if TYPE_CHECKING:
    from memstrata.memory.core import CuratedMemory
    from memstrata.store.contract import SessionStoreContract

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "all_session_ids", "export_memory", "export_sessions"]

# Message fields that the store derives (row id, owner) are not exported.
_DERIVED_MESSAGE_KEYS = ("id", "session_id")
Progress = Callable[[int, int], None]


def all_session_ids(store: SessionStoreContract) -> list[str]:
    """Every session id in the store (archived, continuations and delegates included)."""
    rows = store.list_sessions_rich(include_archived=True, limit=MAX_PAGE)
    found: dict[str, None] = {}
    for row in rows:
        for sid in row["session_ids"]:
            found[sid] = None
            # The listing shows conversations; a conversation's delegates hide behind it.
            for member in store.get_lineage_ids(sid):
                found[member] = None
    return list(found)


def _ordered(
    store: SessionStoreContract, session_ids: Sequence[str] | None
) -> list[dict[str, Any]]:
    ids = list(dict.fromkeys(session_ids)) if session_ids is not None else all_session_ids(store)
    sessions: dict[str, dict[str, Any]] = {}
    for sid in ids:
        session = store.get_session(sid)
        if session is None:
            raise SessionStoreError(
                f"No session {sid!r} to export: `memstrata sessions list` shows the ids."
            )
        sessions[sid] = dict(session)
    by_start = sorted(sessions.values(), key=lambda s: (float(s["started_at"] or 0), s["id"]))
    # Parents first, so that an import can link every child as it reads it.
    order = parents_first((s["id"], s.get("parent_session_id")) for s in by_start)
    return [sessions[sid] for sid in order]


def _jsonl_line(store: SessionStoreContract, session: Mapping[str, Any]) -> str:
    messages = [
        {k: v for k, v in m.items() if k not in _DERIVED_MESSAGE_KEYS}
        for m in store.get_messages(session["id"], include_inactive=True)
    ]
    return json.dumps({"session": dict(session), "messages": messages}, ensure_ascii=False)


def export_sessions(
    store: SessionStoreContract,
    out: TextIO,
    *,
    fmt: Literal["jsonl", "markdown"],
    session_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """Write sessions to ``out`` as JSONL (lossless) or Markdown; return how many.

    ``session_ids`` picks sessions (all when None; an unknown id raises
    :class:`~memstrata.errors.SessionStoreError`). ``progress(done, total)`` is called
    after each session.
    """
    if fmt not in ("jsonl", "markdown"):
        raise SessionStoreError(f"Unknown export format {fmt!r}: use 'jsonl' or 'markdown'.")
    sessions = _ordered(store, session_ids)
    if fmt == "jsonl":
        header = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "exported_at": time.time()}
        out.write(json.dumps(header) + "\n")
    for done, session in enumerate(sessions, 1):
        if fmt == "jsonl":
            out.write(_jsonl_line(store, session) + "\n")
        else:
            if done > 1:
                out.write("\n---\n\n")
            out.write(
                session_markdown(session, store.get_messages(session["id"], include_inactive=True))
            )
        if progress is not None:
            progress(done, len(sessions))
    return len(sessions)


def export_memory(memory: CuratedMemory, folder: Path | str) -> list[Path]:
    """Write the live ``MEMORY.md`` and ``USER.md`` entries into ``folder``; return the files.

    The entries are read through ``memory`` (so a PostgreSQL-backed memory exports too)
    and written in the same ``\\n§\\n`` format, atomically.
    """
    target_dir = fileio.private_dir(Path(folder))
    written = []
    for target in TARGETS:
        path = target_dir / FILE_NAMES[target]
        fileio.atomic_write(path, serialize(memory.entries(target)), sync_folder=False)
        written.append(path)
    return written


# -- Markdown ---------------------------------------------------------------------------


def _when(ts: object) -> str:
    if not isinstance(ts, int | float):
        return ""
    return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fenced(text: str, info: str = "") -> str:
    # A fence longer than any backtick run inside, so the block cannot be closed early.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}\n"


def _content_markdown(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content + "\n"
    return _fenced(json.dumps(content, ensure_ascii=False, indent=2), "json")


def session_markdown(session: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> str:
    """One session as readable Markdown: a heading, its details, then every message."""
    lines = [f"# {session.get('title') or session['id']}", ""]
    details = [f"- id: `{session['id']}`", f"- source: {session.get('source')}"]
    if session.get("model"):
        details.append(f"- model: {session['model']}")
    details.append(f"- started: {_when(session.get('started_at'))}")
    if session.get("ended_at"):
        details.append(f"- ended: {_when(session['ended_at'])} ({session.get('end_reason')})")
    if session.get("parent_session_id"):
        kind = session.get("lineage_kind") or "child"
        details.append(f"- parent: `{session['parent_session_id']}` ({kind})")
    lines += [*details, ""]
    for message in messages:
        role = str(message.get("role"))
        heading = f"## {role} · {_when(message.get('timestamp'))}"
        if role == "tool" and message.get("tool_name"):
            heading = f"## tool result: {message['tool_name']} · {_when(message.get('timestamp'))}"
        if not message.get("active", 1):
            heading += " (archived)"
        lines += [heading, ""]
        if message.get("reasoning"):
            quoted = "\n".join(f"> {line}" for line in str(message["reasoning"]).splitlines())
            lines += [quoted, ""]
        body = _content_markdown(message.get("content"))
        if role == "tool" and isinstance(message.get("content"), str):
            body = _fenced(str(message["content"]))
        if body:
            lines.append(body)
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function", {}) if isinstance(call, Mapping) else {}
            name = function.get("name", "?") if isinstance(function, Mapping) else "?"
            args = function.get("arguments", "") if isinstance(function, Mapping) else ""
            lines += [f"**tool call** `{name}`", "", _fenced(str(args), "json")]
    return "\n".join(lines).rstrip() + "\n"
