"""The part of an SDK-backed chat client that does not depend on which SDK it wraps.

Both clients send a request under :class:`~memstrata.llm.retry.RetryPolicy`, open a
stream by retrying until its first chunk arrives, and map SDK failures met while reading
the rest; only the request shape, the SDK call and the reply parsing differ.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Self

from memstrata.errors import LLMResponseError
from memstrata.llm.retry import RetryPolicy, call_with_retries, classify, sdk_base_error
from memstrata.llm.types import Completion, Message, StreamEvent, ToolSchema, final_completion


class SDKClient:
    """Retries, streaming and lifetime shared by the clients of :mod:`memstrata.llm`.

    A subclass sets ``model``, ``timeout``, ``retry``, ``_sdk_module`` (the imported SDK,
    whose exception classes :func:`classify` reads) and ``_sdk`` (its client object), and
    implements :meth:`_request`, :meth:`_create`, :meth:`_completion` and :meth:`_assemble`.
    """

    can_stream = True
    supports_tools = True
    # Appended to the "unexpected shape" error, to point at the likely misconfiguration.
    _shape_hint = ""
    # Errors met while reading a stream that mean a malformed chunk rather than an SDK failure.
    _malformed_chunk_errors: tuple[type[Exception], ...] = ()

    model: str
    timeout: float
    retry: RetryPolicy
    _sdk_module: ModuleType
    _sdk: Any

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the HTTP connections."""
        self._sdk.close()

    def _where(self) -> str:
        raise NotImplementedError

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        """The keyword arguments of the SDK's create call for this conversation."""
        raise NotImplementedError

    def _stream_fields(self) -> dict[str, Any]:
        """The request fields that turn a create call into a stream."""
        return {"stream": True}

    def _create(self, kwargs: dict[str, Any]) -> Any:
        """Send one request through the SDK (no retries: the caller owns them)."""
        raise NotImplementedError

    def _completion(self, response: Any) -> Completion:
        """Read a whole (non-streamed) reply; may raise AttributeError/TypeError on bad shapes."""
        raise NotImplementedError

    def _assemble(self, first: Any, events: Iterator[Any]) -> Iterator[StreamEvent]:
        """Turn the SDK's stream events, starting at ``first``, into :class:`StreamEvent`."""
        raise NotImplementedError

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
        """Send the conversation and return the whole reply (see :class:`LLMClient`)."""
        if stream:
            return final_completion(
                self.stream(
                    messages,
                    tools=tools,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    timeout=timeout,
                ),
                self._where(),
            )
        kwargs = self._request(messages, tools, temperature, max_tokens, timeout)
        response = call_with_retries(
            lambda: self._create(kwargs),
            policy=self.retry,
            sdk=self._sdk_module,
            where=self._where(),
        )
        try:
            return self._completion(response)
        except (AttributeError, TypeError) as exc:
            raise LLMResponseError(
                f"The model at {self._where()} answered in an unexpected shape ({exc})."
                + self._shape_hint
            ) from exc

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield text deltas and finished tool calls as they arrive, then ``"done"``.

        Failures before the first chunk are retried; after it, output has been handed to
        the caller and a failure is raised as is.
        """
        kwargs = self._request(messages, tools, temperature, max_tokens, timeout)
        kwargs.update(self._stream_fields())

        def open_stream() -> tuple[Any, Iterator[Any], Any]:
            response = self._create(kwargs)
            events = iter(response)
            return response, events, next(events, None)

        response, events, first = call_with_retries(
            open_stream, policy=self.retry, sdk=self._sdk_module, where=self._where()
        )
        try:
            yield from self._assemble(first, events)
        except sdk_base_error(self._sdk_module) as exc:
            raise classify(exc, self._sdk_module, self._where()).error from exc
        except self._malformed_chunk_errors as exc:
            raise LLMResponseError(
                f"The stream from {self._where()} held a chunk that is not JSON ({exc})."
            ) from exc
        finally:
            response.close()
