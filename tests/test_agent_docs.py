"""docs/agent.md and docs/testing.md: the examples of the lean Agent and the doubles run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _python_blocks(page: str, marker: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    return [block for block in blocks if marker in block]


def _run(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSTRATA_HOME": str(cwd / "home")}
    return subprocess.run(
        [sys.executable, *args] if args else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_the_agent_page_examples_run(tmp_path: Path) -> None:
    """The fake-server example and the in-process example both run and print replies."""
    (served,) = _python_blocks("agent.md", "FakeLLMServer()")
    (in_process,) = _python_blocks("agent.md", "TemporaryHome()")
    first = _run(served, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Noted: metric it is.\ntools: ['memory']")
    second = _run(in_process, tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "好的，记住了。\n"


def test_the_testing_page_doubles_example_passes(tmp_path: Path) -> None:
    (block,) = _python_blocks("testing.md", "ScriptedClient([")
    (tmp_path / "test_my_loop.py").write_text(block, encoding="utf-8")
    run = _run("", tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
