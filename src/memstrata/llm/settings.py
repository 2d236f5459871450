"""Which model answers which task: resolving ``[llm]`` settings and building clients.

Precedence for every setting, first wins:

1. arguments passed to :func:`client_for` / :func:`resolve_settings`;
2. ``MEMSTRATA_LLM__<KEY>`` environment variables (e.g. ``MEMSTRATA_LLM__MODEL``);
3. the ``[llm]`` table of ``$MEMSTRATA_HOME/config.toml``;
4. the conventional variables ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and
   ``MEMSTRATA_MODEL`` (``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` when
   ``provider = "anthropic"``), which fill in only what the above leave empty.

The conventional variables come last because they are often exported for other tools;
a setting made for memstrata on purpose should beat them. A task's own model
(``summary_model``, ``compression_model``, ``curator_model``) falls back to ``model``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from memstrata.config import Config
from memstrata.errors import ConfigError, LLMNotConfiguredError
from memstrata.llm.types import LLMClient

Task = Literal["main", "summary", "compression", "curator"]
TASKS: tuple[str, ...] = get_args(Task)
PROVIDERS = ("openai", "anthropic")


@dataclass(frozen=True)
class LLMSettings:
    """The resolved settings of one task's client (``api_key`` is never printed)."""

    task: str
    provider: str
    model: str
    base_url: str
    api_key: str
    embedding_model: str
    timeout: float
    max_retries: int

    def __repr__(self) -> str:
        key = "***" if self.api_key else "''"
        return (
            f"LLMSettings(task={self.task!r}, provider={self.provider!r}, "
            f"model={self.model!r}, base_url={self.base_url!r}, api_key={key}, "
            f"embedding_model={self.embedding_model!r}, timeout={self.timeout!r}, "
            f"max_retries={self.max_retries!r})"
        )


def _not_configured(task: str) -> LLMNotConfiguredError:
    own = f" (or llm.{task}_model for the {task} task only)" if task != "main" else ""
    return LLMNotConfiguredError(
        f"No model is configured for the {task} task. Set one with "
        f"`memstrata config set llm.model MODEL`{own}, or export MEMSTRATA_MODEL=MODEL; "
        "point it at an OpenAI-compatible endpoint with OPENAI_BASE_URL and OPENAI_API_KEY "
        "(or llm.base_url / llm.api_key); `memstrata help llm` shows how. To try memstrata "
        "with no model at all, run `memstrata chat --model demo`."
    )


def resolve_settings(
    task: Task = "main",
    config: Config | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> LLMSettings:
    """Resolve the settings for ``task``; raise LLMNotConfiguredError when no model is set.

    ``config`` defaults to :meth:`Config.load` with the same ``environ``.
    """
    if task not in TASKS:
        raise ConfigError(f"Unknown LLM task {task!r}. Known tasks: {', '.join(TASKS)}.")
    env = os.environ if environ is None else environ
    cfg = config if config is not None else Config.load(environ=env)
    llm = cfg.section("llm")
    chosen_provider = provider or str(llm["provider"]) or "openai"
    if chosen_provider not in PROVIDERS:
        raise ConfigError(
            f"llm.provider = {chosen_provider!r} is not supported. Use one of "
            f"{', '.join(PROVIDERS)}: `memstrata config set llm.provider openai`."
        )
    prefix = "ANTHROPIC" if chosen_provider == "anthropic" else "OPENAI"
    task_model = str(llm[f"{task}_model"]) if task != "main" else ""
    chosen_model = model or task_model or str(llm["model"]) or env.get("MEMSTRATA_MODEL", "")
    if not chosen_model.strip():
        raise _not_configured(task)
    return LLMSettings(
        task=task,
        provider=chosen_provider,
        model=chosen_model.strip(),
        base_url=base_url or str(llm["base_url"]) or env.get(f"{prefix}_BASE_URL", ""),
        api_key=api_key or str(llm["api_key"]) or env.get(f"{prefix}_API_KEY", ""),
        embedding_model=str(llm["embedding_model"]),
        timeout=float(llm["timeout"]) if timeout is None else timeout,
        max_retries=int(llm["max_retries"]) if max_retries is None else max_retries,
    )


def client_from_settings(settings: LLMSettings) -> LLMClient:
    """Build the client that ``settings`` describe."""
    if settings.provider == "anthropic":
        from memstrata.llm.anthropic_client import AnthropicClient

        return AnthropicClient(
            settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
        )
    from memstrata.llm.openai_client import OpenAIClient

    return OpenAIClient(
        settings.model,
        base_url=settings.base_url,
        api_key=settings.api_key,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        embedding_model=settings.embedding_model,
    )


def client_for(
    task: Task = "main",
    config: Config | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
    max_retries: int | None = None,
) -> LLMClient:
    """The client for ``task`` (``"main"``, ``"summary"``, ``"compression"``, ``"curator"``).

    Raises LLMNotConfiguredError, naming the settings to set, when no model is configured.

    Example::

        from memstrata.llm import client_for

        summary = client_for("summary").complete([{"role": "user", "content": "..."}])
    """
    settings = resolve_settings(
        task,
        config,
        environ=environ,
        provider=provider,
        model=model,
        base_url=base_url,
        api_key=api_key,
        timeout=timeout,
        max_retries=max_retries,
    )
    return client_from_settings(settings)
