"""`memstrata mcp` driven by the MCP SDK's own client: stdio and streamable HTTP
subprocesses over a real home, sampling by the client's model, PostgreSQL by DSN."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from helpers import subprocess_env
from memstrata import SessionStore
from memstrata.cli import cli
from memstrata.errors import ConfigError
from memstrata.mcp.server import bind_socket, http_url
from memstrata.memory.tool import MEMORY_TOOL_SCHEMA
from memstrata.search.summarize import SYSTEM_PROMPT
from memstrata.testing import FakeLLMServer, Reply
from memstrata.tools.session_search import SCHEMA as SEARCH_SCHEMA
from memstrata.tools.toolbox import Toolbox

PG_DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
DEPLOY_TEXT = "Deploy with ops/kestrel-deploy.sh after the canary passes."
SAMPLED = "The kestrel service ships via ops/kestrel-deploy.sh."


def seed_store(home: Path) -> None:
    """One past conversation the searches below must find."""
    with SessionStore(home / "state.db") as store:
        store.create_session("past-1", source="cli")
        store.append_messages(
            "past-1",
            [
                {"role": "user", "content": "How do we ship the kestrel service?"},
                {"role": "assistant", "content": DEPLOY_TEXT},
            ],
        )


def stdio(home: Path, *args: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memstrata", "mcp", *args],
        env=subprocess_env(home, **env),
    )


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def payload(result: types.CallToolResult) -> dict[str, Any]:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    value = json.loads(block.text)
    assert isinstance(value, dict)
    return value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpServer:
    """`memstrata mcp --transport http` in a subprocess, stopped with SIGTERM."""

    def __init__(self, home: Path, *args: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memstrata",
                "mcp",
                "--transport",
                "http",
                "--port",
                str(self.port),
                *args,
            ],
            env=subprocess_env(home, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError("the HTTP server did not start within 20 s")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return err


@pytest.fixture
def http_server(memstrata_home: Path) -> Iterator[HttpServer]:
    seed_store(memstrata_home)
    server = HttpServer(memstrata_home)
    try:
        yield server
    finally:
        err = server.stop()
        assert "Traceback" not in err, err
        # SIGTERM is a normal stop: the server shuts down and closes its store (exit 0).
        assert server.proc.returncode == 0, err


async def exercise(client: Client, home: Path | None, marker: str) -> None:
    """List tools, add a memory (checked on disk), search the seeded session, read
    the resources."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == Toolbox.default().names  # memory, session_search, ...
    assert tools["memory"].input_schema == MEMORY_TOOL_SCHEMA["function"]["parameters"]
    assert tools["session_search"].input_schema == SEARCH_SCHEMA["function"]["parameters"]
    assert tools["memory"].description == MEMORY_TOOL_SCHEMA["function"]["description"]

    added = await client.call_tool(
        "memory", {"action": "add", "target": "user", "content": f"Prefers {marker} tea"}
    )
    assert not added.is_error
    assert payload(added)["success"] is True
    if home is not None:
        on_disk = (home / "memories" / "USER.md").read_text(encoding="utf-8")
        assert f"Prefers {marker} tea" in on_disk

    found = payload(
        await client.call_tool("session_search", {"query": "kestrel deploy", "summarize": False})
    )
    assert found["mode"] == "discover"
    assert [r["session_id"] for r in found["results"]] == ["past-1"]
    assert "ops/kestrel-deploy.sh" in found["results"][0]["excerpt"]

    snapshot = await client.read_resource("memstrata://memory/snapshot")
    block = snapshot.contents[0]
    assert isinstance(block, types.TextResourceContents)
    assert f"Prefers {marker} tea" in block.text

    recent = await client.read_resource("memstrata://sessions/recent")
    recent_block = recent.contents[0]
    assert isinstance(recent_block, types.TextResourceContents)
    assert [r["session_id"] for r in json.loads(recent_block.text)["results"]] == ["past-1"]

    session = await client.read_resource("memstrata://sessions/past-1")
    session_block = session.contents[0]
    assert isinstance(session_block, types.TextResourceContents)
    assert DEPLOY_TEXT in session_block.text


def test_stdio_lists_tools_adds_memory_and_searches(memstrata_home: Path) -> None:
    """Over stdio the SDK client sees the library's schemas, a memory add lands in
    USER.md, and session_search finds the conversation stored beforehand (verbatim,
    as neither the client samples nor a summary model is configured)."""
    seed_store(memstrata_home)

    async def main() -> None:
        async with Client(stdio(memstrata_home)) as client:
            await exercise(client, memstrata_home, "oolong")
            found = payload(await client.call_tool("session_search", {"query": "kestrel deploy"}))
            assert "summary" not in found["results"][0]
            assert "no summary model is configured" in found["summaries"]["unavailable"]
            await check_errors(client)

    run(main)


