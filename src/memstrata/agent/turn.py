"""The pieces of one agent turn: messages as sent, the model call, usage and price.

Kept apart from :mod:`memstrata.agent.loop` so the lifecycle reads on one screen. The one
rule here is byte stability: :func:`api_message` is the only way a conversation message
becomes request JSON, for live turns and resumed sessions alike, so a resumed session
sends exactly the bytes the original one sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memstrata.config import Config
from memstrata.llm.types import Completion, LLMClient, StreamEvent, TokenUsage, ToolCall
from memstrata.prompt.fencing import OPEN_TAG, StreamingContextScrubber, sanitize_context

# The keys a conversation message may hold (a subset of the store's message keys).
CONVERSATION_KEYS: Final = ("role", "content", "tool_calls", "tool_call_id", "name", "api_content")
# What separates the user's text from the recall fence in the API copy.
FENCE_SEPARATOR: Final = "\n\n"

TextSink = Callable[[str], None]


def api_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as it goes on the wire: ``api_content`` (the exact bytes sent when
    the message was new) replaces ``content``, keys in one fixed order."""
    api = message.get("api_content")
    out: dict[str, Any] = {
        "role": message["role"],
        "content": api if api is not None else message.get("content"),
    }
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name") and message["role"] == "tool":
        out["name"] = message["name"]
    return out


def message_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored message row as a conversation message (the shape live turns use)."""
    out: dict[str, Any] = {"role": row["role"], "content": row.get("content")}
    if row.get("tool_calls"):
        out["tool_calls"] = row["tool_calls"]
    if row.get("tool_call_id"):
        out["tool_call_id"] = row["tool_call_id"]
    name = row.get("tool_name") or row.get("name")
    if name and row["role"] == "tool":
        out["name"] = name
    if row.get("api_content") is not None:
        out["api_content"] = row["api_content"]
    return out


def without_api_content(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as stored for people and providers: the raw text, no recall fence."""
    return {k: v for k, v in message.items() if k != "api_content"}


def user_api_content(text: str, fence: str) -> str | None:
    """The API copy of a user message: the text, then the recall fence (None: no fence)."""
    return f"{text}{FENCE_SEPARATOR}{fence}" if fence else None


def refit_api_content(message: Mapping[str, Any]) -> dict[str, Any]:
    """Keep a message's ``api_content`` consistent after compression edited ``content``.

    Compression may merge the summary in front of a kept user message; its API copy then
    becomes the new text followed by the same fence. When the copy cannot be rebuilt it
    is dropped, so the model never sees text the stored message does not have.
    """
    out = dict(message)
    api, content = out.get("api_content"), out.get("content")
    if api is None:
        return out
    if isinstance(api, str) and isinstance(content, str):
        if api.startswith(content) and OPEN_TAG in api[len(content) :]:
            return out
        cut = api.rfind(FENCE_SEPARATOR + OPEN_TAG)
        if cut >= 0 and content.endswith(api[:cut]):
            out["api_content"] = content + api[cut:]
            return out
    del out["api_content"]
    return out


@dataclass(frozen=True)
class Pricing:
    """Prices in dollars per million tokens, for the cost recorded with each session.

    ``cache_read_multiplier`` and ``cache_write_multiplier`` scale the input price for
    prompt tokens read from or written to the provider's prefix cache (Anthropic:
    0.1 and 1.25; OpenAI: 0.5 or 0.25 and 1.0).
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_multiplier: float = 0.1
    cache_write_multiplier: float = 1.25

    @classmethod
    def from_config(cls, config: Config) -> Pricing | None:
        """Prices from the ``[llm]`` settings; None when no price is set (cost unknown)."""
        llm = config.section("llm")
        if not (llm["input_price_per_mtok"] or llm["output_price_per_mtok"]):
            return None
        return cls(
            input_per_mtok=llm["input_price_per_mtok"],
            output_per_mtok=llm["output_price_per_mtok"],
            cache_read_multiplier=llm["cache_read_multiplier"],
            cache_write_multiplier=llm["cache_write_multiplier"],
        )

    def cost(self, usage: TokenUsage) -> float:
        """Dollars for one call's usage (cached and written tokens are part of the prompt)."""
        plain = max(0, usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens)
        prompt = (
            plain
            + usage.cached_tokens * self.cache_read_multiplier
            + usage.cache_write_tokens * self.cache_write_multiplier
        )
        return (prompt * self.input_per_mtok + usage.completion_tokens * self.output_per_mtok) / 1e6


