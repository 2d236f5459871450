"""`memstrata chat` driven in a pseudo-terminal against the fake server."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.testing import FakeLLMServer, Reply

TIMEOUT = 60
SLASH_COMMANDS = ("/new", "/compress", "/memory", "/search", "/sessions", "/resume", "/title")
SETTINGS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "MEMSTRATA_MODEL",
    "memstrata config set llm.model",
)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(stream_chunk_chars=2) as fake:
        yield fake


def spawn_chat(server: FakeLLMServer, home: Path, *args: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
    env.update(
        MEMSTRATA_HOME=str(home),
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="test-key",
        MEMSTRATA_MODEL="fake-model",
        MEMSTRATA_LLM__MAX_RETRIES="0",
        TERM="dumb",
    )
    return pexpect.spawn(
        sys.executable,
        ["-m", "memstrata", "chat", *args],
        env=env,
        cwd=str(home),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 200),
    )


def say(child: pexpect.spawn, line: str) -> str:
    """Send a line and return everything printed until the next prompt."""
    child.sendline(line)
    child.expect_exact("you> ")
    return str(child.before)


def test_chat_streams_runs_tools_and_slash_commands(
    server: FakeLLMServer, memstrata_home: Path
) -> None:
    """A whole chat: streamed replies, a memory write, /memory, /title, /sessions,
    /new, /search, /resume, /compress, a model error shown as text, and /quit."""
    server.script(
        Reply.text("Hello! How can I help?"),
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea."}),
        Reply.text("Noted, you like tea."),
    )
    child = spawn_chat(server, memstrata_home)
    try:
        child.expect(r"memstrata chat - session (\S+), model fake-model")
        first_session = child.match.group(1).rstrip(",")
        child.expect_exact("you> ")

        out = say(child, "hi there")
        assert "assistant> Hello! How can I help?" in out

        out = say(child, "I like tea, remember that")
        assert "[memory]" in out and "Noted, you like tea." in out

        out = say(child, "/memory")
        assert "Likes tea." in out and "USER.md" in out

        out = say(child, "/title Tea talk")
        assert "Title set: Tea talk" in out

        out = say(child, "/sessions")
        # The shortest unique prefix of the id, which /resume takes back.
        assert "Tea talk" in out and f"* {first_session[:8]}" in out

        out = say(child, "/new")
        assert "New session" in out

        out = say(child, "/search tea")
        assert first_session in out

        out = say(child, f"/resume {first_session}")
        assert f"Resumed session {first_session}" in out
        assert "Noted, you like tea." in out

        out = say(child, "/compress")
        assert "compressed" in out.lower()

        server.script(Reply.auth_error())
        out = say(child, "this call fails")
        assert "Error:" in out and "Traceback" not in out

        out = say(child, "/nonsense")
        assert "Unknown command /nonsense" in out

        child.sendline("/quit")
        child.expect(r"saved; continue it with `memstrata chat --resume (\S+)`")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    prompts = [b for b in server.chat_requests if b.get("tools")]
    assert prompts[0]["stream"] is True


def test_chat_help_lists_the_commands(server: FakeLLMServer, memstrata_home: Path) -> None:
    """/help names every slash command; Ctrl-D leaves cleanly."""
    child = spawn_chat(server, memstrata_home, "--title", "Quick")
    try:
        child.expect_exact("you> ")
        out = say(child, "/help")
        for command in SLASH_COMMANDS:
            assert command in out
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_chat_without_a_model_names_the_settings(memstrata_home: Path) -> None:
    """With no model configured, chat exits 1 naming every way to configure one."""
    result = CliRunner().invoke(cli, ["chat"], input="")
    assert result.exit_code == 1
    for name in SETTINGS:
        assert name in result.output
    assert "Traceback" not in result.output
