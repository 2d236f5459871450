"""A deterministic OpenAI-compatible HTTP server on loopback, for tests.

It is a real server (stdlib ``http.server`` in a background thread), so code under test
talks to it through the real ``openai`` SDK, real sockets and real timeouts::

    from memstrata.testing import FakeLLMServer, Reply

    with FakeLLMServer() as server:
        server.script(Reply.text("Hello!"))
        client = OpenAI(base_url=server.base_url, api_key="test")
        ...
        assert server.chat_requests[0]["messages"][-1]["content"] == "Hi"

Endpoints: ``POST /v1/chat/completions`` (JSON or SSE streaming, tool calls,
``stream_options.include_usage``), ``POST /v1/embeddings``, ``GET /v1/models``, and
Anthropic's ``POST /v1/messages`` (JSON or streaming) for code that speaks that API.
Each chat request (either API) is answered by the first of: the next scripted reply,
the first matching rule, the default reply (``"You said: <last user message>"``).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from memstrata.testing.embeddings import EmbeddingMode
from memstrata.testing.fake_http import MODEL_CALL_PATHS, FakeHTTPServer
from memstrata.testing.replies import Reply, Rule, default_reply, make_rule, to_reply
from memstrata.testing.wire import common_prefix_length

# Prefixes kept for the cached-tokens estimate; a real prompt cache also holds many.
_PREFIX_HISTORY = 64


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it (header names lower-cased, body parsed JSON)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes = field(repr=False)


class FakeLLMServer:
    """An OpenAI-compatible (and Anthropic-compatible) model server on 127.0.0.1.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`). All settings can
    be changed while it runs; every method is thread-safe.

    Args:
        model: the model name reported by ``/v1/models`` and in responses.
        latency: seconds to wait before answering every request.
        embedding_dimensions: default vector length of ``/v1/embeddings``.
        embedding_mode: ``"hash"`` (exact text) or ``"bow"`` (shared words are similar).
        stream_chunk_chars: characters of content per streamed chunk.
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` (or, for
            ``/v1/messages``, ``x-api-key: <api_key>``) get 401.
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        latency: float = 0.0,
        embedding_dimensions: int = 64,
        embedding_mode: EmbeddingMode = "hash",
        stream_chunk_chars: int = 4,
        api_key: str | None = None,
    ) -> None:
        self.model = model
        self.latency = latency
        self.embedding_dimensions = embedding_dimensions
        self.embedding_mode: EmbeddingMode = embedding_mode
        self.stream_chunk_chars = max(1, stream_chunk_chars)
        self.api_key = api_key
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._script: dict[str, deque[Reply]] = {"chat": deque(), "embeddings": deque()}
        self._rules: list[Rule] = []
        self._default: Callable[[dict[str, Any]], Reply | str] = default_reply
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._prefixes: deque[str] = deque(maxlen=_PREFIX_HISTORY)
        self._in_flight = 0
        self._max_in_flight = 0
        self._counter = 0
        self._httpd: FakeHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = FakeHTTPServer(self)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; pending delays end at once and their connections are dropped."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; use it as a context manager.")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- what to answer --------------------------------------------------------------

    def script(
        self, *replies: Reply | str, endpoint: Literal["chat", "embeddings"] = "chat"
    ) -> None:
        """Queue replies; each request of ``endpoint`` takes the next one, first in first out.

        For embeddings only errors, delays, raw bodies and disconnects are meaningful;
        a plain reply there means "answer normally".
        """
        with self._lock:
            self._script[endpoint].extend(to_reply(r) for r in replies)

    def on(
        self,
        match: str | re.Pattern[str] | Callable[[dict[str, Any]], bool],
        reply: Reply | str | Callable[[dict[str, Any]], Reply | str],
        *,
        times: int | None = None,
    ) -> None:
        """Add a rule: when ``match`` accepts a chat request, answer with ``reply``.

        ``match`` is a regular expression searched in the last user message, or a
        callable given the request body. ``reply`` is a :class:`Reply`, a string, or a
        callable given the body. Rules are tried in the order added; ``times`` limits
        how often a rule fires.
        """
        rule = make_rule(match, reply, times)
        with self._lock:
            self._rules.append(rule)

    def set_default(self, reply: Reply | str | Callable[[dict[str, Any]], Reply | str]) -> None:
        """Replace the reply used when no script entry or rule applies."""
        if callable(reply):
            self._default = reply
        else:
            fixed = reply
            self._default = lambda body: fixed

    def pending_script(self, endpoint: Literal["chat", "embeddings"] = "chat") -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._script[endpoint])

    # -- what happened ---------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests (completions or messages) received so far."""
        return [r.body for r in self.requests if r.path in MODEL_CALL_PATHS]

    @property
    def in_flight(self) -> int:
        """Chat requests being answered right now."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat requests that were ever being answered at the same time."""
        with self._lock:
            return self._max_in_flight

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised while answering (by a rule or default callable), oldest first."""
        with self._lock:
            return list(self._errors)

    def reset(self) -> None:
        """Forget recorded requests, counters, queued replies, rules and cached prefixes."""
        with self._lock:
            self._requests.clear()
            self._errors.clear()
            self._prefixes.clear()
            self._max_in_flight = self._in_flight
            for queue in self._script.values():
                queue.clear()
            self._rules.clear()
        self._default = default_reply

    # -- used by the handler ---------------------------------------------------------

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self._errors.append(exc)

    def _record(
        self, method: str, path: str, headers: Mapping[str, str], body: Any, raw: bytes
    ) -> None:
        request = RecordedRequest(method, path, headers, body, raw)
        with self._lock:
            self._requests.append(request)

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _choose(self, endpoint: Literal["chat", "embeddings"], body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script[endpoint]:
                return self._script[endpoint].popleft()
            rules = list(self._rules) if endpoint == "chat" else []
        for rule in rules:
            reply = rule.try_reply(body)
            if reply is not None:
                return reply
        if endpoint == "embeddings":
            return Reply()
        return to_reply(self._default(body))

    def _cached_tokens(self, prompt: str) -> int:
        """Tokens of the longest prefix shared with an earlier request (prefix-cache model)."""
        with self._lock:
            best = max((common_prefix_length(prompt, p) for p in self._prefixes), default=0)
            self._prefixes.append(prompt)
        return best // 4
