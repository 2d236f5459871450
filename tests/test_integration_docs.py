"""The runnable examples of docs/integrations/ run and print what the pages say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs" / "integrations"
EXPECTED = {
    "hermes.md": ("Frankfurt", "Loki", "王芳"),
    "openai-agents.md": ("BLUEFIN",),
    "langgraph.md": ("my sister lives in Porto",),
}
NEEDS = {"openai-agents.md": "agents", "langgraph.md": "langgraph"}


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_example_runs(page: str, tmp_path: Path) -> None:
    if page in NEEDS:
        pytest.importorskip(NEEDS[page], reason=f"needs the extra of {page}")
    blocks = _python_blocks(DOCS / page)
    assert len(blocks) == 1, f"{page} should hold one runnable example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0], encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTRATA_", "OPENAI_"))}
    env["MEMSTRATA_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for text in EXPECTED[page]:
        assert text in done.stdout, (text, done.stdout)


def test_every_integration_page_is_linked() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in EXPECTED:
        assert f"({page})" in index
    assert "integrations/index.md" in (DOCS.parent / "index.md").read_text(encoding="utf-8")
