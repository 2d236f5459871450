"""Summaries by the MCP client's own model: :class:`LLMClient` adapters over sampling.

When an MCP client declares the ``sampling`` capability, ``session_search`` can write its
query-focused summaries with the model the user is already talking to, so the server
needs no model or key of its own. The MCP protocol offers two ways to ask:

* **push** (protocol versions up to 2025-11-25, which most clients speak): the
  server sends ``sampling/createMessage`` to the client in the middle of the tool call
  and waits for the answer. :class:`PushSamplingClient` wraps a blocking ``ask``
  callable the server builds over its session.
* **input required** (2026-07-28 and later): the server answers the tool call with the
  questions it has, and the client calls again with the answers. :class:`SamplingRound`
  plays both halves: on the first call it records every summary request (and answers
  none, so the search still completes with verbatim excerpts); on the retry it answers
  each request from the client's responses, matched by :func:`request_key`.

Either adapter falls back to the configured summary model (``llm.summary_model`` or
``llm.model``) when the client's model fails or did not answer, and the search itself
falls back to verbatim excerpts when neither answers. This module does not import the
MCP SDK: the server converts :class:`SamplingRequest` to and from protocol messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from memstrata.config import Config
from memstrata.errors import LLMError, LLMNotConfiguredError, LLMResponseError, MemstrataError
from memstrata.llm.types import Completion, LLMClient, Message, StreamEvent, ToolSchema

logger = logging.getLogger(__name__)

SAMPLING_MODEL: Final = "mcp-client-sampling"
# A summary needs a bounded answer; the library passes its own cap, this is for callers
# that pass none.
DEFAULT_MAX_TOKENS: Final = 1_200

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class SamplingRequest:
    """One ``sampling/createMessage`` request in plain values.

    ``messages`` are (role, text) pairs; system messages are folded into ``system``
    because MCP sampling carries the system prompt separately.
    """

    system: str
    messages: tuple[tuple[Role, str], ...]
    max_tokens: int
    temperature: float | None

    @property
    def key(self) -> str:
        """A stable name for this request: the same question always gets the same key."""
        return request_key(self)


def request_key(request: SamplingRequest) -> str:
    """Hash the request's content, so an answer sent back later finds its question."""
    payload = json.dumps(
        [request.system, request.messages, request.max_tokens, request.temperature],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return "summary-" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


def _text_of(content: Any) -> str:
    # OpenAI content is a string or a list of parts; only text parts can be sampled.
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type", "text") == "text"
        )
    return "" if content is None else str(content)


def to_sampling_request(
    messages: Sequence[Message], *, max_tokens: int | None, temperature: float | None
) -> SamplingRequest:
    """Convert OpenAI chat messages to a :class:`SamplingRequest`.

    Raises :class:`~memstrata.errors.LLMResponseError` when nothing is left to send.
    """
    system: list[str] = []
    turns: list[tuple[Role, str]] = []
    for message in messages:
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        elif role == "assistant":
            turns.append(("assistant", text))
        else:
            # Tool results have no sampling role; they reach the model as user text.
            turns.append(("user", text))
    if not turns:
        raise LLMResponseError("A sampling request needs at least one user message.")
    return SamplingRequest(
        system="\n\n".join(s for s in system if s),
        messages=tuple(turns),
        max_tokens=int(max_tokens) if max_tokens else DEFAULT_MAX_TOKENS,
        temperature=temperature,
    )


Ask = Callable[[SamplingRequest, float | None], tuple[str, str]]
"""Send one request to the client and block for its answer: ``(text, model)``.

Raises :class:`~memstrata.errors.LLMError` when the client refuses or fails."""

FallbackFactory = Callable[[], LLMClient | None]
"""Builds the configured summary model's client on first need (None: none configured)."""


def configured_summary_client(config: Config | None) -> LLMClient | None:
    """The configured summary model's client, or None when no model is configured."""
    from memstrata.llm.settings import client_for

    try:
        return client_for("summary", config)
    except LLMNotConfiguredError:
        return None
    except MemstrataError as exc:
        logger.warning("The configured summary model cannot be used: %s", exc)
        return None


