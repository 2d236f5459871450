"""Documentation that is checked against the code so it cannot drift."""

from __future__ import annotations

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
