"""Import a Claude (claude.ai) data export (``conversations.json``).

Each conversation has a ``uuid``, a ``name`` and ``chat_messages``; a message has a
``sender`` (``human`` or ``assistant``), a plain ``text`` and, in newer exports, typed
``content`` blocks (``text``, ``thinking``, ``tool_use``, ``tool_result``) plus
``attachments`` whose extracted text is kept with the message. When messages carry
``parent_message_uuid`` (edits and retries make branches), the branch ending at the
newest message is imported. A ``tool_use`` block becomes a tool call of the assistant
message and its ``tool_result`` a ``tool`` message; ``thinking`` becomes reasoning.
Session ids are ``claude-<uuid>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from memstrata.ops.importing.records import (
    ParsedSource,
    SessionRecord,
    conversation_export,
    ended_at_last_message,
    epoch,
    guarded,
    message,
    opt_text,
    session_id,
    title_text,
    tool_call,
)
from memstrata.ops.importing.sources import decode_json, read_bytes

FORMAT = "claude"
PREFIX = "claude"
SOURCE = "claude"
_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def read(path: Path) -> ParsedSource:
    """Open ``conversations.json`` (or a folder holding it) for import."""
    file = path / "conversations.json" if path.is_dir() else path
    return parse_bytes(read_bytes(file), str(file))


def parse_bytes(raw: bytes, origin: str) -> ParsedSource:
    """Parse the bytes of a Claude ``conversations.json``."""
    return parse_data(decode_json(raw, origin), origin)


def parse_data(data: Any, origin: str) -> ParsedSource:
    """Parse the decoded JSON: a list of conversations (or one conversation object)."""
    return conversation_export(
        data,
        origin,
        fmt=FORMAT,
        label="Claude",
        marker="chat_messages",
        convert=conversation_record,
    )


def _branch(
    messages: list[tuple[int, Mapping[str, Any]]],
) -> list[tuple[int, Mapping[str, Any]]]:
    """The ``(index, message)`` pairs of the branch ending with the newest message."""
    if not any("parent_message_uuid" in m for _, m in messages):
        return messages
    if not messages:
        return []
    by_id = {m["uuid"]: (i, m) for i, m in messages if isinstance(m.get("uuid"), str)}
    newest = max(messages, key=lambda pair: (epoch(pair[1].get("created_at")) or 0.0, pair[0]))
    path: list[tuple[int, Mapping[str, Any]]] = []
    seen: set[int] = set()
    node: tuple[int, Mapping[str, Any]] | None = newest
    # A parent loop in a damaged file must end the walk, not hang it.
    while node is not None and node[0] not in seen:
        seen.add(node[0])
        path.append(node)
        parent = node[1].get("parent_message_uuid")
        node = by_id.get(parent) if isinstance(parent, str) else None
    path.reverse()
    return path


def _attachments(raw: Mapping[str, Any]) -> str:
    out = []
    for key in ("attachments", "files"):
        items = raw.get(key)
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, Mapping):
                continue
            name = opt_text(item.get("file_name")) or "file"
            extracted = opt_text(item.get("extracted_content"))
            out.append(f"[attachment: {name}]" + (f"\n{extracted}" if extracted else ""))
    return "\n\n".join(out)


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(c["text"])
            for c in content
            if isinstance(c, Mapping) and isinstance(c.get("text"), str)
        )
    return ""


def _convert(raw: Mapping[str, Any], index: int, fallback: float | None) -> list[dict[str, Any]]:
    """One chat message as one or more store messages (tool use splits a turn)."""
    role = _ROLES.get(str(raw.get("sender")))
    if role is None:
        raise ValueError(f"message {index} has an unknown sender {raw.get('sender')!r}")
    when = epoch(raw.get("created_at")) or fallback
    msg_id = opt_text(raw.get("uuid")) or str(index)
    blocks = raw.get("content")
    out: list[dict[str, Any]] = []
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    last_call: str | None = None

    def flush() -> None:
        body = "\n\n".join(t for t in text if t)
        if body or calls:
            out.append(
                message(
                    role,
                    body or None,
                    timestamp=when,
                    tool_calls=list(calls),
                    reasoning="\n".join(thinking) or None,
                )
            )
        text.clear()
        thinking.clear()
        calls.clear()

    if isinstance(blocks, list) and blocks:
        for n, block in enumerate(blocks):
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                text.append(str(block["text"]))
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thinking.append(str(block["thinking"]))
            elif kind == "tool_use":
                last_call = opt_text(block.get("id")) or f"toolu_{msg_id}_{n}"
                name = opt_text(block.get("name")) or "tool"
                calls.append(tool_call(last_call, name, block.get("input", {})))
            elif kind == "tool_result":
                flush()
                call_id = opt_text(block.get("tool_use_id")) or last_call
                out.append(
                    message(
                        "tool",
                        _result_text(block.get("content")),
                        timestamp=when,
                        tool_name=block.get("name"),
                        tool_call_id=call_id,
                    )
                )
    elif isinstance(raw.get("text"), str):
        text.append(str(raw["text"]))
    attached = _attachments(raw)
    if attached:
        text.append(attached)
    flush()
    return out


def conversation_record(item: Any, location: str) -> SessionRecord:
    """Convert one conversation object."""
    if not isinstance(item, Mapping):
        raise ValueError(f"a conversation must be an object, got {type(item).__name__}")
    chat = item.get("chat_messages")
    if not isinstance(chat, list):
        raise ValueError("the conversation has no 'chat_messages' list")
    started = epoch(item.get("created_at"))
    record = SessionRecord(
        id=session_id(PREFIX, item.get("uuid")),
        location=location,
        source=SOURCE,
        title=title_text(item.get("name")),
        started_at=started,
        model=opt_text(item.get("model")),
    )
    when = started
    messages = [(i, m) for i, m in enumerate(chat) if isinstance(m, Mapping)]
    for index, raw in _branch(messages):
        converted = guarded(
            f"{location}.chat_messages[{index}]", partial(_convert, raw, index, when)
        )
        if isinstance(converted, list):
            record.messages.extend(converted)
            when = converted[-1]["timestamp"] if converted else when
        else:
            record.problems.append(converted)
    return ended_at_last_message(record)
