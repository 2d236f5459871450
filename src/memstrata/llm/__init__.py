"""The one seam between memstrata and language models.

Everything that needs a model (the agent loop, session summaries, compression, the
curator) asks :func:`client_for` for an :class:`LLMClient` and gets back plain
:class:`Completion` values; SDK exceptions never leak past this package, they become
``LLMAuthError``, ``LLMQuotaError``, ``LLMTimeoutError``, ``LLMNetworkError``,
``LLMResponseError`` or ``LLMNotConfiguredError`` from :mod:`memstrata.errors`.

- :class:`OpenAIClient`: any OpenAI-compatible endpoint via the ``openai`` SDK.
- :class:`AnthropicClient`: Claude via the ``anthropic`` SDK (``memstrata[anthropic]``).
- :class:`RetryPolicy`: bounded exponential backoff with jitter, shared by both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata._moved import lazy_exports

if TYPE_CHECKING:
    from memstrata.llm.anthropic_client import AnthropicClient
    from memstrata.llm.openai_client import OpenAIClient
    from memstrata.llm.retry import RetryPolicy
    from memstrata.llm.settings import TASKS, LLMSettings, Task, client_for, resolve_settings
    from memstrata.llm.types import Completion, LLMClient, StreamEvent, TokenUsage, ToolCall

__all__ = [
    "TASKS",
    "AnthropicClient",
    "Completion",
    "LLMClient",
    "LLMSettings",
    "OpenAIClient",
    "RetryPolicy",
    "StreamEvent",
    "Task",
    "TokenUsage",
    "ToolCall",
    "client_for",
    "resolve_settings",
]

# Imported on first use: memory and the tools read tool-call arguments through
# memstrata.llm.arguments and must not pay for the SDK clients.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TASKS": "memstrata.llm.settings",
        "AnthropicClient": "memstrata.llm.anthropic_client",
        "Completion": "memstrata.llm.types",
        "LLMClient": "memstrata.llm.types",
        "LLMSettings": "memstrata.llm.settings",
        "OpenAIClient": "memstrata.llm.openai_client",
        "RetryPolicy": "memstrata.llm.retry",
        "StreamEvent": "memstrata.llm.types",
        "Task": "memstrata.llm.settings",
        "TokenUsage": "memstrata.llm.types",
        "ToolCall": "memstrata.llm.types",
        "client_for": "memstrata.llm.settings",
        "resolve_settings": "memstrata.llm.settings",
    },
)
