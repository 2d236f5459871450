"""Import a ChatGPT data export (``conversations.json``).

Each conversation is a tree: ``mapping`` holds nodes (``message``, ``parent``,
``children``), and every edit or regeneration starts a branch. The conversation as the
user last saw it is the path from ``current_node`` up to the root, which is what is
imported (other branches are left out). Hidden nodes (the empty system root, context
flagged ``is_visually_hidden_from_conversation``) are skipped; custom instructions
(``user_editable_context``) become the session's system prompt; an assistant message
addressed to a tool (``recipient`` other than ``all``) becomes a tool call, and the
tool's answer a ``tool`` message linked to it; ``thoughts`` become the reasoning of the
next assistant message. Session ids are ``chatgpt-<conversation id>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memstrata.ops.importing.records import (
    ParsedSource,
    SessionRecord,
    conversation_export,
    ended_at_last_message,
    epoch,
    message,
    opt_text,
    session_id,
    title_text,
    tool_call,
)
from memstrata.ops.importing.sources import decode_json, read_bytes

FORMAT = "chatgpt"
PREFIX = "chatgpt"
SOURCE = "chatgpt"
_SKIPPED_TYPES = ("reasoning_recap", "model_editable_context")


def read(path: Path) -> ParsedSource:
    """Open ``conversations.json`` (or a folder holding it) for import."""
    file = path / "conversations.json" if path.is_dir() else path
    return parse_bytes(read_bytes(file), str(file))


def parse_bytes(raw: bytes, origin: str) -> ParsedSource:
    """Parse the bytes of a ``conversations.json``."""
    data = decode_json(raw, origin)
    return parse_data(data, origin)


def parse_data(data: Any, origin: str) -> ParsedSource:
    """Parse the decoded JSON: a list of conversations (or one conversation object)."""
    return conversation_export(
        data, origin, fmt=FORMAT, label="ChatGPT", marker="mapping", convert=conversation_record
    )


def _text_of(content: Mapping[str, Any]) -> str:
    """The readable text of one message content, whatever its ``content_type``."""
    kind = content.get("content_type")
    if kind == "tether_quote":
        bits = [content.get("title"), content.get("url"), content.get("text")]
        return "\n".join(b for b in bits if isinstance(b, str) and b)
    if kind == "tether_browsing_display":
        return str(content.get("result") or content.get("summary") or "")
    if kind == "thoughts":
        thoughts = content.get("thoughts")
        lines = []
        for t in thoughts if isinstance(thoughts, list) else []:
            if isinstance(t, Mapping):
                lines += [str(t[k]) for k in ("summary", "content") if isinstance(t.get(k), str)]
        return "\n".join(lines)
    if isinstance(content.get("text"), str):
        return str(content["text"])
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping):
            if isinstance(part.get("text"), str):  # audio transcriptions
                out.append(str(part["text"]))
            elif isinstance(part.get("asset_pointer"), str):
                out.append(f"[{part.get('content_type') or 'file'}: {part['asset_pointer']}]")
    return "\n".join(p for p in out if p)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _path(mapping: Mapping[str, Any], current: object) -> list[Mapping[str, Any]]:
    """Nodes from the root to ``current`` (or to the newest leaf when it is missing)."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [
            (epoch(_mapping(n.get("message")).get("create_time")) or 0.0, str(k))
            for k, n in mapping.items()
            if isinstance(n, Mapping) and not n.get("children")
        ]
        if not leaves:
            return []
        current = max(leaves)[1]
    path: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    node_id: object = current
    # A parent loop in a damaged file must end the walk, not hang it.
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, Mapping):
            break
        path.append(node)
        node_id = node.get("parent")
    path.reverse()
    return path


def conversation_record(item: Any, location: str) -> SessionRecord:
    """Convert one conversation object."""
    if not isinstance(item, Mapping):
        raise ValueError(f"a conversation must be an object, got {type(item).__name__}")
    mapping = item.get("mapping")
    if not isinstance(mapping, Mapping):
        raise ValueError("the conversation has no 'mapping' of messages")
    started = epoch(item.get("create_time"))
    record = SessionRecord(
        id=session_id(PREFIX, item.get("conversation_id") or item.get("id")),
        location=location,
        source=SOURCE,
        title=title_text(item.get("title")),
        started_at=started,
        model=opt_text(item.get("default_model_slug")),
        archived=item.get("is_archived") is True,
    )
    when = started
    pending_calls: dict[str, str] = {}
    reasoning: list[str] = []
    for node in _path(mapping, item.get("current_node")):
        raw = node.get("message")
        if not isinstance(raw, Mapping):
            continue  # the empty root node, or a node whose message was deleted
        meta = _mapping(raw.get("metadata"))
        content = _mapping(raw.get("content"))
        author = _mapping(raw.get("author"))
        role = author.get("role")
        when = epoch(raw.get("create_time")) or when
        kind = content.get("content_type")
        if kind == "user_editable_context":
            bits = [content.get("user_profile"), content.get("user_instructions")]
            record.system_prompt = "\n\n".join(b for b in bits if isinstance(b, str) and b)
            continue
        if meta.get("is_visually_hidden_from_conversation") is True or kind in _SKIPPED_TYPES:
            continue
        text = _text_of(content)
        if kind == "thoughts":
            if text:
                reasoning.append(text)
            continue
        if isinstance(meta.get("model_slug"), str):
            record.model = record.model or str(meta["model_slug"])
        recipient = raw.get("recipient")
        node_id = opt_text(raw.get("id")) or str(len(record.messages))
        if role == "assistant" and isinstance(recipient, str) and recipient not in ("all", ""):
            call_id = f"call_{node_id}"
            pending_calls[recipient] = call_id
            record.messages.append(
                message(
                    "assistant",
                    None,
                    timestamp=when,
                    tool_calls=[tool_call(call_id, recipient, text)],
                    reasoning="\n".join(reasoning) or None,
                )
            )
            reasoning = []
            continue
        if not text.strip():
            continue
        if role == "tool":
            name = opt_text(author.get("name")) or "tool"
            call = pending_calls.pop(name, None)
            if call is None and len(pending_calls) == 1:
                call = pending_calls.pop(next(iter(pending_calls)))
            record.messages.append(
                message("tool", text, timestamp=when, tool_name=name, tool_call_id=call)
            )
            continue
        record.messages.append(
            message(
                role if isinstance(role, str) and role else "user",
                text,
                timestamp=when,
                reasoning=("\n".join(reasoning) or None) if role == "assistant" else None,
            )
        )
        if role == "assistant":
            reasoning = []
    return ended_at_last_message(record)
