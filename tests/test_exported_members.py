"""The public API: ``memstrata.__all__`` is sorted, complete and importable."""

from __future__ import annotations

import memstrata


def test_all_is_sorted() -> None:
    """__all__ is kept in sorted order so additions are easy to review."""
    assert memstrata.__all__ == sorted(memstrata.__all__)


def test_all_members_exist() -> None:
    """Every name in __all__ is importable from the package."""
    for name in memstrata.__all__:
        assert hasattr(memstrata, name), name


def test_public_names_are_exported() -> None:
    """Every lazily exported name is in __all__ and vice versa."""
    assert set(memstrata._EXPORTS) | {"__version__"} == set(memstrata.__all__)


def test_exports_are_lazy() -> None:
    """Importing memstrata loads no layer: the store and the LLM seam load on first use."""
    import subprocess
    import sys

    code = (
        "import sys, memstrata\n"
        "heavy = [m for m in ('memstrata.store.sqlite.store', 'memstrata.llm', "
        "'memstrata.scanner.scan') "
        "if m in sys.modules]\n"
        "print(heavy)\n"
        "memstrata.SessionStore\n"
        "print('memstrata.store.sqlite.store' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"
    assert out[1] == "True"
