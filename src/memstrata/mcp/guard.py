"""The door of the HTTP MCP server: Host and Origin allow-lists and the bearer token.

Every HTTP request passes three checks before it reaches the MCP app:

* ``Host`` must be one of the names the server was bound under (the bound host and
  port, plus ``mcp.allowed_hosts``). A DNS-rebinding page reaches the server under the
  attacker's own name, so its ``Host`` never matches.
* ``Origin``, when a browser sends one, must be the server's own origin (or one listed
  in ``mcp.allowed_origins``). ``Origin: null`` (sandboxed frames, ``file:`` pages) and a
  page on another localhost port are foreign origins and are refused.
* ``Authorization: Bearer <token>`` must carry the server's token
  (:mod:`memstrata.mcp.token`). It is required on every non-loopback bind; on a
  loopback bind it is checked whenever ``mcp.require_token`` is on.

The Host and Origin rules (:func:`door_refusal`) are shared by every HTTP server
memstrata runs: ``memstrata ui`` checks the same two before its own token.

Why our own middleware and not the SDK's: the SDK guards only the three literal loopback
names with a port wildcard, so ``Origin: http://localhost:<any port>`` passes and every
other bind address is unguarded.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HttpGuard",
    "Policy",
    "Refusal",
    "allowed_hosts",
    "door_refusal",
    "header_values",
    "is_loopback",
    "is_wildcard",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# (HTTP status, what was refused, what to do about it)
Refusal = tuple[int, str, str]


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def is_wildcard(host: str) -> bool:
    """True for the any-address binds (``0.0.0.0``, ``::``, empty)."""
    address = _address(host) if host else None
    return not host or (address is not None and address.is_unspecified)


def _host_port(host: str, port: int) -> str:
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"{shown.lower()}:{port}"


def _machine_names() -> set[str]:
    """Names and addresses this machine answers to, for a wildcard bind."""
    names = {"127.0.0.1", "localhost", "::1"}
    with_fqdn = {socket.gethostname(), socket.getfqdn()}
    names |= {n for n in with_fqdn if n}
    for name in with_fqdn:
        try:
            for info in socket.getaddrinfo(name, None):
                names.add(str(info[4][0]))
        except OSError:
            continue
    return names


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` header values accepted for a server bound to ``host``:``port``.

    The bound host and port; ``localhost`` too on 127.0.0.1 and ::1 (it names the same
    address and no outside DNS can move it); on a wildcard bind, the machine's own names
    and addresses. ``extra`` entries are ``name`` (this port) or ``name:port``.
    """
    if is_wildcard(host):
        names = _machine_names()
    else:
        names = {host}
        if host in ("127.0.0.1", "::1"):
            names.add("localhost")
    found = {_host_port(n, port) for n in names}
    for item in extra:
        item = item.strip().lower()
        if not item:
            continue
        has_port = item.rsplit(":", 1)[-1].isdigit() and (
            item.count(":") == 1 or item.startswith("[")
        )
        found.add(item if has_port else _host_port(item, port))
    return frozenset(found)


@dataclass(frozen=True)
class Policy:
    """What the guard accepts: exact ``Host`` values, exact origins, and the token
    (None: no token checked). ``settings`` names the configuration section whose
    ``allowed_hosts``/``allowed_origins`` extend the lists, for the refusals' hints
    (empty: the lists cannot be extended)."""

    hosts: frozenset[str]
    origins: frozenset[str]
    token: str | None
    settings: str = "mcp"

    @classmethod
    def for_bind(
        cls,
        host: str,
        port: int,
        *,
        token: str | None,
        extra_hosts: Iterable[str] = (),
        extra_origins: Iterable[str] = (),
        settings: str = "mcp",
    ) -> Policy:
        """The policy of a server bound to ``host``:``port``: its own origins
        (``http://<allowed host>``) plus ``extra_origins``."""
        hosts = allowed_hosts(host, port, extra_hosts)
        origins = {f"http://{h}" for h in hosts} | {
            o.strip().rstrip("/").lower() for o in extra_origins if o.strip()
        }
        return cls(hosts=hosts, origins=frozenset(origins), token=token, settings=settings)


def header_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of the request header ``name`` (lower-case bytes), in order."""
    return [
        value.decode("latin-1") for key, value in scope.get("headers", ()) if key.lower() == name
    ]


def door_refusal(scope: Scope, policy: Policy) -> Refusal | None:
    """The Host and Origin checks of :class:`Policy`: ``(status, error, hint)`` when the
    request must be refused, else None. The token is each server's own business."""
    extend = f" or add the name to {policy.settings}.allowed_hosts" if policy.settings else ""
    hosts = header_values(scope, b"host")
    if len(hosts) != 1 or hosts[0].strip().lower() not in policy.hosts:
        shown = hosts[0] if hosts else "(none)"
        return (
            403,
            f"Host {shown!r} is not served here",
            f"Connect with the address the server printed{extend}.",
        )
    origins = header_values(scope, b"origin")
    if origins:
        origin = origins[0].strip().rstrip("/").lower()
        if len(origins) != 1 or origin not in policy.origins:
            trust = (
                f"; add a trusted web origin to {policy.settings}.allowed_origins"
                if policy.settings
                else ""
            )
            return (
                403,
                f"Origin {origins[0]!r} may not call this server",
                f"Only the server's own origin is accepted{trust}.",
            )
    return None


class HttpGuard:
    """ASGI middleware refusing requests that fail :class:`Policy` before ``app`` sees
    them (403 for Host/Origin, 401 for the token; the body says what to fix)."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    def refusal(self, scope: Scope) -> Refusal | None:
        """``(status, error, hint)`` when the request must be refused, else None."""
        refused = door_refusal(scope, self.policy)
        if refused is not None:
            return refused
        if self.policy.token is not None:
            expected = f"Bearer {self.policy.token}".encode()
            given = header_values(scope, b"authorization")
            sent = given[0].strip().encode("latin-1", "replace") if len(given) == 1 else b""
            if not hmac.compare_digest(sent, expected):
                return (
                    401,
                    "A valid bearer token is required",
                    "Send 'Authorization: Bearer <token>'; `memstrata mcp token` prints it.",
                )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, error, hint = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": error, "fix": hint}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="memstrata"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
