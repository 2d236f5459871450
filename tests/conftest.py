"""Shared fixtures: every test gets its own MEMSTRATA_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def memstrata_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point MEMSTRATA_HOME at a fresh folder and clear memstrata/LLM environment."""
    home = tmp_path / "home"
    home.mkdir()
    for var in list(os.environ):
        # A developer's own LLM settings or overrides must never leak into a test.
        if var.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_")) and not var.startswith(
            "MEMSTRATA_TEST_"
        ):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEMSTRATA_HOME", str(home))
    return home
