"""What a fake endpoint answers: :class:`Reply` values and the rules that choose them.

A :class:`Reply` is plain data (text, tool calls, an HTTP error, a malformed body, a
dropped connection, a delay), so a test script reads like the conversation it fakes::

    server.script(
        Reply.tool_call("memory", {"action": "add", "content": "likes tea"}),
        Reply.text("Noted."),
    )
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class FakeToolCall:
    """One tool call in a fake reply; ``arguments`` is the JSON text the model "wrote"."""

    name: str
    arguments: str = "{}"
    id: str = ""


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


@dataclass(frozen=True)
class Reply:
    """One scripted answer of the fake server.

    Build replies with the class methods (``Reply.text``, ``Reply.tool_call``,
    ``Reply.error``, ...) and adjust them with :meth:`after` (delay) or
    :func:`dataclasses.replace`.
    """

    content: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    # None: "tool_calls" when the reply has tool calls, else "stop".
    finish_reason: str | None = None
    status: int = 200
    # OpenAI-style error object ({"message", "type", "code"}), sent as {"error": ...}.
    error_body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Sent verbatim instead of a generated body (malformed JSON, odd payloads).
    raw_body: bytes | None = None
    # Seconds to wait before answering (on top of the server's latency).
    delay: float = 0.0
    # Close the connection without answering (the client sees a network error).
    disconnect: bool = False
    # Streaming only: close the connection after this many chunks.
    cut_stream_after: int | None = None
    # Override the computed usage numbers (prompt_tokens, completion_tokens, cached_tokens).
    usage: Mapping[str, int] | None = None

    @classmethod
    def text(cls, content: str, *, finish_reason: str | None = None) -> Reply:
        """A plain assistant message."""
        return cls(content=content, finish_reason=finish_reason)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        id: str = "",
        content: str = "",
    ) -> Reply:
        """An assistant message calling one tool (``arguments`` as a dict or JSON text)."""
        call = FakeToolCall(name=name, arguments=_arguments_text(arguments or {}), id=id)
        return cls(content=content, tool_calls=(call,))

    @classmethod
    def tool_calls_of(
        cls, calls: list[tuple[str, Mapping[str, Any] | str]], *, content: str = ""
    ) -> Reply:
        """An assistant message calling several tools in parallel, as (name, arguments)."""
        return cls(
            content=content,
            tool_calls=tuple(FakeToolCall(n, _arguments_text(a)) for n, a in calls),
        )

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "fake error",
        *,
        type: str = "server_error",
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """An HTTP error with an OpenAI-style body ``{"error": {...}}``."""
        body = {"message": message, "type": type, "param": None, "code": code}
        return cls(status=status, error_body=body, headers=dict(headers or {}))

    @classmethod
    def auth_error(cls) -> Reply:
        """401 with OpenAI's invalid-key body."""
        return cls.error(
            401, "Incorrect API key provided.", type="invalid_request_error", code="invalid_api_key"
        )

    @classmethod
    def permission_denied(cls) -> Reply:
        """403: the key is valid but may not use this model."""
        return cls.error(403, "You are not allowed to use this model.", type="permission_error")

    @classmethod
    def quota_exceeded(cls) -> Reply:
        """429 insufficient_quota: billing is exhausted; retrying does not help."""
        return cls.error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            type="insufficient_quota",
            code="insufficient_quota",
        )

    @classmethod
    def rate_limited(cls, retry_after: float | None = None) -> Reply:
        """429 rate_limit_exceeded: retrying after a pause helps."""
        headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
        return cls.error(
            429,
            "Rate limit reached for requests.",
            type="requests",
            code="rate_limit_exceeded",
            headers=headers,
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Reply:
        """A 5xx server failure (retryable)."""
        return cls.error(status, "The server had an error while processing your request.")

    @classmethod
    def malformed(cls) -> Reply:
        """A 200 response whose body is not JSON."""
        return cls(raw_body=b"<html>this is not JSON</html>")

    @classmethod
    def empty(cls) -> Reply:
        """A 200 response with no choices at all."""
        return cls(raw_body=b'{"id": "x", "object": "chat.completion", "choices": []}')

    @classmethod
    def disconnected(cls) -> Reply:
        """Close the connection without answering."""
        return cls(disconnect=True)

    def after(self, seconds: float) -> Reply:
        """This reply, sent after waiting ``seconds``."""
        return replace(self, delay=seconds)


def to_reply(value: Reply | str) -> Reply:
    """Accept a string as shorthand for ``Reply.text``."""
    return Reply.text(value) if isinstance(value, str) else value


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one chat message, whose content may be a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user message of a chat request ("" when there is none)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return message_text(message)
    return ""


def default_reply(body: dict[str, Any]) -> Reply:
    """The deterministic reply used when no script entry or rule applies."""
    return Reply.text(f"You said: {last_user_text(body)}")


@dataclass
class Rule:
    """Answer with ``reply`` when ``match`` accepts the request; ``times`` limits its uses."""

    match: Callable[[dict[str, Any]], bool]
    reply: Callable[[dict[str, Any]], Reply | str]
    times: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def try_reply(self, body: dict[str, Any]) -> Reply | None:
        """The reply for ``body``, or None when the rule does not apply (or is used up)."""
        if not self.match(body):
            return None
        # Concurrent requests may match at once; only ``times`` of them may use the rule.
        with self._lock:
            if self.times is not None:
                if self.times <= 0:
                    return None
                self.times -= 1
        return to_reply(self.reply(body))


def make_rule(
    match: str | re.Pattern[str] | Callable[[dict[str, Any]], bool],
    reply: Reply | str | Callable[[dict[str, Any]], Reply | str],
    times: int | None = None,
) -> Rule:
    """Build a rule: a string or pattern is searched in the last user message."""
    matcher: Callable[[dict[str, Any]], bool]
    if isinstance(match, str | re.Pattern):
        pattern = re.compile(match) if isinstance(match, str) else match

        def matcher(body: dict[str, Any]) -> bool:
            return pattern.search(last_user_text(body)) is not None

    else:
        matcher = match
    if callable(reply):
        responder = reply
    else:
        fixed = reply

        def responder(body: dict[str, Any]) -> Reply | str:
            return fixed

    return Rule(match=matcher, reply=responder, times=times)
