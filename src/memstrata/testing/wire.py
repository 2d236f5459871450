"""Wire formats of the fake server: OpenAI chat completions and Anthropic messages.

Pure functions from a :class:`~memstrata.testing.Reply` to the JSON bodies and
server-sent events real endpoints send, so the SDKs under test parse exactly what they
would parse in production.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from memstrata.testing.replies import Reply

# An SSE event: its ``event:`` name (None for OpenAI, which sends data lines only) and data.
SSEEvent = tuple[str | None, dict[str, Any]]


def approx_tokens(text: str) -> int:
    """The server's token estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``: what a prompt cache reuses.

    A binary search over slice comparisons, which run at C speed, rather than a Python
    loop over characters: prompts run to hundreds of kilobytes.
    """
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def prompt_text(body: Mapping[str, Any]) -> str:
    """The part of a request a prompt cache sees (tools, system, messages), in order."""
    parts = [body.get("tools"), body.get("system"), body.get("messages")]
    return "".join(json.dumps(p, ensure_ascii=False) for p in parts if p)


@dataclass(frozen=True)
class Answer:
    """Everything needed to render one successful reply in either wire format."""

    ident: str
    model: str
    reply: Reply
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    @property
    def calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments) of each tool call, with ids filled in."""
        suffix = self.ident.rsplit("-", 1)[-1]
        return [
            (c.id or f"call_{suffix}_{i}", c.name, c.arguments)
            for i, c in enumerate(self.reply.tool_calls)
        ]


def make_answer(ident: str, model: str, reply: Reply, prompt: str, cached: int) -> Answer:
    """Count tokens for ``reply`` (unless it overrides them) and bundle it."""
    output = reply.content + "".join(c.name + c.arguments for c in reply.tool_calls)
    numbers = {
        "prompt_tokens": approx_tokens(prompt),
        "completion_tokens": approx_tokens(output),
        "cached_tokens": cached,
    }
    numbers.update(reply.usage or {})
    return Answer(ident, model, reply, **numbers)


# -- OpenAI chat completions -------------------------------------------------------------


def openai_error(reply: Reply) -> dict[str, Any]:
    """``{"error": {...}}`` for an error reply."""
    return {"error": dict(reply.error_body or {"message": "fake error", "type": "server_error"})}


def _openai_usage(answer: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": answer.cached_tokens},
    }


def _openai_finish(answer: Answer) -> str:
    return answer.reply.finish_reason or ("tool_calls" if answer.calls else "stop")


def openai_completion(answer: Answer) -> dict[str, Any]:
    """A ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.reply.content or None}
    if answer.calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in answer.calls
        ]
    return {
        "id": answer.ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(answer)}],
        "usage": _openai_usage(answer),
    }


def openai_chunks(answer: Answer, chunk_chars: int, include_usage: bool) -> Iterator[SSEEvent]:
    """The ``chat.completion.chunk`` events of a streamed reply, then the usage chunk."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return None, {
            "id": answer.ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": answer.model,
            "choices": [choice],
        }

    content = answer.reply.content
    yield chunk({"role": "assistant", "content": ""})
    for start in range(0, len(content), chunk_chars):
        yield chunk({"content": content[start : start + chunk_chars]})
    for index, (ident, name, arguments) in enumerate(answer.calls):
        function = {"name": name, "arguments": ""}
        yield chunk(
            {
                "tool_calls": [
                    {"index": index, "id": ident, "type": "function", "function": function}
                ]
            }
        )
        # Arguments arrive in fragments, as from real endpoints, so clients must assemble.
        for start in range(0, len(arguments), chunk_chars):
            piece = {"arguments": arguments[start : start + chunk_chars]}
            yield chunk({"tool_calls": [{"index": index, "function": piece}]})
    yield chunk({}, _openai_finish(answer))
    if include_usage:
        yield (
            None,
            {
                "id": answer.ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": answer.model,
                "choices": [],
                "usage": _openai_usage(answer),
            },
        )


# -- Anthropic messages ------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(reply: Reply) -> dict[str, Any]:
    """``{"type": "error", "error": {...}}`` for an error reply."""
    body = dict(reply.error_body or {})
    if "insufficient_quota" in (body.get("type"), body.get("code")):
        kind = "billing_error"
    else:
        kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
    message = str(body.get("message") or "fake error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic_stop(answer: Answer) -> str:
    finish = answer.reply.finish_reason
    if finish in (None, "stop", "tool_calls"):
        return "tool_use" if answer.calls else "end_turn"
    return "max_tokens" if finish == "length" else str(finish)


def _anthropic_usage(answer: Answer) -> dict[str, int]:
    # Anthropic counts cache reads apart from input_tokens.
    return {
        "input_tokens": answer.prompt_tokens - answer.cached_tokens,
        "output_tokens": answer.completion_tokens,
        "cache_read_input_tokens": answer.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _tool_input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return {}


def anthropic_message(answer: Answer) -> dict[str, Any]:
    """A Messages API ``message`` body."""
    content: list[dict[str, Any]] = []
    if answer.reply.content:
        content.append({"type": "text", "text": answer.reply.content})
    for ident, name, arguments in answer.calls:
        content.append(
            {"type": "tool_use", "id": ident, "name": name, "input": _tool_input(arguments)}
        )
    return {
        "id": answer.ident,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": _anthropic_stop(answer),
        "stop_sequence": None,
        "usage": _anthropic_usage(answer),
    }


def _event(kind: str, **fields: Any) -> SSEEvent:
    return kind, {"type": kind, **fields}


def anthropic_events(answer: Answer, chunk_chars: int) -> Iterator[SSEEvent]:
    """The named server-sent events of a streamed Messages API reply."""
    start = anthropic_message(answer)
    start.update(content=[], stop_reason=None)
    start["usage"] = dict(_anthropic_usage(answer), output_tokens=0)
    yield _event("message_start", message=start)
    blocks: list[tuple[dict[str, Any], str, str]] = []
    if answer.reply.content:
        blocks.append(({"type": "text", "text": ""}, "text_delta", answer.reply.content))
    for ident, name, arguments in answer.calls:
        block = {"type": "tool_use", "id": ident, "name": name, "input": {}}
        blocks.append((block, "input_json_delta", arguments))
    for index, (block, delta_type, text) in enumerate(blocks):
        field_name = "text" if delta_type == "text_delta" else "partial_json"
        yield _event("content_block_start", index=index, content_block=block)
        for pos in range(0, len(text), chunk_chars):
            delta = {"type": delta_type, field_name: text[pos : pos + chunk_chars]}
            yield _event("content_block_delta", index=index, delta=delta)
        yield _event("content_block_stop", index=index)
    stop = {"stop_reason": _anthropic_stop(answer), "stop_sequence": None}
    yield _event("message_delta", delta=stop, usage={"output_tokens": answer.completion_tokens})
    yield _event("message_stop")