class _SamplingBase(ABC):
    """The :class:`LLMClient` surface shared by both adapters.

    Subclasses implement :meth:`_answer`; a failed answer goes to the fallback model,
    built on first need (most searches are answered by the client or the cache).
    """

    model: str = SAMPLING_MODEL

    def __init__(self, fallback: FallbackFactory | None = None) -> None:
        self._fallback_factory = fallback
        self._fallback: LLMClient | None = None
        self._fallback_built = False
        self._lock = threading.Lock()

    @abstractmethod
    def _answer(self, request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        """The client's answer to one request: ``(text, model)``; LLMError if none."""

    # Deliberately empty, not abstract: only the two-round client refuses requests.
    def _intercept(  # noqa: B027
        self, messages: Sequence[Message], *, max_tokens: int | None, temperature: float | None
    ) -> None:
        """Called first by :meth:`complete`; raise to refuse the request (default: no-op)."""

    def _fallback_client(self) -> LLMClient | None:
        with self._lock:
            if not self._fallback_built:
                self._fallback_built = True
                if self._fallback_factory is not None:
                    self._fallback = self._fallback_factory()
            return self._fallback

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
        """Ask the client's model; on failure ask the configured summary model."""
        self._intercept(messages, max_tokens=max_tokens, temperature=temperature)
        if tools:
            # Sampling with tools needs a capability summaries never use.
            raise LLMError("The MCP client's model is used for summaries only, not tool calls.")
        request = to_sampling_request(messages, max_tokens=max_tokens, temperature=temperature)
        try:
            text, model = self._answer(request, timeout)
        except LLMError as exc:
            fallback = self._fallback_client()
            if fallback is None:
                raise
            logger.info("Client sampling gave no summary (%s); using the configured model", exc)
            return fallback.complete(
                messages, temperature=temperature, max_tokens=max_tokens, timeout=timeout
            )
        if not text.strip():
            raise LLMResponseError("The MCP client's model returned an empty answer.")
        return Completion(text=text, finish_reason="stop", model=model or SAMPLING_MODEL)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Sampling answers arrive whole: one text event, then ``done``."""
        completion = self.complete(
            messages, tools=tools, temperature=temperature, max_tokens=max_tokens, timeout=timeout
        )
        yield StreamEvent("text", text=completion.text)
        yield StreamEvent("done", completion=completion)

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """MCP sampling has no embeddings."""
        raise LLMError(
            "The MCP client's model cannot embed text; set llm.embedding_model for embeddings."
        )

    def close(self) -> None:
        """Close the fallback client if one was built."""
        with self._lock:
            fallback, self._fallback = self._fallback, None
        if fallback is not None:
            fallback.close()


class PushSamplingClient(_SamplingBase):
    """Summaries by the client's model, asked in the middle of the tool call (push).

    ``ask`` sends one request over the MCP session and blocks until the answer comes;
    it may be called from several threads at once (summaries run concurrently).
    """

    def __init__(self, ask: Ask, *, fallback: FallbackFactory | None = None) -> None:
        super().__init__(fallback)
        self._ask = ask

    def _answer(self, request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        return self._ask(request, timeout)


class SamplingRound(_SamplingBase):
    """Summaries by the client's model over an input-required round trip.

    First call (``answers`` is None): every request is recorded in :attr:`asked` and
    refused, so the search finishes with verbatim text that the server discards in
    favour of asking. Retry (``answers`` maps :func:`request_key` to the client's text):
    each request is answered from it; a request without an answer (the conversation
    changed between the rounds, or the client declined) goes to the fallback model.
    """

    def __init__(
        self,
        answers: Mapping[str, str] | None = None,
        *,
        fallback: FallbackFactory | None = None,
        model: str = SAMPLING_MODEL,
    ) -> None:
        super().__init__(fallback)
        self.answers = answers
        self.model = model
        self.asked: dict[str, SamplingRequest] = {}

    @property
    def collecting(self) -> bool:
        """True on the first call, which records requests instead of answering them."""
        return self.answers is None

    def _intercept(
        self, messages: Sequence[Message], *, max_tokens: int | None, temperature: float | None
    ) -> None:
        # The first call records every request and refuses it before the fallback model
        # could answer it: the server then asks the client instead.
        if self.collecting:
            request = to_sampling_request(messages, max_tokens=max_tokens, temperature=temperature)
            with self._lock:
                self.asked[request.key] = request
            raise LLMError("The summary is being asked of the MCP client's model.")

    def _answer(self, request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        text = (self.answers or {}).get(request.key)
        if text is None:
            raise LLMError("The MCP client sent no answer for this summary.")
        return text, self.model
