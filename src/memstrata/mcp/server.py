"""The MCP server behind ``memstrata mcp``: memory tools over stdio or streamable HTTP.

Built on the official ``mcp`` SDK (``pip install 'memstrata[mcp]'``) with its low-level
``Server``, so the tools keep the library's exact JSON Schemas and handlers
(:mod:`memstrata.mcp.service`). What the server adds is the protocol edge:

* tool calls run in worker threads (the store and the memory files block), and their
  results are always text the model can act on, flagged ``isError`` when they failed;
* resources: the memory snapshot, recent sessions and any session by id;
* sampling: when the client declares it, ``session_search`` summaries are written by the
  client's own model, pushed mid-call on handshake-era connections and asked through an
  input-required round trip on 2026-07-28 connections (:mod:`memstrata.mcp.sampling`);
* transports: stdio for a client that starts the server itself, streamable HTTP for
  one server (or several processes on one home or one DSN) shared by many clients.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, Literal

from memstrata import __version__
from memstrata.errors import ConfigError, LLMError, LLMTimeoutError, MemstrataError
from memstrata.llm.types import LLMClient
from memstrata.mcp.guard import HttpGuard, Policy, is_loopback
from memstrata.mcp.sampling import (
    Ask,
    FallbackFactory,
    PushSamplingClient,
    SamplingRequest,
    SamplingRound,
    configured_summary_client,
)
from memstrata.mcp.service import MemoryService
from memstrata.mcp.token import configured_token, load_or_create_token
from memstrata.tools.session_search import NAME as SESSION_SEARCH_NAME

if TYPE_CHECKING:
    from mcp.server import Server, ServerRequestContext

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
TRANSPORTS: Final[tuple[Transport, ...]] = ("stdio", "http")
SERVER_NAME: Final = "memstrata"
HTTP_PATH: Final = "/mcp"
INSTALL_HINT: Final = "pip install 'memstrata[mcp]'"
INSTRUCTIONS: Final = (
    "Long-term memory for this user. Use the memory tool to save durable facts "
    "(preferences, corrections, environment facts) and session_search to recall past "
    "conversations before saying something was never discussed. The memory snapshot "
    "resource shows what is saved."
)
SamplingMode = Literal["push", "input_required"]


def require_mcp() -> None:
    """Raise :class:`~memstrata.errors.ConfigError` with the install line when the MCP
    SDK is missing."""
    try:
        import mcp.server  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"The MCP server needs the MCP SDK, which is not installed: {INSTALL_HINT}"
        ) from exc


# ----------------------------------------------------------------------------- sampling


def sampling_mode(ctx: ServerRequestContext[Any, Any]) -> SamplingMode | None:
    """How this request can reach the client's model, or None when it cannot."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return "input_required"
    # A JSON-response HTTP request has no stream to carry a request back to the client.
    return "push" if ctx.session.can_send_request else None


def _create_message_request(request: SamplingRequest) -> Any:
    import mcp_types as types

    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(role=role, content=types.TextContent(type="text", text=text))
                for role, text in request.messages
            ],
            system_prompt=request.system or None,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            # Summaries need only the transcript sent; no other server's context.
            include_context="none",
        )
    )


def _result_text(result: Any) -> str:
    content = getattr(result, "content", None)
    parts = content if isinstance(content, list) else [content]
    return "".join(str(getattr(p, "text", "")) for p in parts if getattr(p, "type", "") == "text")


def _push_ask(ctx: ServerRequestContext[Any, Any], loop: asyncio.AbstractEventLoop) -> Ask:
    """A blocking ``ask`` for worker threads: send ``sampling/createMessage`` on the
    event loop, tied to the current request, and wait for the client's answer."""
    import mcp_types as types
    from mcp.shared.message import ServerMessageMetadata

    async def create(request: SamplingRequest, timeout: float | None) -> Any:
        return await ctx.session.send_request(
            _create_message_request(request),
            types.CreateMessageResult,
            request_read_timeout_seconds=timeout,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )

    def ask(request: SamplingRequest, timeout: float | None) -> tuple[str, str]:
        future = asyncio.run_coroutine_threadsafe(create(request, timeout), loop)
        try:
            result = future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise LLMTimeoutError(
                f"The MCP client's model did not answer within {timeout:g} s."
            ) from None
        except Exception as exc:  # MCPError, a closed connection, a malformed result
            raise LLMError(
                f"The MCP client did not sample the summary ({type(exc).__name__}: {exc})."
            ) from exc
        return _result_text(result), str(getattr(result, "model", "") or "")

    return ask


