""":class:`OpenAIClient`: any OpenAI-compatible endpoint through the official ``openai`` SDK.

OpenAI, OpenRouter, vLLM, llama.cpp's server, Ollama, LM Studio and most gateways speak
the same ``/v1/chat/completions`` and ``/v1/embeddings``; only the base URL, the key and
the model name differ.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memstrata.errors import LLMNotConfiguredError, LLMResponseError
from memstrata.llm._common import SDKClient
from memstrata.llm.retry import RetryPolicy, call_with_retries
from memstrata.llm.types import Completion, Message, StreamEvent, TokenUsage, ToolCall, ToolSchema

if TYPE_CHECKING:
    import openai

OPENAI_BASE_URL = "https://api.openai.com/v1"
# Local servers (llama.cpp, vLLM, Ollama) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "unused"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_from_openai(usage: Any) -> TokenUsage:
    """Read token usage from an OpenAI-style ``usage`` object (any field may be absent).

    Besides OpenAI's ``prompt_tokens_details.cached_tokens`` this reads DeepSeek's
    ``prompt_cache_hit_tokens`` and the Anthropic-style ``cache_read_input_tokens`` /
    ``cache_creation_input_tokens`` that some gateways pass through.
    """
    if usage is None:
        return TokenUsage()
    extra: Mapping[str, Any] = getattr(usage, "model_extra", None) or {}
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _int(getattr(details, "cached_tokens", None))
    written = _int(getattr(details, "cache_write_tokens", None))
    cached = cached or _int(extra.get("prompt_cache_hit_tokens"))
    cached = cached or _int(extra.get("cache_read_input_tokens"))
    written = written or _int(extra.get("cache_creation_input_tokens"))
    return TokenUsage(
        prompt_tokens=_int(getattr(usage, "prompt_tokens", None)),
        completion_tokens=_int(getattr(usage, "completion_tokens", None)),
        cached_tokens=cached,
        cache_write_tokens=written,
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def done(self, index: int) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_{index}", name=self.name, arguments="".join(self.arguments)
        )


class OpenAIClient(SDKClient):
    """A chat model (and optionally an embedding model) at an OpenAI-compatible endpoint.

    Args:
        model: the chat model name, as the endpoint knows it.
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``; "" means OpenAI.
        api_key: the key; may be "" for a local server that needs none.
        timeout: seconds per call (for streams: per wait for the next chunk).
        max_retries: retries of retryable failures (rate limit, 5xx, timeout, network).
        embedding_model: the model :meth:`embed` uses; "" disables :meth:`embed`.
        retry: full control of the backoff (overrides ``max_retries``).
        stream_usage: ask for token usage at the end of streams
            (``stream_options.include_usage``); turn off for servers that reject it.
        max_tokens_param: the request field for ``max_tokens``. OpenAI's own API wants
            ``max_completion_tokens`` (its reasoning models refuse ``max_tokens``), while
            most compatible servers only know ``max_tokens``. Default: the former for
            api.openai.com, the latter elsewhere.
    """

    provider = "openai"
    _shape_hint = " Check that llm.base_url points at an OpenAI-compatible chat API."
    # The SDK raises ValueError when a server-sent event carries text that is not JSON.
    _malformed_chunk_errors = (ValueError,)

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "",
        api_key: str = "",
        timeout: float = 60.0,
        max_retries: int = 2,
        embedding_model: str = "",
        retry: RetryPolicy | None = None,
        stream_usage: bool = True,
        max_tokens_param: str = "",
    ) -> None:
        if not model:
            raise LLMNotConfiguredError(
                "OpenAIClient needs a model name. Set one with "
                "`memstrata config set llm.model MODEL` or MEMSTRATA_MODEL."
            )
        if not api_key and not base_url:
            raise LLMNotConfiguredError(
                "No API key for api.openai.com. Set OPENAI_API_KEY (or "
                "`memstrata config set llm.api_key KEY`), or point llm.base_url / "
                "OPENAI_BASE_URL at a local server such as http://127.0.0.1:8080/v1."
            )
        self.model = model
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.embedding_model = embedding_model
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=max_retries)
        self.stream_usage = stream_usage
        official = self.base_url == OPENAI_BASE_URL
        self.max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if official else "max_tokens"
        )
        # Imported here, not at module level: the SDK takes a second or more to import,
        # and `import memstrata` (every CLI command) must not pay for it.
        import openai

        self._sdk_module = openai
        # The SDK's own retries are off: RetryPolicy is the one place retries happen.
        self._sdk: openai.OpenAI = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or _PLACEHOLDER_KEY,
            timeout=timeout,
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, base_url={self.base_url!r})"

    def _where(self, model: str | None = None) -> str:
        return f"{self.base_url} (model {model or self.model})"

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "timeout": self.timeout if timeout is None else timeout,
        }
        if tools:
            kwargs["tools"] = [dict(t) for t in tools]
        if temperature is not None:
            kwargs["temperature"] = temperature
        if max_tokens is not None:
            kwargs[self.max_tokens_param] = max_tokens
        return kwargs

    def _stream_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"stream": True}
        if self.stream_usage:
            fields["stream_options"] = {"include_usage": True}
        return fields

    def _create(self, kwargs: dict[str, Any]) -> Any:
        return self._sdk.chat.completions.create(**kwargs)

    def _completion(self, response: Any) -> Completion:
        choices = response.choices
        if not isinstance(choices, list) or not choices:
            raise LLMResponseError(
                f"The model at {self._where()} returned no choices. The endpoint may not "
                "support this model or request; check its logs."
            )
        choice = choices[0]
        message = choice.message
        calls = tuple(
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in (message.tool_calls or [])
            if getattr(c, "type", "function") == "function"
        )
        return Completion(
            text=message.content or "",
            tool_calls=calls,
            finish_reason=choice.finish_reason,
            usage=usage_from_openai(response.usage),
            model=response.model or self.model,
        )

    def _assemble(self, first: Any, chunks: Iterator[Any]) -> Iterator[StreamEvent]:
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}
        finish: str | None = None
        usage = TokenUsage()
        model = self.model
        chunk = first
        while chunk is not None:
            model = getattr(chunk, "model", None) or model
            if getattr(chunk, "usage", None) is not None:
                usage = usage_from_openai(chunk.usage)
            for choice in getattr(chunk, "choices", None) or []:
                delta = choice.delta
                if delta is not None and delta.content:
                    text.append(delta.content)
                    yield StreamEvent("text", text=delta.content)
                for part in (delta.tool_calls if delta is not None else None) or []:
                    partial = calls.setdefault(part.index, _PartialCall())
                    partial.id = partial.id or (part.id or "")
                    function = part.function
                    if function is not None:
                        # The name comes whole in the first fragment; some servers repeat it.
                        partial.name = partial.name or (function.name or "")
                        if function.arguments:
                            partial.arguments.append(function.arguments)
                finish = choice.finish_reason or finish
            chunk = next(chunks, None)
        done = tuple(calls[i].done(i) for i in sorted(calls))
        for call in done:
            yield StreamEvent("tool_call", tool_call=call)
        completion = Completion(
            text="".join(text), tool_calls=done, finish_reason=finish, usage=usage, model=model
        )
        yield StreamEvent("done", completion=completion)

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """Embed each text with ``embedding_model`` through ``/v1/embeddings``."""
        if not self.embedding_model:
            raise LLMNotConfiguredError(
                "No embedding model is configured. Set one with "
                "`memstrata config set llm.embedding_model MODEL` "
                "(e.g. text-embedding-3-small, or nomic-embed-text on Ollama)."
            )
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one string")
        if not texts:
            return []
        items = list(texts)
        where = self._where(self.embedding_model)
        response = call_with_retries(
            lambda: self._sdk.embeddings.create(
                model=self.embedding_model,
                input=items,
                encoding_format="float",
                timeout=self.timeout if timeout is None else timeout,
            ),
            policy=self.retry,
            sdk=self._sdk_module,
            where=where,
        )
        try:
            data = sorted(response.data, key=lambda item: item.index)
            vectors = [[float(x) for x in item.embedding] for item in data]
        except (AttributeError, TypeError, ValueError) as exc:
            raise LLMResponseError(f"The embeddings from {where} are malformed ({exc}).") from exc
        if len(vectors) != len(items):
            raise LLMResponseError(
                f"{where} returned {len(vectors)} embeddings for {len(items)} texts."
            )
        return vectors
