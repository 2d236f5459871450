"""Documentation that is checked against the code so it cannot drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memstrata.config import DEFAULTS

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize(
    "key", [f"{s}.{k}" for s, table in DEFAULTS.items() for k in table], ids=str
)
def test_every_config_key_is_documented(key: str) -> None:
    """docs/configuration.md names every key of config.DEFAULTS."""
    assert f"`{key}`" in (DOCS / "configuration.md").read_text(encoding="utf-8")


def _python_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_the_architecture_examples_run(tmp_path: Path) -> None:
    """docs/architecture.md: the contract suite example passes, the typed example prints."""
    suite, example = _python_blocks("architecture.md")
    (tmp_path / "test_my_backend.py").write_text(suite, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert " passed" in run.stdout
    shown = subprocess.run(
        [sys.executable, "-c", example],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=tmp_path,
    ).stdout.splitlines()
    assert shown == ["我们下周二迁移数据库。", "s1"]


def _printing_examples(page: str) -> list[tuple[str, str]]:
    """The page's Python blocks that a ```text block of their output follows."""
    text = (DOCS / page).read_text(encoding="utf-8")
    pairs = []
    for chunk in text.split("```python\n")[1:]:
        code, rest = chunk.split("```", 1)
        head, sep, tail = rest.partition("```text\n")
        if sep and head.strip() == "prints":
            pairs.append((code, tail.split("```", 1)[0]))
    return pairs


@pytest.mark.parametrize("page", ["recall.md", "search.md"])
def test_the_search_examples_print_what_the_page_says(page: str, tmp_path: Path) -> None:
    """docs/recall.md and docs/search.md: each example prints the output shown under it."""
    examples = _printing_examples(page)
    assert examples
    for code, shown in examples:
        run = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == shown
