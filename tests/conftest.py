"""Shared fixtures: every test gets its own MEMSTRATA_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def memstrata_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point MEMSTRATA_HOME at a fresh folder and clear memstrata/LLM environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("MEMSTRATA_HOME", str(home))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MEMSTRATA_MODEL"):
        monkeypatch.delenv(var, raising=False)
    return home
