"""Stored text reaches a terminal as text: control sequences in a message, a title or a
model's reply are shown, not obeyed (memstrata.cli.terminal), in a real pseudo-terminal;
piped output keeps its bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from helpers import subprocess_env
from memstrata.cli.terminal import shown
from memstrata.store.sqlite.store import SessionStore
from memstrata.testing import FakeLLMServer, Reply
from test_chat_pty import spawn_chat

# What a hostile page or model would write: retitle the window, set the clipboard
# (OSC 52), clear the screen, move the cursor up over what was printed, and an 8-bit CSI.
HOSTILE = "note \x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07 \x1b[2J \x1b[1A\x1b[2K \x9b31m end"


def test_controls_are_pictures_and_styling_passes() -> None:
    assert shown("plain text, 数据库\tand\nlines") == "plain text, 数据库\tand\nlines"
    assert shown("\x1b[1mbold\x1b[0m") == "\x1b[1mbold\x1b[0m"  # click's and rich's own
    assert shown("a\r\nb") == "a\nb"
    assert shown("over\rwrite\x08\x00") == "over\u240dwrite\u2408\u2400"
    out = shown(HOSTILE)
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x1b[1A" not in out
    assert "\x9b" not in out and "\x07" not in out
    assert out.startswith("note \u241b]0;pwned\u2407")


def _hostile_home(home: Path) -> str:
    with SessionStore(home / "state.db") as store:
        store.create_session("hostile1", source="cli")
        store.append_messages("hostile1", [{"role": "user", "content": HOSTILE}])
    return "hostile1"


def _in_terminal(home: Path, *args: str) -> str:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memstrata", *args],
        env={**subprocess_env(home), "TERM": "xterm"},
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return str(child.before)


@pytest.mark.parametrize(
    "args",
    [("sessions", "show", "hostile1"), ("sessions", "search", "note"), ("search", "note")],
)
def test_a_terminal_shows_stored_controls_as_text(memstrata_home: Path, args: tuple[str]) -> None:
    _hostile_home(memstrata_home)
    out = _in_terminal(memstrata_home, *args)
    assert "pwned" in out
    for sequence in ("\x1b]0;", "\x1b]52;", "\x1b[2J", "\x1b[1A", "\x07", "\x9b"):
        assert sequence not in out, (args, sequence)
    assert "\u241b]52;c;ZXZpbA==" in out


def test_piped_output_keeps_the_bytes(memstrata_home: Path) -> None:
    _hostile_home(memstrata_home)
    done = subprocess.run(
        [sys.executable, "-m", "memstrata", "sessions", "show", "hostile1"],
        env=subprocess_env(memstrata_home),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # Not pictured (click itself drops CSI sequences from output that is not a terminal).
    assert "note \x1b]0;pwned\x07 \x1b]52;c;ZXZpbA==\x07" in done.stdout
    assert "\u241b" not in done.stdout


def test_a_models_reply_cannot_drive_the_terminal(memstrata_home: Path) -> None:
    """Chat streams the model's reply through the same filter, prompt and line editing
    unchanged."""
    with FakeLLMServer(stream_chunk_chars=3) as server:
        server.script(Reply.text(f"Here: {HOSTILE}"))
        child = spawn_chat(server, memstrata_home)
        try:
            child.expect_exact("you> ")
            child.sendline("hello")
            child.expect_exact("you> ")
            out = str(child.before)
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close()
    assert "Here: note" in out and "pwned" in out
    assert "\x1b]52;" not in out and "\x1b]0;" not in out and "\x1b[2J" not in out
