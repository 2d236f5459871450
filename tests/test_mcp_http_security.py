"""The HTTP MCP server's door: bearer token, Host and Origin allow-lists.

Every case runs the real console script as a server process and sends real HTTP
requests to it, on 127.0.0.1, 127.0.0.2 and 0.0.0.0: DNS rebinding (a foreign ``Host``),
cross-origin pages (``Origin: null``, another localhost port, a foreign site), and
requests without or with a wrong token.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("mcp")

from mcp import Client

from helpers import record, subprocess_env
from memstrata.mcp.guard import Policy, allowed_hosts, is_loopback

BIN = Path(sys.executable).parent
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host if host != "0.0.0.0" else "127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memstrata(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "memstrata"), *args],
        env=subprocess_env(home, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Server:
    """`memstrata mcp --transport http --host HOST` as a process."""

    def __init__(self, home: Path, host: str, **env: str) -> None:
        self.host = host
        self.port = _free_port(host)
        self.connect = "127.0.0.1" if host == "0.0.0.0" else host
        self.proc = subprocess.Popen(
            [
                str(BIN / "memstrata"),
                "mcp",
                "--transport",
                "http",
                "--host",
                host,
                "--port",
                str(self.port),
            ],
            env=subprocess_env(home, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.stderr()}")
            try:
                with socket.create_connection((self.connect, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError("the server did not start within 20 s")

    @property
    def own_host(self) -> str:
        return f"{self.connect}:{self.port}"

    def post(self, headers: dict[str, str], body: object = INIT) -> httpx.Response:
        """POST to /mcp on the real socket, with exactly these extra headers (a
        ``Host`` given here replaces the one httpx would send)."""
        sent = {
            "Host": self.own_host,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            **headers,
        }
        with httpx.Client(timeout=10) as client:
            return client.post(
                f"http://{self.connect}:{self.port}/mcp", content=json.dumps(body), headers=sent
            )

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.stderr()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return err


@pytest.fixture
def serve(memstrata_home: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        err = server.stop()
        assert "Traceback" not in err, err


def start(started: list[Server], home: Path, host: str, **env: str) -> Server:
    server = Server(home, host, **env)
    started.append(server)
    return server


def token_of(home: Path) -> str:
    done = memstrata(home, "mcp", "token")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "0.0.0.0"])
def test_rebinding_and_cross_origin_requests_are_refused_on_every_bind(
    host: str, memstrata_home: Path, serve: list[Server]
) -> None:
    """A foreign Host (DNS rebinding), Origin: null, another localhost port and a foreign
    site are refused on every bind address; the server's own origin is served."""
    auth: dict[str, str] = {}
    if host == "0.0.0.0":
        auth = {"Authorization": f"Bearer {token_of(memstrata_home)}"}
    server = start(serve, memstrata_home, host)
    port = server.port

    ok = server.post(auth)
    assert ok.status_code == 200, ok.text
    same_origin = server.post({**auth, "Origin": f"http://{server.own_host}"})
    assert same_origin.status_code == 200, same_origin.text

    refused = {
        "rebinding Host": {"Host": f"attacker.example:{port}"},
        "rebinding Host and Origin": {
            "Host": f"attacker.example:{port}",
            "Origin": f"http://attacker.example:{port}",
        },
        "Origin null": {"Origin": "null"},
        "another localhost port": {"Origin": f"http://localhost:{port + 1}"},
        "another loopback address": {"Origin": f"http://127.0.0.3:{port}"},
        "foreign site": {"Origin": "https://attacker.example"},
        "Host on another port": {"Host": f"{server.connect}:{port + 1}"},
    }
    for case, headers in refused.items():
        response = server.post({**auth, **headers})
        assert response.status_code == 403, (case, response.status_code, response.text)
        assert "fix" in response.json(), case
    record(
        kind="attack",
        category=f"MCP HTTP: DNS rebinding and cross-origin requests on {host}",
        tried=len(refused),
        stopped=len(refused),
    )