def _summaries_wanted(arguments: Mapping[str, Any] | None) -> bool:
    # Only a search with a query summarises; summarize=false asks for verbatim text.
    args = arguments or {}
    query = args.get("query")
    if not isinstance(query, str) or not query.strip() or args.get("session_id"):
        return False
    return args.get("summarize") not in (False, "false", "False")


# ----------------------------------------------------------------------------- server


def build_server(service: MemoryService) -> Server[Any]:
    """The low-level MCP ``Server`` serving ``service``'s tools and resources."""
    require_mcp()
    import anyio.to_thread
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    fallback: FallbackFactory = functools.partial(configured_summary_client, service.config)

    async def run_tool(
        name: str, arguments: Mapping[str, Any] | None, llm: LLMClient | None = None
    ) -> tuple[str, bool]:
        call = functools.partial(service.call_tool, name, arguments, llm=llm)
        return await anyio.to_thread.run_sync(call)

    def tool_result(text: str, is_error: bool) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=is_error
        )

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in service.tools()
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, arguments = params.name, params.arguments
        mode = sampling_mode(ctx) if name == SESSION_SEARCH_NAME else None
        if mode is None or not _summaries_wanted(arguments):
            return tool_result(*await run_tool(name, arguments))
        if mode == "push":
            ask = _push_ask(ctx, asyncio.get_running_loop())
            client = PushSamplingClient(ask, fallback=fallback)
            try:
                return tool_result(*await run_tool(name, arguments, client))
            finally:
                client.close()
        responses = params.input_responses
        if responses is None:
            # First round: search, and ask the client for every summary not cached.
            asking = SamplingRound(None)
            text, is_error = await run_tool(name, arguments, asking)
            if not asking.asked:
                return tool_result(text, is_error)
            return types.InputRequiredResult(
                input_requests={
                    key: _create_message_request(request) for key, request in asking.asked.items()
                }
            )
        answers = {
            key: _result_text(value)
            for key, value in responses.items()
            if isinstance(value, types.CreateMessageResult)
        }
        models = [v.model for v in responses.values() if isinstance(v, types.CreateMessageResult)]
        answering = SamplingRound(answers, fallback=fallback)
        if models and models[0]:
            answering.model = models[0]  # recorded with each cached summary
        try:
            return tool_result(*await run_tool(name, arguments, answering))
        finally:
            answering.close()

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=r.uri, name=r.name, description=r.description, mime_type=r.mime_type
                )
                for r in service.resources()
            ]
        )

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=r.uri,
                    name=r.name,
                    description=r.description,
                    mime_type=r.mime_type,
                )
                for r in service.resource_templates()
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            found = await anyio.to_thread.run_sync(service.read_resource, uri)
        except MemstrataError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except Exception as exc:  # the edge: a bug becomes an error message, not a crash
            logger.exception("reading resource %r failed", uri)
            raise MCPError(
                types.INTERNAL_ERROR, f"Reading {uri} failed ({type(exc).__name__}: {exc})."
            ) from None
        if found is None:
            known = ", ".join(
                [r.uri for r in service.resources()] + [r.uri for r in service.resource_templates()]
            )
            raise MCPError(types.INVALID_PARAMS, f"No resource {uri!r} here. Resources: {known}.")
        text, mime_type = found
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)]
        )

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )


# ----------------------------------------------------------------------------- transports


async def serve_stdio(service: MemoryService) -> None:
    """Serve one client on stdin/stdout until it closes the pipe."""
    from mcp.server.stdio import stdio_server

    server = build_server(service)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the HTTP listening socket (``port`` 0 picks a free one).

    Raises :class:`~memstrata.errors.ConfigError` naming the fix when the address is
    taken or cannot be used.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"Cannot listen on host {host!r}: {exc}. Pass --host 127.0.0.1 (or set mcp.host)."
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Pick another port with "
            "--port (or `memstrata config set mcp.port <port>`), or stop the process using it."
        ) from None
    sock.setblocking(False)
    return sock


