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
    """Every public module-level name of the package is listed in __all__."""
    public = {
        name
        for name, value in vars(memstrata).items()
        if not name.startswith("_") and type(value).__name__ != "module"
    }
    assert public <= set(memstrata.__all__) | {"annotations", "version", "PackageNotFoundError"}
