"""The values that cross the LLM seam, and the :class:`LLMClient` contract.

Messages and tool schemas go in as OpenAI chat-completions dicts (the lingua franca of
every compatible endpoint); results come back as small frozen dataclasses that do not
depend on any SDK.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from memstrata.errors import LLMResponseError

Message = Mapping[str, Any]
ToolSchema = Mapping[str, Any]


@dataclass(frozen=True)
class TokenUsage:
    """Tokens counted by the endpoint for one call (0 when it did not report them).

    ``cached_tokens`` are prompt tokens read from the provider's prefix cache (part of
    ``prompt_tokens``); ``cache_write_tokens`` are prompt tokens written to it.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        """Sum two usages, e.g. to total a conversation."""
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model; ``arguments`` is the JSON text it wrote.

    The text is kept as written (it may be invalid JSON); tool dispatch parses it and
    answers the model with an error it can act on.
    """

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry for an assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Completion:
    """The result of one chat call."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = ""

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (OpenAI format)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        return message


@dataclass(frozen=True)
class StreamEvent:
    """One event of :meth:`LLMClient.stream`.

    ``kind`` is ``"text"`` (``text`` holds the new characters), ``"tool_call"`` (a tool
    call whose arguments are complete, in ``tool_call``) or ``"done"`` (the last event;
    ``completion`` holds the assembled text, tool calls, finish reason and usage).
    """

    kind: Literal["text", "tool_call", "done"]
    text: str = ""
    tool_call: ToolCall | None = None
    completion: Completion | None = None


@runtime_checkable
class LLMClient(Protocol):
    """A chat model behind one small seam; implementations map SDK errors to
    :mod:`memstrata.errors` (``LLMAuthError``, ``LLMQuotaError``, ``LLMTimeoutError``,
    ``LLMNetworkError``, ``LLMResponseError``) and retry only what a retry can fix."""

    model: str

    def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        stream: bool = False,
    ) -> Completion:
        """Send the conversation and return the whole reply.

        With ``stream=True`` the reply is received as a stream and assembled, which
        keeps slow generations inside a per-chunk timeout.
        """
        ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield text deltas and finished tool calls as they arrive, then ``"done"``."""
        ...

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """Embed each text (one vector per text, in order)."""
        ...

    def close(self) -> None:
        """Release the HTTP connections."""
        ...


def final_completion(events: Iterator[StreamEvent], where: str) -> Completion:
    """Drain a stream of events and return its ``"done"`` completion.

    The stream is closed afterwards, so its HTTP response is released at once rather than
    when the generator is garbage-collected.
    """
    try:
        for event in events:
            if event.completion is not None:
                return event.completion
    finally:
        if isinstance(events, Generator):
            events.close()
    raise LLMResponseError(f"The stream from {where} ended without a result.")
