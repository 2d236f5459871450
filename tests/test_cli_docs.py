"""docs/cli.md's command reference is generated from the commands' help and kept current."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gen_cli_docs.py"


def test_cli_reference_is_current() -> None:
    """Regenerating the reference changes nothing (run scripts/gen_cli_docs.py if it does)."""
    spec = importlib.util.spec_from_file_location("gen_cli_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = module.DOC.read_text(encoding="utf-8")
    assert module.render(current) == current, "run: python scripts/gen_cli_docs.py"
    for command in ("forget", "doctor", "sessions optimize", "sessions search"):
        assert f"### `memstrata {command}`" in current
