"""Serve the inspector: bind loopback, make a token, print (and open) the URL.

The inspector reads and edits everything the agent remembers, so it only ever listens on
a loopback address, and each run makes a new random token that only the printed URL
carries. The Host and Origin rules are the MCP server's
(:mod:`memstrata.mcp.guard`); the socket is bound the same way
(:func:`memstrata.mcp.server.bind_socket`).
"""

from __future__ import annotations

import secrets
import socket
import sys
import webbrowser
from collections.abc import Callable

from memstrata.backends import open_memory, open_store, postgres_dsn
from memstrata.closing import Closing
from memstrata.config import Config
from memstrata.errors import ConfigError
from memstrata.mcp.guard import Policy, is_loopback
from memstrata.ui import require_ui

__all__ = ["run", "ui_url"]


def ui_url(sock: socket.socket, host: str, token: str) -> str:
    """The address a browser opens: the bound host and port, and the token."""
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def run(
    config: Config,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the inspector over ``config``'s home (or DSN and namespace) until Ctrl-C or
    SIGTERM. ``announce`` receives the URL line (stdout by default)."""
    require_ui()
    import anyio
    import uvicorn

    from memstrata.mcp.server import bind_socket, stop_on_sigterm
    from memstrata.ui.app import build_app
    from memstrata.ui.views import Home

    if not is_loopback(host):
        raise ConfigError(
            f"`memstrata ui` serves only this machine: {host!r} is not a loopback address. "
            "Use --host 127.0.0.1 (the default) or ::1; to reach it from elsewhere, forward "
            "the port over SSH (ssh -L 8766:127.0.0.1:8766 host)."
        )
    say = announce if announce is not None else (lambda line: print(line, flush=True))
    backend = "postgresql" if postgres_dsn(config) is not None else "sqlite"
    memory = open_memory(config, actor="ui")
    try:
        store = open_store(config)
    except BaseException:
        _close(memory)
        raise
    sock: socket.socket | None = None
    try:
        sock = bind_socket(host, port)
        bound = sock.getsockname()[1]
        token = secrets.token_urlsafe(32)
        policy = Policy.for_bind(host, bound, token=token, settings="")
        app = build_app(Home(config, memory, store, backend), policy, port=bound)
        url = ui_url(sock, host, token)
        where = f"{backend} store" + (
            f" in {config.home}"
            if backend == "sqlite"
            else f", namespace {config.get('store.namespace')!r}"
        )
        say(f"memstrata ui on {url} ({where}); Ctrl-C stops it")
        if open_browser:
            webbrowser.open(url)
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        )
        with stop_on_sigterm():
            try:
                anyio.run(lambda: server.serve(sockets=[sock]), backend="asyncio")
            except KeyboardInterrupt:
                pass
    finally:
        if sock is not None:
            sock.close()
        store.close()
        _close(memory)
    print("memstrata ui stopped.", file=sys.stderr)


def _close(thing: object) -> None:
    if isinstance(thing, Closing):
        thing.close()
