"""Context compression: summarise the middle of a conversation that outgrew its window.

When a conversation reaches ``threshold`` (75 % by default) of the model's context
window, :class:`ContextCompressor` keeps its head (the system message, plus the first
``protect_first_n`` messages on the first compaction only) and a token-budgeted tail (up
to ``protect_last_n`` messages, always reaching back to the last user message), and
replaces the turns in between by one structured summary. A later compaction updates the
previous summary instead of summarising a summary.

The work is an ordered list of small functions over a :class:`CompressionJob`, like
structlog's processors; copy :data:`DEFAULT_PROCESSORS` to reorder or replace a step::

    compressor = ContextCompressor(client, context_window=128_000)
    if compressor.should_compress(prompt_tokens):
        result = compressor.compress(messages, provider_context=manager.on_pre_compress(messages))
        messages = result.messages

Failure policy (nothing is silently lost): when the summary model fails, a deterministic
fallback summary built from the turns themselves takes its place and the model is rested
for a cooldown (60 s; timeouts and unreachable endpoints escalate 60 → 300 → 900 s) during
which compression uses the fallback without calling it. An auth or quota error aborts
instead: the messages come back unchanged, because no summary can succeed until the user
fixes the key. See ``docs/compression.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from memstrata.compress.prompt import SUMMARY_END, SUMMARY_PREFIX
from memstrata.compress.steps import (
    DEFAULT_PROCESSORS,
    CompressionJob,
    CompressionSettings,
    Message,
    Processor,
    assemble,
    choose_boundaries,
    estimate_tokens,
    find_previous_summary,
    message_tokens,
    prune_tool_output,
    repair_tool_pairs,
    summarize_middle,
)
from memstrata.config import Config
from memstrata.errors import (
    LLMError,
    LLMNetworkError,
    LLMNotConfiguredError,
    LLMTimeoutError,
)
from memstrata.llm.types import LLMClient

logger = logging.getLogger(__name__)

Status = Literal["compressed", "fallback", "aborted", "nothing_to_do", "ineffective"]

# Cooldowns after a failed summary: timeouts escalate, a missing model rests longest.
TIMEOUT_LADDER = (1, 5, 15)
NOT_CONFIGURED_COOLDOWN = 600.0
# Consecutive compactions that left the conversation above the threshold before
# automatic compaction stops (a forced one still runs).
MAX_INEFFECTIVE = 2


@dataclass(frozen=True)
class CompressionResult:
    """What :meth:`ContextCompressor.compress` did.

    ``messages`` is the new conversation (the input, unchanged, unless ``compressed``).
    ``summary`` is the summary text without its markers; ``dropped_count`` the messages
    it replaced; ``error`` the model failure that led to a fallback or an abort.
    """

    messages: list[Message]
    status: Status
    summary: str = ""
    used_fallback: bool = False
    dropped_count: int = 0
    pruned_count: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    error: LLMError | None = None
    reason: str = ""

    @property
    def compressed(self) -> bool:
        """True when ``messages`` differs from the input (a summary replaced the middle)."""
        return self.status in ("compressed", "fallback")


# -- the compressor ---------------------------------------------------------------------


def _is_timeout_class(error: LLMError) -> bool:
    return isinstance(error, LLMTimeoutError | LLMNetworkError)


class ContextCompressor:
    """Decides when a conversation must shrink, and shrinks it.

    Args:
        client: the summary model (an :class:`~memstrata.llm.LLMClient`). None resolves
            ``client_for("compression", config)`` on first use; when no model is
            configured, the deterministic fallback summary is used.
        config: where settings and the model come from (default: :meth:`Config.load`).
        settings: explicit settings (default: the ``[compression]`` table).
        processors: the pipeline (default :data:`DEFAULT_PROCESSORS`).
        clock: seconds, monotonic; injectable so cooldowns can be tested without sleeping.
        summary_temperature / summary_max_tokens: passed to the model when set.
        **overrides: settings fields, e.g. ``context_window=32_000``.
    """

    def __init__(
        self,
        client: LLMClient | None = None,
        *,
        config: Config | None = None,
        settings: CompressionSettings | None = None,
        processors: Sequence[Processor] = DEFAULT_PROCESSORS,
        clock: Callable[[], float] = time.monotonic,
        summary_temperature: float | None = None,
        summary_max_tokens: int | None = None,
        **overrides: Any,
    ) -> None:
        self._config = config
        if settings is None:
            settings = CompressionSettings.from_config(config, **overrides)
        elif overrides:
            settings = replace(settings, **overrides)
        self.settings = settings
        self.processors: list[Processor] = list(processors)
        self.clock = clock
        self.summary_temperature = summary_temperature
        self.summary_max_tokens = summary_max_tokens
        self._client = client
        self._client_resolved = client is not None
        self.compression_count = 0
        self.cooldown_until = 0.0
        self.last_error: LLMError | None = None
        self._aborting = False
        self._timeout_failures = 0
        self._ineffective = 0
        self._awaiting_usage = False

    # -- when ---------------------------------------------------------------------

    def threshold_tokens(self, context_window: int | None = None) -> int:
        """Prompt tokens at which compression starts for ``context_window``."""
        return self.settings.threshold_tokens(context_window)

    @property
    def cooling_down(self) -> bool:
        """True while a failed summary model is being rested."""
        return self.clock() < self.cooldown_until

    def should_compress(self, prompt_tokens: int, context_window: int | None = None) -> bool:
        """True when ``prompt_tokens`` (the endpoint's count, or :func:`estimate_tokens`)
        reached the threshold and automatic compaction is not blocked.

        The first reading after a compaction also judges it: still above the threshold
        counts as ineffective, and after two ineffective compactions in a row only a
        forced one (``compress(..., force=True)``) runs, so a conversation that cannot
        shrink does not loop. A ``context_window`` given here becomes the compressor's
        window (the model in use may have changed).
        """
        if context_window and context_window != self.settings.context_window:
            # The model (and its window) can change mid-session; the tail and summary
            # budgets of the next compaction follow it.
            self.settings = replace(self.settings, context_window=int(context_window))
        threshold = self.threshold_tokens()
        if self._awaiting_usage:
            self._awaiting_usage = False
            self._ineffective = self._ineffective + 1 if prompt_tokens >= threshold else 0
        if not self.settings.enabled or prompt_tokens < threshold:
            return False
        if self._ineffective >= MAX_INEFFECTIVE:
            logger.warning(
                "Compression is paused: the last %d compactions left the conversation above "
                "the threshold. Start a new session or compress manually.",
                self._ineffective,
            )
            return False
        return True

    # -- how ------------------------------------------------------------------------

    def _resolve_client(self) -> LLMClient | None:
        if not self._client_resolved:
            self._client_resolved = True
            from memstrata.llm.settings import client_for

            try:
                self._client = client_for("compression", self._config)
            except LLMNotConfiguredError as exc:
                self.last_error = exc
                logger.info("No compression model configured; using fallback summaries.")
        return self._client

    def _summarize(self, prompt: str) -> str:
        client = self._client
        if client is None:  # pragma: no cover - the job only gets this with a client
            raise LLMNotConfiguredError("No compression model is configured.")
        completion = client.complete(
            [{"role": "user", "content": prompt}],
            temperature=self.summary_temperature,
            max_tokens=self.summary_max_tokens,
        )
        return completion.text

    def _note_failure(self, error: LLMError, aborted: bool) -> None:
        self.last_error = error
        self._aborting = aborted
        if isinstance(error, LLMNotConfiguredError):
            wait = NOT_CONFIGURED_COOLDOWN
        elif _is_timeout_class(error):
            step = TIMEOUT_LADDER[min(self._timeout_failures, len(TIMEOUT_LADDER) - 1)]
            self._timeout_failures += 1
            wait = self.settings.failure_cooldown * step
        else:
            wait = self.settings.failure_cooldown
        self.cooldown_until = self.clock() + wait
        logger.warning(
            "Compression summary failed (%s); the model rests for %.0f s.",
            type(error).__name__,
            wait,
        )

    def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        focus_topic: str | None = None,
        provider_context: str = "",
        force: bool = False,
    ) -> CompressionResult:
        """Compact ``messages``; the input is never modified.

        ``focus_topic`` steers the summary (default: the recent user asks);
        ``provider_context`` is the text of ``MemoryManager.on_pre_compress``; ``force``
        (a manual compaction) ignores the cooldown and tries the model again.
        """
        # Steps replace values and never edit them in place, so copying each message
        # dict is enough to leave the caller's list and dicts untouched.
        original = [dict(m) for m in messages]
        before = estimate_tokens(original)
        if force:
            self.cooldown_until = 0.0
            self._aborting = False
        cooling = self.cooling_down
        if cooling and self._aborting and self.last_error is not None:
            return CompressionResult(
                original,
                "aborted",
                tokens_before=before,
                tokens_after=before,
                error=self.last_error,
                reason=f"the summary model refused recently: {self.last_error}",
            )
        client = None if cooling else self._resolve_client()
        job = CompressionJob(
            settings=self.settings,
            original=original,
            messages=[dict(m) for m in original],
            summarizer=self._summarize if client is not None else None,
            focus_topic=(focus_topic or "").strip(),
            provider_context=provider_context or "",
        )
        for processor in self.processors:
            job = processor(job)
        if job.error is not None:
            self._note_failure(job.error, job.aborted)
        elif job.summarizer is not None and job.output is not None:
            self._timeout_failures = 0
            self.last_error = None
        return self._result(job, original, before, cooling)

    def _result(
        self, job: CompressionJob, original: list[Message], before: int, cooling: bool
    ) -> CompressionResult:
        if job.aborted:
            return CompressionResult(
                original,
                "aborted",
                tokens_before=before,
                tokens_after=before,
                error=job.error,
                reason=f"the summary model refused: {job.error}",
            )
        if job.output is None:
            self._ineffective += 1
            return CompressionResult(
                original,
                "nothing_to_do",
                tokens_before=before,
                tokens_after=before,
                reason=job.skip_reason or "the pipeline produced no output",
            )
        after = estimate_tokens(job.output)
        if after >= before:
            self._ineffective += 1
            return CompressionResult(
                original,
                "ineffective",
                summary=job.summary,
                used_fallback=job.used_fallback,
                tokens_before=before,
                tokens_after=after,
                error=job.error,
                reason="the summary is not smaller than the turns it would replace",
            )
        self.compression_count += 1
        self._awaiting_usage = True
        reason = ""
        if job.used_fallback:
            reason = "summary model resting after a failure" if cooling else "fallback summary"
        return CompressionResult(
            job.output,
            "fallback" if job.used_fallback else "compressed",
            summary=job.summary,
            used_fallback=job.used_fallback,
            dropped_count=job.tail_start - job.head_end,
            pruned_count=job.pruned_count,
            tokens_before=before,
            tokens_after=after,
            error=job.error,
            reason=reason,
        )


__all__ = [
    "DEFAULT_PROCESSORS",
    "SUMMARY_END",
    "SUMMARY_PREFIX",
    "CompressionJob",
    "CompressionResult",
    "CompressionSettings",
    "ContextCompressor",
    "Processor",
    "assemble",
    "choose_boundaries",
    "estimate_tokens",
    "find_previous_summary",
    "message_tokens",
    "prune_tool_output",
    "repair_tool_pairs",
    "summarize_middle",
]