async def check_errors(client: Client) -> None:
    """Bad arguments, unknown tools and unknown resources give error text with the fix,
    never a traceback."""
    bad = await client.call_tool("memory", {"action": "explode", "target": "user"})
    assert bad.is_error
    assert "Unknown action 'explode'. Use: add, replace, remove, read" in payload(bad)["error"]
    wrong_type = await client.call_tool("session_search", {"query": ["not", "text"]})
    assert wrong_type.is_error
    assert "query must be a string, got array" in payload(wrong_type)["error"]
    unknown = await client.call_tool("forget_everything", {})
    assert unknown.is_error
    assert payload(unknown)["error"].startswith(
        "Unknown tool 'forget_everything'. Available tools: memory, session_search"
    )
    missing = await client.call_tool("session_search", {"session_id": "nope"})
    assert missing.is_error
    assert "Traceback" not in json.dumps(payload(missing))
    with pytest.raises(MCPError, match="No resource 'memstrata://nothing'"):
        await client.read_resource("memstrata://nothing")
    with pytest.raises(MCPError, match="nope"):
        await client.read_resource("memstrata://sessions/nope")


def test_stdio_handshake_era_client(memstrata_home: Path) -> None:
    """A client on the initialize handshake (every shipping client today) is served too."""
    seed_store(memstrata_home)

    async def main() -> None:
        async with Client(stdio(memstrata_home), mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            await exercise(client, memstrata_home, "sencha")

    run(main)


def test_http_lists_tools_adds_memory_and_searches(
    http_server: HttpServer, memstrata_home: Path
) -> None:
    """The same over streamable HTTP against a server subprocess on a free port, with
    both protocol eras; sampling works there too (on handshake connections the request
    rides the call's own stream)."""
    seen: list[types.CreateMessageRequestParams] = []
    seen_legacy: list[types.CreateMessageRequestParams] = []

    async def main() -> None:
        async with Client(http_server.url, sampling_callback=sampler(seen, SAMPLED)) as client:
            await exercise(client, memstrata_home, "assam")
            found = payload(await client.call_tool("session_search", {"query": "kestrel deploy"}))
            check_sampled(found, seen, "kestrel deploy")
        async with Client(
            http_server.url, mode="legacy", sampling_callback=sampler(seen_legacy, SAMPLED)
        ) as client:
            await exercise(client, memstrata_home, "darjeeling")
            found = payload(await client.call_tool("session_search", {"query": "kestrel canary"}))
            check_sampled(found, seen_legacy, "kestrel canary")

    run(main)


def write_from_every_server(
    servers: list[HttpServer],
    prefix: str,
    *,
    first: Callable[[], Awaitable[None]] | None = None,
) -> list[str]:
    """Two clients per server add four user entries each, all at once (after ``first``).

    Returns the entries whose write was acknowledged; the servers are stopped and must
    not have printed a traceback.
    """
    acknowledged: list[str] = []

    async def writer(url: str, tag: str) -> None:
        async with Client(url) as client:
            for i in range(4):
                token = f"{prefix}-{tag}-{i}"
                result = await client.call_tool(
                    "memory", {"action": "add", "target": "user", "content": token}
                )
                if payload(result)["success"]:
                    acknowledged.append(token)

    async def main() -> None:
        if first is not None:
            await first()
        async with anyio.create_task_group() as tg:
            for n, server in enumerate(servers):
                for c in range(2):
                    tg.start_soon(writer, server.url, f"{n}{c}")

    try:
        run(main)
    finally:
        errors = [server.stop() for server in servers]
    assert all("Traceback" not in e for e in errors), errors
    return acknowledged


def test_two_http_processes_share_one_home(memstrata_home: Path) -> None:
    """Two server processes on one home, several clients each writing at once: every
    acknowledged memory write is in USER.md."""
    memstrata_home.joinpath("config.toml").write_text(
        "[memory]\nuser_char_limit = 100000\n", encoding="utf-8"
    )
    servers = [HttpServer(memstrata_home), HttpServer(memstrata_home)]
    acknowledged = write_from_every_server(servers, "fact")
    assert len(acknowledged) == 16
    text = (memstrata_home / "memories" / "USER.md").read_text(encoding="utf-8")
    assert [t for t in acknowledged if t not in text] == []


# ----------------------------------------------------------------------------- sampling


def sampler(
    seen: list[types.CreateMessageRequestParams], answer: str
) -> Callable[..., Awaitable[types.CreateMessageResult]]:
    async def callback(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        seen.append(params)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=answer),
            model="client-model-1",
        )

    return callback


def check_sampled(
    found: dict[str, Any], seen: list[types.CreateMessageRequestParams], query: str
) -> None:
    result = found["results"][0]
    assert result["summary"] == SAMPLED
    assert result["summary_origin"] == "model"
    assert "excerpt" not in result
    assert len(seen) == 1
    assert seen[0].system_prompt == SYSTEM_PROMPT
    message = seen[0].messages[0]
    assert isinstance(message.content, types.TextContent)
    assert DEPLOY_TEXT in message.content.text
    assert f"Search topic: {query}" in message.content.text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sampling_client_writes_the_summary(memstrata_home: Path, mode: str) -> None:
    """A client that declares sampling writes session_search's summary with its own
    model: asked mid-call on handshake connections, by an input-required round trip on
    2026-07-28 ones. A repeated search is served from the summary cache."""
    seed_store(memstrata_home)
    seen: list[types.CreateMessageRequestParams] = []

    async def main() -> None:
        async with Client(
            stdio(memstrata_home), mode=mode, sampling_callback=sampler(seen, SAMPLED)
        ) as client:
            found = payload(await client.call_tool("session_search", {"query": "kestrel deploy"}))
            check_sampled(found, seen, "kestrel deploy")
            again = payload(await client.call_tool("session_search", {"query": "kestrel deploy"}))
            assert again["results"][0]["summary_origin"] == "cache"
            assert len(seen) == 1
            verbatim = payload(
                await client.call_tool(
                    "session_search", {"query": "canary passes", "summarize": False}
                )
            )
            assert "canary passes" in verbatim["results"][0]["excerpt"]
            assert len(seen) == 1

    run(main)


