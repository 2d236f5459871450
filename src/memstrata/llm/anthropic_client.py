""":class:`AnthropicClient`: Claude through the ``anthropic`` SDK (``memstrata[anthropic]``).

Callers keep speaking OpenAI-format messages and tool schemas; this module translates
them to the Messages API (system prompt apart, tool calls as ``tool_use`` blocks, tool
results as ``tool_result`` blocks in a user turn) and translates the answer back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

from memstrata.errors import LLMNotConfiguredError
from memstrata.llm._common import SDKClient
from memstrata.llm.retry import RetryPolicy
from memstrata.llm.types import Completion, Message, StreamEvent, TokenUsage, ToolCall, ToolSchema

# The Messages API requires max_tokens; this is used when the caller gives none.
DEFAULT_MAX_TOKENS = 4096
# Anthropic stop reasons in OpenAI's finish_reason words, so callers check one vocabulary.
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


def _load_sdk() -> ModuleType:
    try:
        import anthropic
    except ImportError:
        raise LLMNotConfiguredError(
            "llm.provider is 'anthropic' but the anthropic package is not installed. "
            "Install it with: pip install 'memstrata[anthropic]'"
        ) from None
    return anthropic


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError:
        value = None
    # tool_use.input must be an object; keep unparseable text rather than drop it.
    return value if isinstance(value, dict) else {"_raw_arguments": text}


def to_anthropic(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Split OpenAI-format messages into Anthropic's ``system`` text and ``messages``.

    Consecutive turns of one role are merged, because the Messages API wants user and
    assistant turns to alternate (several tool results form one user turn).
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks: list[dict[str, Any]] = []
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
            continue
        if role == "tool":
            role = "user"
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": str(message.get("tool_call_id", "")),
                    "content": _text_of(message.get("content")),
                }
            )
        else:
            text = _text_of(message.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "input": _arguments(function.get("arguments", "")),
                    }
                )
        if role not in ("user", "assistant") or not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), turns


def tools_to_anthropic(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas as Anthropic tool definitions."""
    converted = []
    for tool in tools:
        function = tool.get("function", tool)
        converted.append(
            {
                "name": function["name"],
                "description": function.get("description", ""),
                "input_schema": function.get("parameters") or {"type": "object"},
            }
        )
    return converted


def usage_from_anthropic(usage: Any) -> TokenUsage:
    """Anthropic usage, with cache reads and writes counted inside ``prompt_tokens``.

    Anthropic's ``input_tokens`` excludes cached tokens; adding them keeps the meaning of
    :class:`TokenUsage` the same for every provider.
    """
    if usage is None:
        return TokenUsage()
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    return TokenUsage(
        prompt_tokens=(getattr(usage, "input_tokens", None) or 0) + read + written,
        completion_tokens=getattr(usage, "output_tokens", None) or 0,
        cached_tokens=read,
        cache_write_tokens=written,
    )


class AnthropicClient(SDKClient):
    """Claude models through the Anthropic Messages API.

    Same contract as :class:`~memstrata.llm.OpenAIClient`; :meth:`embed` is not
    available because Anthropic offers no embeddings API.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "",
        api_key: str = "",
        timeout: float = 60.0,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._sdk_module = _load_sdk()
        if not model:
            raise LLMNotConfiguredError(
                "AnthropicClient needs a model name, e.g. "
                "`memstrata config set llm.model claude-sonnet-4-5`."
            )
        if not api_key:
            raise LLMNotConfiguredError(
                "No Anthropic API key. Set ANTHROPIC_API_KEY or "
                "`memstrata config set llm.api_key KEY`."
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=max_retries)
        self._sdk = self._sdk_module.Anthropic(
            api_key=api_key, base_url=self.base_url or None, timeout=timeout, max_retries=0
        )

    def __repr__(self) -> str:
        return f"AnthropicClient(model={self.model!r})"

    def _where(self) -> str:
        return f"{self.base_url or 'api.anthropic.com'} (model {self.model})"

    def _request(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        system, turns = to_anthropic(messages)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
            "timeout": self.timeout if timeout is None else timeout,
        }
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = tools_to_anthropic(tools)
        if temperature is not None:
            kwargs["temperature"] = temperature
        return kwargs

    def _create(self, kwargs: dict[str, Any]) -> Any:
        return self._sdk.messages.create(**kwargs)

    def _completion(self, response: Any) -> Completion:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input)))
        return Completion(
            text="".join(text),
            tool_calls=tuple(calls),
            finish_reason=_STOP_REASONS.get(response.stop_reason, response.stop_reason),
            usage=usage_from_anthropic(response.usage),
            model=response.model or self.model,
        )

    def _assemble(self, first: Any, events: Iterator[Any]) -> Iterator[StreamEvent]:
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        calls: list[ToolCall] = []
        usage = TokenUsage()
        finish: str | None = None
        event = first
        while event is not None:
            kind = event.type
            if kind == "message_start":
                usage = usage_from_anthropic(event.message.usage)
            elif kind == "content_block_start" and event.content_block.type == "tool_use":
                block = event.content_block
                blocks[event.index] = {"id": block.id, "name": block.name, "json": []}
            elif kind == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    yield StreamEvent("text", text=delta.text)
                elif delta.type == "input_json_delta" and event.index in blocks:
                    blocks[event.index]["json"].append(delta.partial_json)
            elif kind == "content_block_stop" and event.index in blocks:
                block = blocks.pop(event.index)
                call = ToolCall(block["id"], block["name"], "".join(block["json"]) or "{}")
                calls.append(call)
                yield StreamEvent("tool_call", tool_call=call)
            elif kind == "message_delta":
                finish = _STOP_REASONS.get(event.delta.stop_reason, event.delta.stop_reason)
                output = getattr(event.usage, "output_tokens", None) or 0
                usage = TokenUsage(
                    usage.prompt_tokens, output, usage.cached_tokens, usage.cache_write_tokens
                )
            event = next(events, None)
        completion = Completion(
            text="".join(text),
            tool_calls=tuple(calls),
            finish_reason=finish,
            usage=usage,
            model=self.model,
        )
        yield StreamEvent("done", completion=completion)

    def embed(self, texts: Sequence[str], *, timeout: float | None = None) -> list[list[float]]:
        """Not available: Anthropic offers no embeddings API."""
        raise LLMNotConfiguredError(
            "Anthropic offers no embeddings API. Use an OpenAI-compatible endpoint for "
            "embeddings: OpenAIClient(model, base_url=..., embedding_model=...)."
        )
