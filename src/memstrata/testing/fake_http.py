"""The request handler behind :class:`~memstrata.testing.FakeLLMServer`: routing,
authentication, delays, failures, and rendering replies in the right wire format."""

from __future__ import annotations

import base64
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

from memstrata.testing import wire
from memstrata.testing.embeddings import EmbeddingMode, embed_text
from memstrata.testing.replies import Reply


class ServedModel(Protocol):
    """What the handler needs of :class:`~memstrata.testing.FakeLLMServer`: its settings,
    its script and its request log. Declared here so the handler does not import the
    server that imports it."""

    model: str
    latency: float
    embedding_dimensions: int
    embedding_mode: EmbeddingMode
    stream_chunk_chars: int
    api_key: str | None
    _stopping: threading.Event

    def _record(
        self, method: str, path: str, headers: Mapping[str, str], body: Any, raw: bytes
    ) -> None: ...

    def _record_error(self, exc: BaseException) -> None: ...

    def _enter(self) -> None: ...

    def _leave(self) -> None: ...

    def _next_id(self) -> int: ...

    def _choose(self, endpoint: Literal["chat", "embeddings"], body: dict[str, Any]) -> Reply: ...

    def _cached_tokens(self, prompt: str) -> int: ...


CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
EMBEDDINGS_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
MODEL_CALL_PATHS = (CHAT_PATH, MESSAGES_PATH)

Api = Literal["openai", "anthropic"]


class FakeHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows the fake model it serves."""

    daemon_threads = True
    # stop() must not wait for a handler sleeping through a long scripted delay.
    block_on_close = False

    def __init__(self, fake: ServedModel) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.fake = fake


class FakeHandler(BaseHTTPRequestHandler):
    """Answers one request per connection."""

    server: FakeHTTPServer
    # HTTP/1.1 for chunked streams (so a cut stream is a protocol error, as in production),
    # but every response says "Connection: close": no idle keep-alive threads outlive stop().
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: test output is not the place for access logs."""

    # -- plumbing --------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        # Lower-cased names: HTTP header names are case-insensitive, dict keys are not.
        return {name.lower(): value for name, value in self.headers.items()}

    def _read_body(self) -> tuple[bytes, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return raw, json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return raw, None

    def _send(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        if not any(name.lower() == "content-type" for name in headers or {}):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), headers)

    def _send_error(self, api: Api, status: int, message: str, type_: str) -> None:
        reply = Reply.error(status, message, type=type_)
        body = wire.anthropic_error(reply) if api == "anthropic" else wire.openai_error(reply)
        self._send_json(status, body)

    def _drop(self) -> None:
        """Close the socket without a response, as a crashed server or proxy would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _client_gone(self) -> bool:
        """True when the client closed its end (its timeout fired) while we were waiting."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the server stops or the client hangs up first.

        Like a real server, a request whose client gave up stops counting as in flight.
        """
        stopping = self.server.fake._stopping
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if stopping.wait(min(remaining, 0.02)) or self._client_gone():
                return False
        return not stopping.is_set()

    def _authorised(self, api: Api) -> bool:
        key = self.server.fake.api_key
        if key is None:
            return True
        if api == "anthropic" and self.headers.get("x-api-key") == key:
            return True
        if self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._answer_special(Reply.auth_error(), api)
        return False

    def _answer_special(self, reply: Reply, api: Api) -> bool:
        """Send error/raw/disconnect replies; return True when the request is answered."""
        if reply.disconnect:
            self._drop()
            return True
        if reply.status >= 400 or reply.error_body is not None:
            body = wire.anthropic_error(reply) if api == "anthropic" else wire.openai_error(reply)
            self._send_json(reply.status, body, reply.headers)
            return True
        if reply.raw_body is not None:
            self._send(reply.status, reply.raw_body, reply.headers)
            return True
        return False

    def _stream(self, events: Iterator[wire.SSEEvent], cut_after: int | None, api: Api) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for sent, (name, data) in enumerate(events):
            if cut_after is not None and sent >= cut_after:
                # No terminating chunk: the client sees an incomplete body, not a clean end.
                self._drop()
                return
            line = b"data: " + json.dumps(data).encode("utf-8") + b"\n\n"
            if name is not None:
                line = f"event: {name}\n".encode() + line
            self._write_chunk(line)
        if api == "openai":
            self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _write_chunk(self, data: bytes) -> None:
        """One HTTP/1.1 chunk; an empty one ends the body."""
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # -- routes ----------------------------------------------------------------------

    def do_GET(self) -> None:
        """``GET /v1/models``."""
        fake = self.server.fake
        fake._record("GET", self.path, self._headers(), None, b"")
        if self.path.rstrip("/") != MODELS_PATH:
            self._send_error("openai", 404, f"Unknown path {self.path}", "invalid_request_error")
            return
        if not self._authorised("openai"):
            return
        model = {"id": fake.model, "object": "model", "created": 0, "owned_by": "memstrata"}
        self._send_json(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        """Chat completions, Anthropic messages and embeddings."""
        fake = self.server.fake
        raw, body = self._read_body()
        fake._record("POST", self.path, self._headers(), body, raw)
        api: Api = "anthropic" if self.path == MESSAGES_PATH else "openai"
        try:
            if self.path in MODEL_CALL_PATHS:
                fake._enter()
                try:
                    self._model_call(body, api)
                finally:
                    fake._leave()
            elif self.path == EMBEDDINGS_PATH:
                self._embeddings(body)
            else:
                self._send_error(api, 404, f"Unknown path {self.path}", "invalid_request_error")
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout fired); nothing left to answer.
            self.close_connection = True
        except Exception as exc:
            # A rule or default callable raised: answer 500 so the test sees why, and keep it.
            fake._record_error(exc)
            try:
                self._send_error(api, 500, f"FakeLLMServer failed: {exc!r}", "server_error")
            except OSError:
                pass

    def _model_call(self, body: Any, api: Api) -> None:
        fake = self.server.fake
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            message = "Request body must be JSON with a 'messages' list."
            self._send_error(api, 400, message, "invalid_request_error")
            return
        if not self._authorised(api):
            return
        reply = fake._choose("chat", body)
        if not self._pause(fake.latency + reply.delay):
            self._drop()
            return
        if self._answer_special(reply, api):
            return
        prompt = wire.prompt_text(body)
        model = str(body.get("model") or fake.model)
        prefix = "msg_fake_" if api == "anthropic" else "chatcmpl-fake-"
        answer = wire.make_answer(
            f"{prefix}{fake._next_id()}", model, reply, prompt, fake._cached_tokens(prompt)
        )
        chunk = fake.stream_chunk_chars
        if body.get("stream"):
            if api == "anthropic":
                events = wire.anthropic_events(answer, chunk)
            else:
                options = body.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                events = wire.openai_chunks(answer, chunk, usage)
            self._stream(events, reply.cut_stream_after, api)
        elif api == "anthropic":
            self._send_json(200, wire.anthropic_message(answer), reply.headers)
        else:
            self._send_json(200, wire.openai_completion(answer), reply.headers)

    def _embeddings(self, body: Any) -> None:
        fake = self.server.fake
        if not self._authorised("openai"):
            return
        reply = fake._choose("embeddings", body if isinstance(body, dict) else {})
        if not self._pause(fake.latency + reply.delay):
            self._drop()
            return
        if self._answer_special(reply, "openai"):
            return
        raw_input = body.get("input") if isinstance(body, dict) else None
        texts = [raw_input] if isinstance(raw_input, str) else raw_input
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            message = "'input' must be a non-empty string or list of strings."
            self._send_error("openai", 400, message, "invalid_request_error")
            return
        assert isinstance(body, dict)
        dims = body.get("dimensions") or fake.embedding_dimensions
        if not isinstance(dims, int) or dims < 1:
            message = "'dimensions' must be a positive integer."
            self._send_error("openai", 400, message, "invalid_request_error")
            return
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = embed_text(text, dims, fake.embedding_mode)
            encoded: Any = vector
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(wire.approx_tokens(t) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = str(body.get("model") or fake.model)
        self._send_json(200, {"object": "list", "data": data, "model": model, "usage": usage})