def test_refused_sampling_falls_back_to_the_configured_model(
    memstrata_home: Path, server: FakeLLMServer
) -> None:
    """When a handshake-era client refuses to sample mid-call, the configured summary
    model writes the summary. (On 2026-07-28 a refusal ends the call in the client.)"""
    seed_store(memstrata_home)
    server.set_default(Reply.text("Summary by the configured model."))

    async def refuse(context: Any, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="User rejected sampling request")

    env = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test",
        "MEMSTRATA_MODEL": "summary-model",
    }

    async def main() -> None:
        async with Client(
            stdio(memstrata_home, **env), mode="legacy", sampling_callback=refuse
        ) as client:
            found = payload(await client.call_tool("session_search", {"query": "kestrel deploy"}))
            assert found["results"][0]["summary"] == "Summary by the configured model."

    run(main)
    assert len(server.chat_requests) == 1
    assert server.chat_requests[0]["model"] == "summary-model"


# ----------------------------------------------------------------------------- CLI edges


def test_missing_sdk_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the mcp extra the command says exactly what to install."""
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    result = CliRunner().invoke(cli, ["mcp"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "pip install 'memstrata[mcp]'" in str(result.exception)


def test_port_in_use_is_a_clear_error() -> None:
    """A taken port is refused with the fix, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="Pick another port with --port"):
            bind_socket("127.0.0.1", port)


def test_port_zero_picks_a_free_port() -> None:
    """--port 0 binds a free port, and the announced URL names it."""
    sock = bind_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        assert http_url(sock, "127.0.0.1") == f"http://127.0.0.1:{port}/mcp"
    finally:
        sock.close()


def test_stdio_refuses_http_options() -> None:
    """--port without --transport http is a usage error."""
    result = CliRunner().invoke(cli, ["mcp", "--port", "9000"])
    assert result.exit_code == 2
    assert "--transport http only" in result.output


def test_malformed_dsn_is_refused() -> None:
    """A DSN that is not postgresql:// is refused before anything is served."""
    result = CliRunner().invoke(cli, ["mcp", "--dsn", "mysql://x"])
    assert isinstance(result.exception, ConfigError)
    assert "store.dsn must start with postgresql://" in str(result.exception)


# ----------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_two_http_servers_on_one_dsn(memstrata_home: Path) -> None:
    """`--dsn` serves memory and sessions from PostgreSQL, scoped to the namespace, and
    two server processes on that DSN share them: no acknowledged write is lost."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from memstrata.config import Config
    from memstrata.store import postgres

    namespace = f"mcp_{uuid.uuid4().hex[:10]}"
    config = Config.load(memstrata_home)
    store = postgres.PostgresSessionStore(PG_DSN, namespace=namespace, config=config)
    try:
        store.create_session("past-1", source="cli")
        store.append_messages(
            "past-1",
            [
                {"role": "user", "content": "How do we ship the kestrel service?"},
                {"role": "assistant", "content": DEPLOY_TEXT},
            ],
        )
        run_on_dsn(memstrata_home, postgres, config, namespace)
    finally:
        store.delete_namespace()
        store.close()


def run_on_dsn(home: Path, postgres: Any, config: Any, namespace: str) -> None:
    args = ("--dsn", PG_DSN, "--namespace", namespace)
    env = {"MEMSTRATA_MEMORY__USER_CHAR_LIMIT": "100000"}
    servers = [HttpServer(home, *args, **env), HttpServer(home, *args, **env)]

    async def first() -> None:
        async with Client(servers[0].url) as client:
            await exercise(client, None, "pu-erh")

    acknowledged = write_from_every_server(servers, "pg-fact", first=first)
    assert not (home / "memories" / "USER.md").exists()
    memory = postgres.PostgresMemory(PG_DSN, namespace=namespace, config=config)
    try:
        entries = memory.entries("user")
    finally:
        memory.close()
    assert "Prefers pu-erh tea" in entries
    assert len(acknowledged) == 16
    assert [t for t in acknowledged if t not in entries] == []


def test_docs_example_runs_and_prints_what_the_page_says(memstrata_home: Path) -> None:
    """The runnable example of docs/mcp.md prints exactly the output the page shows."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text(encoding="utf-8")
    section = page.split("## A runnable example", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = section.split("```text\n", 1)[1].split("```", 1)[0]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(memstrata_home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected
