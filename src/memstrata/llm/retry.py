"""Turning SDK exceptions into memstrata errors, and retrying the ones a retry can fix.

The SDKs' own retries are switched off (``max_retries=0``) so that one policy, bounded
and logged, applies to every provider: exponential backoff with jitter, honouring a
server's ``Retry-After`` up to a ceiling, for rate limits (not exhausted quota), 5xx,
timeouts and connection failures. Auth, quota and bad-request errors are raised at once:
repeating them only burns time and money.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from memstrata.errors import (
    LLMAuthError,
    LLMError,
    LLMNetworkError,
    LLMNotConfiguredError,
    LLMQuotaError,
    LLMResponseError,
    LLMTimeoutError,
)

logger = logging.getLogger("memstrata.llm")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed call is repeated.

    The n-th retry (n from 0) waits a random time between half and all of
    ``min(max_delay, base_delay * 2**n)``; a ``Retry-After`` from the server replaces that
    wait, capped at ``max_delay``.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(
        self, retry: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return max(0.0, min(self.max_delay, retry_after))
        ceiling = min(self.max_delay, self.base_delay * 2.0**retry)
        # "Equal jitter": never less than half the backoff, so retries stay spread out even
        # when many workers fail at the same instant.
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


@dataclass(frozen=True)
class Failure:
    """A classified failure: the error to raise and whether retrying may help."""

    error: LLMError
    retryable: bool
    retry_after: float | None = None


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw:
            try:
                return float(raw) * scale
            except ValueError:
                return None  # an HTTP date: fall back to our own backoff
    return None


def _error_fields(exc: Any) -> tuple[str, str]:
    """The OpenAI-style ``code`` and ``type`` of an error body, lower-cased."""
    body = getattr(exc, "body", None)
    code = getattr(exc, "code", None)
    kind = getattr(exc, "type", None)
    if isinstance(body, dict):
        code = code or body.get("code")
        kind = kind or body.get("type")
        inner = body.get("error")
        if isinstance(inner, dict):  # Anthropic: {"type": "error", "error": {"type": ...}}
            kind = inner.get("type") or kind
    return str(code or "").lower(), str(kind or "").lower()


def _server_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return message
    return str(getattr(exc, "message", "") or exc)


def classify(exc: BaseException, sdk: ModuleType, where: str) -> Failure:
    """Map an exception of the ``openai`` or ``anthropic`` SDK to a :class:`Failure`.

    ``where`` names the endpoint and model for the message, e.g.
    ``"http://127.0.0.1:8080/v1 (model qwen3)"``.
    """
    if isinstance(exc, sdk.APITimeoutError):
        return Failure(
            LLMTimeoutError(
                f"The model at {where} did not answer within the timeout. Raise llm.timeout "
                "(`memstrata config set llm.timeout 120`) or use a faster model."
            ),
            retryable=True,
        )
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {cause}" if cause else ""
        return Failure(
            LLMNetworkError(
                f"Cannot reach the model endpoint {where}{detail}. Check that the server is "
                "running and that llm.base_url (or OPENAI_BASE_URL) is right."
            ),
            retryable=True,
        )
    if isinstance(exc, sdk.APIStatusError):
        return _classify_status(exc, int(exc.status_code), where)
    if isinstance(exc, sdk.APIError):
        # An error object inside a 200 stream, or a body that did not validate.
        code, kind = _error_fields(exc)
        message = _server_message(exc)
        if "insufficient_quota" in (code, kind):
            return Failure(_quota_error(where, message), retryable=False)
        return Failure(
            LLMResponseError(f"The model at {where} sent an error: {message}"), retryable=False
        )
    if isinstance(exc, sdk_base_error(sdk)):
        return Failure(
            LLMNotConfiguredError(f"The client for {where} cannot be used: {exc}"),
            retryable=False,
        )
    return Failure(
        LLMResponseError(f"The model at {where} answered with something unusable: {exc!r}"),
        retryable=False,
    )


def sdk_base_error(sdk: ModuleType) -> type[BaseException]:
    """The root exception class of the ``openai`` or ``anthropic`` SDK."""
    base = getattr(sdk, "OpenAIError", None) or getattr(sdk, "AnthropicError", None)
    if not isinstance(base, type) or not issubclass(base, BaseException):
        raise TypeError(f"{sdk.__name__} is not a supported SDK")
    return base


def _quota_error(where: str, message: str) -> LLMQuotaError:
    return LLMQuotaError(
        f"The quota of the account at {where} is exhausted ({message}). Add credit or "
        "raise the limit with the provider, or configure another model; retrying will "
        "not help."
    )


def _classify_status(exc: Any, status: int, where: str) -> Failure:
    message = _server_message(exc)
    code, kind = _error_fields(exc)
    retry_after = _retry_after(getattr(exc, "response", None))
    if status in (401, 403):
        what = "rejected the API key" if status == 401 else "refused this key access"
        return Failure(
            LLMAuthError(
                f"The model endpoint {where} {what} (HTTP {status}: {message}). Set the "
                "right key with OPENAI_API_KEY or `memstrata config set llm.api_key KEY`."
            ),
            retryable=False,
        )
    if status == 402 or "insufficient_quota" in (code, kind) or "billing" in code + kind:
        return Failure(_quota_error(where, message), retryable=False)
    if status == 429:
        return Failure(
            LLMQuotaError(
                f"The model endpoint {where} is rate limiting requests (HTTP 429: {message}). "
                "Wait a minute, lower concurrency (search.max_concurrency), or raise "
                "llm.max_retries."
            ),
            retryable=True,
            retry_after=retry_after,
        )
    if status == 404:
        return Failure(
            LLMNotConfiguredError(
                f"The model endpoint {where} answered 404 ({message}). Check the model name "
                "(`memstrata config set llm.model MODEL`) and that llm.base_url ends with "
                "the API root, usually `/v1`."
            ),
            retryable=False,
        )
    if status == 408:
        return Failure(
            LLMTimeoutError(f"The model endpoint {where} timed out the request (HTTP 408)."),
            retryable=True,
            retry_after=retry_after,
        )
    if status in (502, 503, 504):
        return Failure(
            LLMNetworkError(
                f"The model endpoint {where} is unavailable (HTTP {status}: {message}). "
                "Try again later or check the server or proxy in front of it."
            ),
            retryable=True,
            retry_after=retry_after,
        )
    if status >= 500 or status == 409:
        return Failure(
            LLMResponseError(
                f"The model endpoint {where} failed (HTTP {status}: {message}). Try again "
                "later; if it persists, check the server's logs."
            ),
            retryable=True,
            retry_after=retry_after,
        )
    return Failure(
        LLMResponseError(
            f"The model endpoint {where} refused the request (HTTP {status}: {message}). "
            "If the conversation is too long for the model, compress it or pick a model "
            "with a larger context window."
        ),
        retryable=False,
    )


def call_with_retries(
    call: Callable[[], T],
    *,
    policy: RetryPolicy,
    sdk: ModuleType,
    where: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``; retry retryable failures per ``policy``; raise a memstrata error.

    The error raised after the last attempt says how many attempts were made.
    """
    retry = 0
    while True:
        try:
            return call()
        except LLMError:
            raise
        except Exception as exc:
            if isinstance(exc, sdk_base_error(sdk)):
                failure = classify(exc, sdk, where)
            elif isinstance(exc, ValueError):
                # The SDK parses the body itself; a non-JSON 200 surfaces as a ValueError.
                failure = Failure(
                    LLMResponseError(
                        f"The model endpoint {where} answered with a body that is not valid "
                        f"JSON ({exc}). Check that llm.base_url points at an OpenAI-compatible "
                        "API, not a web page or proxy login."
                    ),
                    retryable=False,
                )
            else:
                raise
            if not failure.retryable or retry >= policy.max_retries:
                error = failure.error
                if failure.retryable and retry:
                    error = type(error)(f"{error} (gave up after {retry + 1} attempts)")
                raise error from exc
            wait = policy.delay(retry, failure.retry_after)
            logger.warning(
                "LLM call to %s failed (%s); retry %d of %d in %.2fs",
                where,
                type(failure.error).__name__,
                retry + 1,
                policy.max_retries,
                wait,
            )
            sleep(wait)
            retry += 1
