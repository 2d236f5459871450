"""An in-process :class:`~memstrata.llm.types.LLMClient` that answers from a script.

Where :class:`~memstrata.testing.FakeLLMServer` tests the HTTP path (SDK, retries,
streaming over the wire), :class:`ScriptedClient` drives code above the model seam (an
agent loop, a curator, a summariser) with no socket and no thread: each call takes the
next :class:`~memstrata.testing.Reply` of its script and records the request.

Example::

    from memstrata.testing import Reply, ScriptedClient

    client = ScriptedClient([
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea"}),
        Reply.text("Noted: you like tea."),
    ])
    completion = client.complete([{"role": "user", "content": "I like tea"}])
    assert completion.tool_calls[0].name == "memory"
    assert client.requests[0].messages[-1]["content"] == "I like tea"
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memstrata.errors import (
    LLMAuthError,
    LLMError,
    LLMNetworkError,
    LLMQuotaError,
    LLMResponseError,
    LLMTimeoutError,
)
from memstrata.llm.types import Completion, StreamEvent, TokenUsage, ToolCall
from memstrata.testing.embeddings import hash_embedding
from memstrata.testing.replies import Reply
from memstrata.testing.wire import approx_tokens

__all__ = ["ScriptedClient", "ScriptedRequest"]

DEFAULT_MODEL: Final = "scripted-model"
EMBEDDING_DIMENSIONS: Final = 64


@dataclass(frozen=True)
class ScriptedRequest:
    """One call the client received (messages and tools deep-copied as sent)."""

    kind: str
    """``"complete"``, ``"stream"`` or ``"embed"``."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    texts: list[str] = field(default_factory=list)

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered with this request."""
        return [str(t.get("function", t).get("name")) for t in self.tools]


class ScriptedClient:
    """Answers each call with the next scripted reply; records every request.

    Args:
        replies: the script, in order (a ``str`` is a plain text reply).
        model: the model name it reports.
        default: the reply once the script is used up (None: an exhausted script raises
            :class:`~memstrata.errors.LLMResponseError`, so an unexpected extra call fails
            the test instead of passing silently).
        chunk_chars: the size of the text pieces :meth:`stream` yields.

    A reply built with ``Reply.error(status)`` raises the error a real client maps that
    status to (401/403 auth, 402/429 quota, others response errors); ``disconnect``
    raises a network error.
    """

    def __init__(
        self,
        replies: Iterable[Reply | str] = (),
        *,
        model: str = DEFAULT_MODEL,
        default: Reply | str | None = None,
        chunk_chars: int = 8,
    ) -> None:
        if chunk_chars < 1:
            raise ValueError("chunk_chars must be at least 1")
        self.model = model
        self.default = _reply(default) if default is not None else None
        self.chunk_chars = chunk_chars
        self.requests: list[ScriptedRequest] = []
        self.closed = False
        self._script: deque[Reply] = deque(_reply(r) for r in replies)
        self._lock = threading.Lock()

    def add(self, *replies: Reply | str) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(_reply(r) for r in replies)

    @property
    def remaining(self) -> int:
        """Replies not yet used."""
        with self._lock:
            return len(self._script)

    def _next(self, request: ScriptedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        if self.default is not None:
            return self.default
        raise LLMResponseError(
            f"ScriptedClient has no reply left for call {len(self.requests)}; add one with "
            "client.add(...) or pass default= for calls beyond the script."
        )

    def _request(
        self,
        kind: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        temperature: float | None,
        max_tokens: int | None,
    ) -> ScriptedRequest:
        return ScriptedRequest(
            kind=kind,
            messages=[copy.deepcopy(dict(m)) for m in messages],
            tools=[copy.deepcopy(dict(t)) for t in tools or ()],
            temperature=temperature,
            max_tokens=max_tokens,
        )

    # -- the LLMClient protocol -------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        stream: bool = False,
    ) -> Completion:
        """The next reply as a whole completion."""
        request = self._request("complete", messages, tools, temperature, max_tokens)
        return self._completion(self._next(request), request)

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """The next reply as text pieces, then its tool calls, then ``"done"``."""
        request = self._request("stream", messages, tools, temperature, max_tokens)
        completion = self._completion(self._next(request), request)
        return self._events(completion)

    def _events(self, completion: Completion) -> Iterator[StreamEvent]:
        text = completion.text
        for start in range(0, len(text), self.chunk_chars):
            yield StreamEvent(kind="text", text=text[start : start + self.chunk_chars])
        for call in completion.tool_calls:
            yield StreamEvent(kind="tool_call", tool_call=call)
        yield StreamEvent(kind="done", completion=completion)

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """Deterministic vectors (:func:`~memstrata.testing.hash_embedding`, 64 dims)."""
        with self._lock:
            self.requests.append(ScriptedRequest(kind="embed", texts=list(texts)))
        return [hash_embedding(text, EMBEDDING_DIMENSIONS) for text in texts]

    def close(self) -> None:
        """Nothing to release; remembered in :attr:`closed`."""
        self.closed = True

    # -- replies to completions -------------------------------------------------------

    def _completion(self, reply: Reply, request: ScriptedRequest) -> Completion:
        if reply.disconnect:
            raise LLMNetworkError(f"{self.model}: the scripted connection was dropped.")
        if reply.status >= 400 or reply.error_body is not None:
            raise _error(reply, self.model)
        calls = tuple(
            ToolCall(
                id=call.id or f"call_{len(self.requests)}_{index}",
                name=call.name,
                arguments=call.arguments,
            )
            for index, call in enumerate(reply.tool_calls)
        )
        prompt = approx_tokens(json.dumps(request.messages, ensure_ascii=False))
        usage = dict(reply.usage or {})
        return Completion(
            text=reply.content,
            tool_calls=calls,
            finish_reason=reply.finish_reason or ("tool_calls" if calls else "stop"),
            usage=TokenUsage(
                prompt_tokens=usage.get("prompt_tokens", prompt),
                completion_tokens=usage.get("completion_tokens", approx_tokens(reply.content)),
                cached_tokens=usage.get("cached_tokens", 0),
            ),
            model=self.model,
        )


def _reply(value: Reply | str) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply.text(value)
    raise TypeError(f"a scripted reply is a Reply or a str, got {type(value).__name__}")


def _error(reply: Reply, model: str) -> LLMError:
    body = reply.error_body or {}
    message = f"{model}: HTTP {reply.status} {body.get('message', 'scripted error')}"
    if reply.status in (401, 403):
        return LLMAuthError(message)
    if reply.status in (402, 429):
        return LLMQuotaError(message)
    if reply.status in (408, 504):
        return LLMTimeoutError(message)
    return LLMResponseError(message)
