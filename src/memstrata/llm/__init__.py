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
