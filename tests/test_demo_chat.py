"""A first chat with no hosted model: ``memstrata chat --model demo`` in a real terminal,
``memstrata help TOPIC`` from the installed package, and errors that name no repo path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pexpect
import pytest

from memstrata.llm.demo import DemoClient

SCRIPT = Path(sys.executable).parent / "memstrata"
ROOT = Path(__file__).parent.parent
TIMEOUT = 60


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
    env.update(MEMSTRATA_HOME=str(home), TERM="dumb", NO_COLOR="1")
    return env


def say(child: pexpect.spawn, line: str) -> str:
    child.sendline(line)
    child.expect_exact("you> ")
    return str(child.before)


def test_readme_names_the_demo_after_the_install() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.index("pip install") < readme.index("memstrata chat --model demo")


def test_demo_chat_saves_and_recalls_a_memory(memstrata_home: Path) -> None:
    """The README's path: the installed console script, a fresh home, no model, no Python."""
    child = pexpect.spawn(
        str(SCRIPT),
        ["chat", "--model", "demo"],
        env=clean_env(memstrata_home),
        cwd=str(memstrata_home),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 200),
    )
    try:
        child.expect(r"memstrata chat - session (\S+), model demo")
        first = child.match.group(1).rstrip(",")
        child.expect_exact("offline demo model")
        child.expect_exact("you> ")

        out = say(child, "hello")
        assert "[demo]" in out and "remember that" in out

        out = say(child, "remember that I like green tea")
        assert "[memory]" in out and "[demo] Saved to memory: 'I like green tea'" in out

        out = say(child, "/title Kyoto trip")
        assert "Title set: Kyoto trip" in out

        out = say(child, "/new")
        assert "New session" in out

        out = say(child, "what do you remember about me?")
        assert "[memory]" in out and "- I like green tea" in out

        out = say(child, "search green tea")
        assert "[session_search]" in out and first in out

        out = say(child, "记住我喜欢京都的寺庙")
        assert "Saved to memory: '我喜欢京都的寺庙'" in out

        out = say(child, "/resume Kyoto trip")
        assert f"Resumed session {first}" in out

        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    listed = subprocess.run(
        [str(SCRIPT), "memory", "read", "--target", "user", "--json"],
        env=clean_env(memstrata_home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert json.loads(listed.stdout)["entries"] == ["I like green tea", "我喜欢京都的寺庙"]


def test_demo_replies_are_labelled_and_tool_free_without_tools() -> None:
    reply = DemoClient().complete([{"role": "user", "content": "remember that x"}], tools=[])
    assert reply.text.startswith("[demo] ") and not reply.tool_calls


def test_chat_without_a_model_points_at_help_and_the_demo(memstrata_home: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "chat"],
        env=clean_env(memstrata_home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 1
    assert "memstrata help llm" in done.stderr and "memstrata chat --model demo" in done.stderr
    assert not re.search(r"docs/\w+\.md", done.stderr)


def test_no_error_message_names_a_repo_path() -> None:
    """String literals in the package never send a user to docs/*.md (a pip install has
    no such folder); docstrings and comments may."""
    offenders = []
    for path in (ROOT / "src" / "memstrata").rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = line.strip()
            literal = stripped.startswith(('f"', '"')) and not stripped.startswith('"""')
            if literal and re.search(r"docs/[\w-]+\.md", stripped):
                offenders.append(f"{path.name}:{number}: {stripped}")
    assert offenders == []


def test_help_prints_a_page_from_the_installed_package(memstrata_home: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "help", "llm"],
        env=clean_env(memstrata_home),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert done.stdout.startswith("# Language models")
    listing = subprocess.run(
        [str(SCRIPT), "help"], env=clean_env(memstrata_home), capture_output=True, text=True
    )
    assert "postgres" in listing.stdout and "memstrata help TOPIC" in listing.stdout
    unknown = subprocess.run(
        [str(SCRIPT), "help", "nope"], env=clean_env(memstrata_home), capture_output=True
    )
    assert unknown.returncode == 2


def test_the_wheel_ships_the_docs(tmp_path: Path) -> None:
    """`memstrata help TOPIC` works from a pip install: the pages are in the wheel."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(
            f"cannot build a wheel here (no build backend reachable): {built.stderr[-300:]}"
        )
    (wheel,) = tmp_path.glob("memstrata-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {f"memstrata/docs/{name}" for name in pages} <= names
