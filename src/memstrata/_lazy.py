"""Names a package hands on from its modules, imported on first use.

``import memstrata`` and ``import memstrata.store`` stay cheap: a script that needs one
layer pays only for that layer. A package face calls :func:`lazy_exports` with the public
names it offers and the module defining each, and binds the two functions it returns as
its module-level ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, serving ``exports`` (name -> module)."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return getattr_, dir_