def http_url(sock: socket.socket, host: str) -> str:
    """The URL clients connect to for a bound socket."""
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{HTTP_PATH}"


async def serve_http(
    service: MemoryService, sock: socket.socket, host: str, policy: Policy | None = None
) -> None:
    """Serve streamable HTTP on a bound socket until SIGINT/SIGTERM.

    Every request passes ``policy`` (Host, Origin, token; :mod:`memstrata.mcp.guard`)
    first; without one, the policy of ``host`` and the socket's port without a token.
    """
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    if policy is None:
        policy = Policy.for_bind(host, sock.getsockname()[1], token=None)
    server = build_server(service)
    # The SDK's own check uses the same exact lists: a second lock on the same door.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(policy.hosts),
        allowed_origins=sorted(policy.origins),
    )
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host, transport_security=security
    )
    guarded = HttpGuard(app, policy)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on", access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


def _config_list(service: MemoryService, key: str) -> list[str]:
    return [item for item in str(service.config.get(key) or "").split(",") if item.strip()]


def http_policy(service: MemoryService, host: str, port: int) -> Policy:
    """The door policy of an HTTP server bound to ``host``:``port``.

    A non-loopback bind needs a token that already exists (``memstrata mcp token`` makes
    it, so whoever starts the server also has it for the clients); a loopback bind
    checks one, generated on first use, when ``mcp.require_token`` is on.

    Raises :class:`~memstrata.errors.ConfigError` saying what to run when a token is
    needed and there is none, or the stored one cannot be trusted.
    """
    token: str | None = None
    if not is_loopback(host):
        token = configured_token(service.config)
        if token is None:
            raise ConfigError(
                f"Refusing to serve on {host}: that address is reachable from other machines "
                "and the server would have no bearer token. Run `memstrata mcp token` to "
                "create one (clients send it as 'Authorization: Bearer <token>'), then start "
                "again; or serve on 127.0.0.1."
            )
    elif bool(service.config.get("mcp.require_token")):
        token = load_or_create_token(service.config)
    return Policy.for_bind(
        host,
        port,
        token=token,
        extra_hosts=_config_list(service, "mcp.allowed_hosts"),
        extra_origins=_config_list(service, "mcp.allowed_origins"),
    )


def run(
    service: MemoryService,
    transport: Transport = "stdio",
    *,
    host: str | None = None,
    port: int | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Run the server in the foreground until the client or a signal ends it.

    ``host``/``port`` default to ``mcp.host``/``mcp.port``. ``announce`` receives one
    line saying where the server listens (stderr by default; never stdout, which is
    the stdio transport's channel).
    """
    require_mcp()
    import anyio

    say = announce if announce is not None else (lambda line: print(line, file=sys.stderr))
    where = f"{service.backend} store" + (
        f" in {service.config.home}" if service.backend == "sqlite" else ""
    )
    if transport not in TRANSPORTS:
        raise ConfigError(f"Unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}.")
    sock: socket.socket | None = None
    policy: Policy | None = None
    if transport == "http":
        bind_host = host if host is not None else str(service.config.get("mcp.host"))
        bind_port = port if port is not None else int(service.config.get("mcp.port"))
        if not is_loopback(bind_host):
            http_policy(service, bind_host, bind_port)  # refuse before taking the port
        sock = bind_socket(bind_host, bind_port)
        try:
            policy = http_policy(service, bind_host, sock.getsockname()[1])
        except BaseException:
            sock.close()
            raise
        needs = ", bearer token required (`memstrata mcp token`)" if policy.token else ""
        say(f"memstrata MCP server on {http_url(sock, bind_host)} ({where}{needs})")
    else:
        say(f"memstrata MCP server on stdio ({where})")
    with stop_on_sigterm():
        try:
            if sock is None:
                anyio.run(serve_stdio, service, backend="asyncio")
            else:
                anyio.run(serve_http, service, sock, bind_host, policy, backend="asyncio")
        except KeyboardInterrupt:
            pass  # Ctrl-C or SIGTERM: a normal stop; the caller closes the service
        finally:
            if sock is not None:
                sock.close()


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while serving.

    A process manager stops servers with SIGTERM, whose default action kills the process
    before the caller can drain provider work and close the store. (The HTTP server
    shuts down gracefully first and then re-raises the signal it caught; this handler
    receives that too.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