@dataclass(frozen=True)
class TurnResult:
    """What one user turn produced.

    ``text`` is the final reply as shown to the user (fences removed). ``session_id`` is
    the session the turn ended in (a compression during the turn moves to a child).
    ``usage`` sums the turn's model calls; ``cost_usd`` is None without :class:`Pricing`.
    """

    text: str
    session_id: str
    api_calls: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float | None = None
    compressed: bool = False
    hit_tool_limit: bool = False


def call_model(
    client: LLMClient,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    stream: bool,
    scrubber: StreamingContextScrubber,
    on_text: TextSink | None,
    temperature: float | None = None,
    max_tokens: int | None = None,
) -> Completion:
    """One model call; text reaches ``on_text`` only after the fence scrubber.

    Streaming shows text as it arrives; otherwise the whole (sanitised) reply is passed
    to ``on_text`` at once. The returned completion's text is sanitised too, so a model
    echoing a recall fence never gets it stored.
    """
    scrubber.reset()
    if not stream:
        completion = client.complete(
            messages, tools=tools or None, temperature=temperature, max_tokens=max_tokens
        )
        clean = sanitize_context(completion.text)
        if on_text is not None and clean:
            on_text(clean)
        return _with_text(completion, clean)
    events: Iterator[StreamEvent] = client.stream(
        messages, tools=tools or None, temperature=temperature, max_tokens=max_tokens
    )
    done: Completion | None = None
    try:
        for event in events:
            if event.kind == "text" and event.text:
                shown = scrubber.feed(event.text)
                if shown and on_text is not None:
                    on_text(shown)
            elif event.kind == "done":
                done = event.completion
    finally:
        close = getattr(events, "close", None)
        if callable(close):
            close()
    rest = scrubber.flush()
    if rest and on_text is not None:
        on_text(rest)
    if done is None:
        from memstrata.errors import LLMResponseError

        raise LLMResponseError(
            f"The stream from {client.model} ended without a final message; try again."
        )
    return _with_text(done, sanitize_context(done.text))


def _with_text(completion: Completion, text: str) -> Completion:
    if text == completion.text:
        return completion
    return Completion(
        text=text,
        tool_calls=completion.tool_calls,
        finish_reason=completion.finish_reason,
        usage=completion.usage,
        model=completion.model,
    )


def assistant_message(completion: Completion) -> dict[str, Any]:
    """The conversation message for a reply (tool calls in OpenAI form)."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["tool_calls"] = [call.to_dict() for call in completion.tool_calls]
    return message


def tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    """The conversation message carrying one tool result."""
    return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}


def open_tool_calls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(id, name)`` of the last assistant message's calls that have no result yet."""
    index = len(messages) - 1
    answered: set[str] = set()
    while index >= 0 and messages[index].get("role") == "tool":
        answered.add(str(messages[index].get("tool_call_id") or ""))
        index -= 1
    if index < 0 or messages[index].get("role") != "assistant":
        return []
    missing: list[tuple[str, str]] = []
    for call in messages[index].get("tool_calls") or []:
        if isinstance(call, Mapping):
            call_id = str(call.get("id") or "")
            function = call.get("function")
            name = str(function.get("name", "")) if isinstance(function, Mapping) else ""
            if call_id and call_id not in answered:
                missing.append((call_id, name))
    return missing


__all__ = [
    "CONVERSATION_KEYS",
    "Pricing",
    "TurnResult",
    "api_message",
    "assistant_message",
    "call_model",
    "message_from_row",
    "open_tool_calls",
    "refit_api_content",
    "tool_message",
    "user_api_content",
    "without_api_content",
]
