"""The package layout: folders by layer, a short top level, and the 0.1 module paths."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import memstrata
from memstrata import _moved

PACKAGE = Path(memstrata.__file__).parent


def test_the_top_level_stays_short() -> None:
    """At most 25 modules and packages sit at the top of the package."""
    top = [p for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    assert len(top) <= 25, sorted(p.name for p in top)


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_every_0_1_module_path_imports_with_a_warning(old: str) -> None:
    """`import memstrata.<old>` gives the module at its new path and says where it went."""
    target, deprecated = _moved.new_path(f"memstrata.{old}") or ("", False)
    assert deprecated
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error')\n"
        f"new = importlib.import_module({target!r})\n"
        "try:\n"
        f"    importlib.import_module('memstrata.{old}')\n"
        "except DeprecationWarning as exc:\n"
        "    print(exc)\n"
        "warnings.simplefilter('ignore')\n"
        f"assert importlib.import_module('memstrata.{old}') is new\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"moved to {target}" in done.stdout


def test_memstrata_postgres_is_a_kept_alias() -> None:
    """`memstrata.postgres` (the documented path) imports without a warning."""
    pytest.importorskip("psycopg")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from memstrata.postgres import PostgresSessionStore

        from memstrata.store.postgres import PostgresSessionStore as Same

    assert PostgresSessionStore is Same
    assert importlib.import_module("memstrata.postgres.store") is importlib.import_module(
        "memstrata.store.postgres.store"
    )


@pytest.mark.parametrize(
    "package",
    sorted(
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
        for p in PACKAGE.rglob("__init__.py")
    ),
)
def test_every_package_face_serves_what_it_lists(package: str) -> None:
    """Each name a package's ``__all__`` lists resolves to an object."""
    module = importlib.import_module(package)
    for name in getattr(module, "__all__", ()):
        if name == "PostgresMemory" or "postgres" in package:
            pytest.importorskip("psycopg")
        assert getattr(module, name) is not None, f"{package}.{name}"


def _module_imports(path: Path) -> set[str]:
    """The memstrata modules a file imports at module level (TYPE_CHECKING blocks too;
    imports inside functions are deferred on purpose and left out)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                body += handler.body
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n.startswith("memstrata.")}


def test_the_import_graph_has_no_cycle() -> None:
    """Layers import downward: no chain of module-level imports comes back to its start."""
    modules = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    graph = {
        name: {m for m in _module_imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    # A package's __init__ re-exporting its modules is not an edge back from them.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
