"""How the package's names are found: lazy package faces and the 0.1 module paths.

**Lazy faces.** ``import memstrata`` and ``import memstrata.store`` stay cheap: a script
that needs one layer pays only for that layer. A package face calls
:func:`lazy_exports` with the public names it offers and the module defining each, and
binds the two functions it returns as its module-level ``__getattr__`` and ``__dir__``.

**Moved paths.** 0.1 kept ~80 modules side by side (``memstrata.fulltext``,
``memstrata.memory_tool``); they now live in packages named for their layer. Importing an
old path gives the new module and a :class:`DeprecationWarning` naming it, so code
written against 0.1 keeps running while it moves (``memstrata._lazy``, folded in here,
is served the same way). ``memstrata.postgres`` is no deprecated path: it is the documented
home of :class:`~memstrata.store.postgres.PostgresSessionStore`, kept as an alias of
``memstrata.store.postgres``. The finder is installed when ``memstrata`` is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
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


# Old dotted path (under memstrata.) -> new one. A package entry covers its submodules.
MOVED: dict[str, str] = {
    "_lazy": "_moved",
    "agent_turn": "agent.turn",
    "approval": "memory.approval",
    "background": "providers.background",
    "cjk": "query.cjk",
    "compress_prompt": "compress.prompt",
    "compress_steps": "compress.steps",
    "curator": "memory.curator",
    "curator_plan": "memory.curator_plan",
    "database": "store.sqlite.database",
    "doctor": "ops.doctor",
    "embed_minilm": "search.minilm",
    "embed_openai": "search.openai_embedder",
    "embedders": "search.embedders",
    "expansion": "search.expansion",
    "exporting": "ops.export",
    "facts": "providers.facts.store",
    "facts_args": "providers.facts.args",
    "facts_classify": "providers.facts.classify",
    "facts_provider": "providers.facts.provider",
    "facts_recall": "providers.facts.recall",
    "facts_schema": "providers.facts.schema",
    "facts_vectors": "providers.facts.vectors",
    "fencing": "prompt.fencing",
    "forget": "ops.forget",
    "fulltext": "store.sqlite.fulltext",
    "fulltext_bm25": "store.sqlite.bm25",
    "fulltext_boosts": "store.boosts",
    "fulltext_dates": "query.dates",
    "fulltext_filters": "query.filters",
    "fulltext_hits": "store.hits",
    "fulltext_substring": "store.sqlite.substring",
    "importing": "ops.importing",
    "manager": "providers.manager",
    "mcp_sampling": "mcp.sampling",
    "mcp_server": "mcp.server",
    "mcp_service": "mcp.service",
    "mem0_provider": "providers.mem0.provider",
    "mem0_setup": "providers.mem0.setup",
    "memory_args": "memory.args",
    "memory_core": "memory.core",
    "memory_format": "memory.format",
    "memory_history": "memory.history",
    "memory_tool": "memory.tool",
    "migrate": "ops.migrate",
    "migrations": "store.sqlite.migrations",
    "plugins": "providers.plugins",
    "remember_tool": "tools.remember",
    "salvage": "store.sqlite.salvage",
    "scanner_patterns": "scanner.patterns",
    "scanner_patterns_context": "scanner.patterns_context",
    "scanner_patterns_strict": "scanner.patterns_strict",
    "scanner_regex": "scanner.regex",
    "scanner_unicode": "scanner.unicode",
    "search_read": "search.read",
    "search_tool": "tools.session_search",
    "session_split": "compress.split",
    "store_codec": "store.codec",
    "store_index": "store.sqlite.index",
    "store_lineage": "store.lineage",
    "store_messages": "store.sqlite.messages",
    "store_sessions": "store.sqlite.sessions",
    "summarize": "search.summarize",
    "titles": "store.titles",
    "truncate": "search.truncate",
    "postgres.memory": "memory.postgres",
    "tools.memory": "memory.tool",
    "postgres.memory_history": "memory.postgres_history",
}
# Kept for good: no warning.
ALIASES: dict[str, str] = {"postgres": "store.postgres"}


def new_path(fullname: str) -> tuple[str, bool] | None:
    """``(new module name, deprecated)`` for an old ``memstrata.*`` path, else None."""
    if not fullname.startswith("memstrata."):
        return None
    rest = fullname[len("memstrata.") :]
    for table, deprecated in ((MOVED, True), (ALIASES, False)):
        if rest in table:
            return f"memstrata.{table[rest]}", deprecated
    head, _, tail = rest.partition(".")
    for table, deprecated in ((MOVED, True), (ALIASES, False)):
        if tail and head in table:
            return f"memstrata.{table[head]}.{tail}", deprecated
    return None


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an old path by putting the new module in ``sys.modules`` under it."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if new_path(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module swaps in the real module

    def exec_module(self, module: ModuleType) -> None:
        found = new_path(module.__name__)
        assert found is not None  # find_spec only hands over old paths
        target, deprecated = found
        if deprecated:
            warnings.warn(
                f"{module.__name__} moved to {target}; import it from there "
                "(the old path will be removed in a future release).",
                DeprecationWarning,
                stacklevel=2,
            )
        # The import system returns whatever sits in sys.modules after exec_module, so
        # the old name and the new one are the same module object.
        sys.modules[module.__name__] = importlib.import_module(target)


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once.

    First, because ``memstrata.postgres`` shares its ``__path__`` with
    ``memstrata.store.postgres``: the path finder would load ``memstrata.postgres.store``
    a second time, as another module with other classes.
    """
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