def test_a_non_loopback_bind_needs_the_token_on_every_request(
    memstrata_home: Path, serve: list[Server]
) -> None:
    """On 0.0.0.0: no token, a wrong token, a token in the wrong scheme are 401; the
    token `memstrata mcp token` printed is served."""
    token = token_of(memstrata_home)
    server = start(serve, memstrata_home, "0.0.0.0")
    bad = (
        {},
        {"Authorization": "Bearer " + "x" * len(token)},
        {"Authorization": f"Basic {token}"},
        {"Authorization": f"Bearer {token[:-1]}"},
        {"Authorization": "Bearer"},
    )
    for headers in bad:
        response = server.post(headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "memstrata mcp token" in response.json()["fix"]
    record(
        kind="attack",
        category="MCP HTTP on 0.0.0.0: requests without the right bearer token",
        tried=len(bad),
        stopped=len(bad),
    )
    assert server.post({"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_token_client_reads_and_writes_memory_over_a_non_loopback_bind(
    memstrata_home: Path, serve: list[Server]
) -> None:
    """The MCP SDK client with the bearer header calls the memory tool end to end."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = token_of(memstrata_home)
    server = start(serve, memstrata_home, "0.0.0.0")
    url = f"http://127.0.0.1:{server.port}/mcp"

    async def main() -> str:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await client.call_tool(
                "memory",
                {"action": "add", "target": "memory", "content": "Deploys use ops/deploy.sh"},
            )
            result = await client.read_resource("memstrata://memory/snapshot")
            return str(result.contents[0].text)  # type: ignore[union-attr]

    assert "ops/deploy.sh" in anyio.run(main)
    assert "ops/deploy.sh" in (memstrata_home / "memories" / "MEMORY.md").read_text()


def test_a_non_loopback_bind_without_a_token_refuses_to_start(memstrata_home: Path) -> None:
    """No token yet: the server exits with the command that makes one, before listening."""
    done = memstrata(
        memstrata_home, "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", "0"
    )
    assert done.returncode == 1
    assert "memstrata mcp token" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (memstrata_home / "mcp_token").exists()


def test_a_token_readable_by_others_refuses_to_start(memstrata_home: Path) -> None:
    """A leaked-looking token (mode 0644) is not used; the error says to rotate it."""
    token_of(memstrata_home)
    (memstrata_home / "mcp_token").chmod(0o644)
    done = memstrata(
        memstrata_home, "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", "0"
    )
    assert done.returncode == 1
    assert "can be read by other users" in done.stderr
    assert "--rotate" in done.stderr


def test_a_weak_configured_token_refuses_to_start(memstrata_home: Path) -> None:
    done = memstrata(
        memstrata_home,
        "mcp",
        "--transport",
        "http",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        MEMSTRATA_MCP__TOKEN="hunter2",
    )
    assert done.returncode == 1
    assert "too weak" in done.stderr


def test_mcp_token_is_generated_once_private_and_rotated(tmp_path: Path) -> None:
    """Created 0600 whatever the umask, the same on every call, new with --rotate, and
    never written through a symlink."""
    home = tmp_path / "home"
    script = f"umask 0; exec {BIN / 'memstrata'} mcp token"
    first = subprocess.run(
        ["sh", "-c", script],
        env=subprocess_env(home),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr
    token = first.stdout.strip()
    assert len(token) >= 32
    path = home / "mcp_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token_of(home) == token
    rotated = memstrata(home, "mcp", "token", "--rotate").stdout.strip()
    assert rotated != token and len(rotated) >= 32
    assert token_of(home) == rotated

    path.unlink()
    decoy = tmp_path / "decoy"
    decoy.write_text("keep\n")
    path.symlink_to(decoy)
    done = memstrata(home, "mcp", "token")
    assert done.returncode == 1
    assert "symlink" in done.stderr and str(path) in done.stderr
    assert decoy.read_text() == "keep\n"


def test_loopback_checks_the_token_when_required(memstrata_home: Path, serve: list[Server]) -> None:
    """mcp.require_token turns the token on for a loopback bind (generated on first use)."""
    server = start(serve, memstrata_home, "127.0.0.1", MEMSTRATA_MCP__REQUIRE_TOKEN="true")
    assert server.post({}).status_code == 401
    token = token_of(memstrata_home)
    assert server.post({"Authorization": f"Bearer {token}"}).status_code == 200


def test_configured_extra_hosts_and_origins_are_served(
    memstrata_home: Path, serve: list[Server]
) -> None:
    server = start(
        serve,
        memstrata_home,
        "127.0.0.2",
        MEMSTRATA_MCP__ALLOWED_HOSTS="memory.internal",
        MEMSTRATA_MCP__ALLOWED_ORIGINS="https://app.example.com",
    )
    port = server.port
    assert server.post({"Host": f"memory.internal:{port}"}).status_code == 200
    assert server.post({"Origin": "https://app.example.com"}).status_code == 200
    assert server.post({"Host": f"memory.internal:{port + 1}"}).status_code == 403
    assert server.post({"Origin": "https://app.example.com.attacker.example"}).status_code == 403


def test_allow_lists_are_exact() -> None:
    """The policy in isolation: loopback names, wildcard binds, explicit ports."""
    assert allowed_hosts("127.0.0.1", 8765) == {"127.0.0.1:8765", "localhost:8765"}
    assert allowed_hosts("127.0.0.2", 8765) == {"127.0.0.2:8765"}
    assert allowed_hosts("::1", 80) == {"[::1]:80", "localhost:80"}
    assert "127.0.0.1:9" in allowed_hosts("0.0.0.0", 9)
    assert allowed_hosts("10.0.0.5", 1, ["a.lan", "b.lan:2", "[::2]:3"]) == {
        "10.0.0.5:1",
        "a.lan:1",
        "b.lan:2",
        "[::2]:3",
    }
    policy = Policy.for_bind("127.0.0.1", 8765, token=None)
    assert "http://localhost:8765" in policy.origins
    assert "http://localhost:8766" not in policy.origins
    assert "null" not in policy.origins
    assert is_loopback("127.0.0.2") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
