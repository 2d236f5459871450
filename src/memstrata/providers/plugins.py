"""Finding memory providers: bundled, installed through entry points, or in a folder.

Three sources, and the order in which they win a name clash:

1. **bundled** — :data:`BUNDLED_PROVIDERS`, shipped and tested with this version;
2. **entry points** — group ``memstrata.providers`` in an installed distribution's
   metadata (``pip install memstrata-foo``);
3. **user plugins** — ``$MEMSTRATA_HOME/plugins/<name>/__init__.py``.

Why this order: a name in ``memory.provider`` should keep meaning what it meant when it
was chosen. Bundled providers are part of the release; an entry point arrives only with a
deliberate ``pip install``; a plugin folder is the easiest thing to drop in by accident
(or by a compromised process), so it may add new names but never take over a known one.
The shadowed sources are still listed by ``memstrata plugins list``.

Discovery never crashes on a broken plugin: it is listed with its error, and
:func:`load_provider` raises :class:`~memstrata.errors.ProviderError` with that error.

A plugin's code runs only when it can win. Its names are read from its source first
(:func:`declared_names`: ``name = "..."`` on a provider class, ``name="..."`` passed to
``register_memory_provider``, else the folder name), without importing it; a folder
whose every name is taken by a bundled provider, an entry point or an earlier folder is
skipped unimported and reported. So are all user plugins when the home, the
``plugins`` folder or a plugin's files can be written by other users (or belong to
another user): anyone who could write there could run code as this user.
:func:`plugin_problems` lists both, for ``memstrata doctor`` and ``plugins list``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Literal

from memstrata.config import Config, memstrata_home
from memstrata.errors import ProviderError
from memstrata.providers.base import MemoryProvider, provider_name

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "memstrata.providers"
PLUGINS_DIRNAME: Final = "plugins"

# Providers shipped with memstrata: name -> "module:attribute" (imported only when used).
BUNDLED_PROVIDERS: dict[str, str] = {
    "facts": "memstrata.providers.facts.provider:FactsProvider",
    "mem0": "memstrata.providers.mem0.provider:Mem0Provider",
}

Origin = Literal["bundled", "entry_point", "user"]
ProviderFactory = Callable[..., Any]


@dataclass(frozen=True)
class ProviderInfo:
    """One discovered provider.

    ``factory`` builds it (a :class:`MemoryProvider` subclass or a callable returning a
    provider; it receives ``config=`` if it accepts that keyword). ``error`` is set,
    and ``factory`` is None, when the plugin could not be imported. ``source`` says
    where it came from (module path, entry point or folder); ``shadowed`` lists the
    origins of same-named providers it hides.
    """

    name: str
    origin: Origin
    factory: ProviderFactory | None
    error: str | None = None
    source: str = ""
    shadowed: tuple[str, ...] = field(default=())

    def create(self, config: Config | None = None) -> MemoryProvider:
        """Build the provider; ProviderError if it is broken or its factory fails."""
        if self.factory is None:
            raise ProviderError(
                f"Memory provider {self.name!r} ({self.origin}, {self.source}) failed to "
                f"load: {self.error}. Fix or remove the plugin, or choose another with "
                "`memstrata config set memory.provider NAME`."
            )
        try:
            if _accepts_config(self.factory):
                provider = self.factory(config=config)
            else:
                provider = self.factory()
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"Memory provider {self.name!r} ({self.origin}) could not be created: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not provider_name(provider) or not callable(getattr(provider, "initialize", None)):
            raise ProviderError(
                f"The factory of memory provider {self.name!r} ({self.source}) returned "
                f"{type(provider).__name__}, not a memory provider. It must return an "
                "instance of a memstrata.MemoryProvider subclass."
            )
        return provider  # type: ignore[no-any-return]


def _accepts_config(factory: ProviderFactory) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "config" or p.kind is p.VAR_KEYWORD for p in params)


def _is_provider_class(value: object) -> bool:
    return (
        inspect.isclass(value)
        and issubclass(value, MemoryProvider)
        and not inspect.isabstract(value)
    )


class ProviderRegistry:
    """What a plugin's ``register(registry)`` function receives."""

    def __init__(self) -> None:
        self.factories: dict[str, ProviderFactory] = {}

    def register_memory_provider(
        self, factory: ProviderFactory, *, name: str | None = None
    ) -> None:
        """Offer a provider class (or factory) under ``name`` (default: its ``name``)."""
        key = name or provider_name(factory)
        if not key:
            raise ProviderError(
                f"register_memory_provider({factory!r}) needs a name: pass name=... or "
                "give the class a `name` attribute."
            )
        self.factories[key] = factory

    add = register_memory_provider


# -- the three sources --------------------------------------------------------------------


def _bundled() -> list[ProviderInfo]:
    found: list[ProviderInfo] = []
    for name, target in sorted(BUNDLED_PROVIDERS.items()):
        module_name, _, attribute = target.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except Exception as exc:
            found.append(ProviderInfo(name, "bundled", None, _describe(exc), target))
        else:
            found.append(ProviderInfo(name, "bundled", factory, None, target))
    return found


def _entry_points() -> list[ProviderInfo]:
    found: list[ProviderInfo] = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        source = f"{entry.value} (entry point)"
        try:
            factory = entry.load()
        except Exception as exc:
            found.append(ProviderInfo(entry.name, "entry_point", None, _describe(exc), source))
            continue
        if not callable(factory):
            error = f"{entry.value} is {type(factory).__name__}, not a provider class or factory"
            found.append(ProviderInfo(entry.name, "entry_point", None, error, source))
            continue
        found.append(ProviderInfo(entry.name, "entry_point", factory, None, source))
    return found


def declared_names(folder: Path) -> list[str]:
    """The provider names ``folder/__init__.py`` declares, read without running it.

    ``name = "..."`` in a class body and ``name="..."`` passed to
    ``register_memory_provider``/``add``; the folder name when it declares none.
    A file that does not parse yields the folder name (importing it reports the error).
    """
    try:
        tree = ast.parse((folder / "__init__.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return [folder.name]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                value = _assigned_literal(item, "name")
                if value:
                    names.append(value)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("register_memory_provider", "add"):
                for keyword in node.keywords:
                    given = keyword.value
                    if (
                        keyword.arg == "name"
                        and isinstance(given, ast.Constant)
                        and isinstance(given.value, str)
                        and given.value
                    ):
                        names.append(given.value)
    return list(dict.fromkeys(names)) or [folder.name]


def _assigned_literal(node: ast.stmt, target: str) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        name, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        name, value = node.target, node.value
    else:
        return None
    if isinstance(name, ast.Name) and name.id == target and isinstance(value, ast.Constant):
        return value.value if isinstance(value.value, str) and value.value else None
    return None


def writable_by_others(home: Path) -> list[str]:
    """Why the user plugins of ``home`` must not be loaded: each path on the way to
    their code (the home, ``plugins/``, each plugin folder and file) that another user
    could write, with the fix. Empty when they are safe to load."""
    root = home / PLUGINS_DIRNAME
    paths = [home, root]
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            paths += [folder, *sorted(folder.glob("*.py"))]
    problems: list[str] = []
    me = os.geteuid() if hasattr(os, "geteuid") else None
    for path in paths:
        try:
            info = path.lstat()
        except OSError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            problems.append(
                f"{path} can be written by other users (mode {mode:04o}): chmod go-w {path}"
            )
        elif me is not None and info.st_uid not in (me, 0):
            problems.append(
                f"{path} belongs to uid {info.st_uid}, not this user (uid {me}): chown {me} {path}"
            )
    return problems


def _user_plugins(home: Path, taken: set[str] | None = None) -> list[ProviderInfo]:
    root = home / PLUGINS_DIRNAME
    if not root.is_dir():
        return []
    unsafe = writable_by_others(home)
    if unsafe:
        logger.warning("User plugins in %s not loaded: %s", root, "; ".join(unsafe))
        return [
            ProviderInfo(
                folder.name,
                "user",
                None,
                "not loaded, because " + "; ".join(unsafe),
                str(folder),
            )
            for folder in sorted(p for p in root.iterdir() if p.is_dir())
            if not folder.name.startswith((".", "_")) and (folder / "__init__.py").is_file()
        ]
    taken = set(taken or ())
    found: list[ProviderInfo] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        init = folder / "__init__.py"
        if folder.name.startswith((".", "_")) or not init.is_file():
            continue
        names = declared_names(folder)
        if all(name in taken for name in names):
            # Read, not run: a plugin that cannot win a name never executes.
            error = (
                f"not loaded: its name{'s' if len(names) > 1 else ''} "
                f"{', '.join(repr(n) for n in names)} "
                f"{'are' if len(names) > 1 else 'is'} already taken (bundled, entry point "
                "or an earlier plugin folder); rename it to use it"
            )
            found += [ProviderInfo(name, "user", None, error, str(folder)) for name in names]
            continue
        try:
            module = _load_module(folder)
            factories = _factories_in(module, folder.name)
        except Exception as exc:
            found.append(ProviderInfo(folder.name, "user", None, _describe(exc), str(folder)))
            continue
        if not factories:
            error = (
                "no MemoryProvider subclass and no register(registry) function in "
                f"{init}; define one of them"
            )
            found.append(ProviderInfo(folder.name, "user", None, error, str(folder)))
        for name, factory in factories.items():
            found.append(ProviderInfo(name, "user", factory, None, str(folder)))
            taken.add(name)
    return found


def _load_module(folder: Path) -> ModuleType:
    """Import ``folder/__init__.py`` as a package under a name unique to its path."""
    slug = re.sub(r"\W", "_", folder.name)
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:10]
    module_name = f"memstrata_user_plugin_{slug}_{digest}"
    spec = importlib.util.spec_from_file_location(
        module_name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise ProviderError(f"cannot import {folder / '__init__.py'}")
    module = importlib.util.module_from_spec(spec)
    # Registered before running so the plugin's own relative imports resolve.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _factories_in(module: ModuleType, folder_name: str) -> dict[str, ProviderFactory]:
    """A plugin module's providers: from ``register(registry)``, else its subclasses."""
    register = getattr(module, "register", None) or getattr(
        module, "register_memory_provider", None
    )
    if callable(register):
        registry = ProviderRegistry()
        register(registry)
        return dict(registry.factories)
    classes = [
        value
        for value in vars(module).values()
        if _is_provider_class(value) and value.__module__ == module.__name__
    ]
    if len(classes) == 1:
        return {provider_name(classes[0]) or folder_name: classes[0]}
    return {provider_name(c) or f"{folder_name}.{c.__name__}": c for c in classes}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- public API ---------------------------------------------------------------------------


def discover_providers(home: Path | None = None) -> dict[str, ProviderInfo]:
    """Every provider by name: bundled first, then entry points, then user plugins.

    A name found in several sources goes to the first; the others are recorded in its
    ``shadowed`` field and logged.
    """
    home = home if home is not None else memstrata_home()
    result: dict[str, ProviderInfo] = {}
    known = [*_bundled(), *_entry_points()]
    for info in [*known, *_user_plugins(home, {i.name for i in known})]:
        winner = result.get(info.name)
        if winner is None:
            result[info.name] = info
            continue
        logger.info(
            "Memory provider %r from %s (%s) is shadowed by the %s one.",
            info.name,
            info.origin,
            info.source,
            winner.origin,
        )
        result[info.name] = ProviderInfo(
            winner.name,
            winner.origin,
            winner.factory,
            winner.error,
            winner.source,
            (*winner.shadowed, info.origin),
        )
    return result


def plugin_problems(home: Path | None = None) -> list[str]:
    """User plugins that were not loaded and why (writable by others, names taken)."""
    home = home if home is not None else memstrata_home()
    if not (home / PLUGINS_DIRNAME).is_dir():
        return []
    known = {i.name for i in [*_bundled(), *_entry_points()]}
    return [
        f"{info.source}: {info.error}"
        for info in _user_plugins(home, known)
        if info.error is not None and info.error.startswith("not loaded")
    ]


def load_provider(name: str, config: Config | None = None) -> MemoryProvider:
    """Build the provider called ``name`` (as set in ``memory.provider``).

    Raises ProviderError naming the installed providers when ``name`` is unknown, or
    the plugin's error when it is broken.
    """
    home = config.home if config is not None else None
    found = discover_providers(home)
    info = found.get(name)
    if info is None:
        known = ", ".join(sorted(found)) or "none"
        raise ProviderError(
            f"No memory provider named {name!r} (installed: {known}). See "
            "`memstrata plugins list`; install one with pip or put it in "
            f"$MEMSTRATA_HOME/{PLUGINS_DIRNAME}/<name>/__init__.py."
        )
    return info.create(config)


def provider_status(info: ProviderInfo, config: Config | None = None) -> Mapping[str, Any]:
    """Name, origin, availability, error and unavailability reason of one provider.

    Builds the provider to ask ``is_available()`` (which must not use the network) and,
    when it is unavailable and has ``unavailable_reason()``, why.
    """
    available = False
    error = info.error
    reason: str | None = None
    if error is None:
        try:
            provider = info.create(config)
            available = bool(provider.is_available())
            # Providers that can say why they cannot run (mem0: a missing package or
            # setting) get that said in the listing, so the user knows what to fix.
            explain = getattr(provider, "unavailable_reason", None)
            if not available and callable(explain):
                reason = explain()
        except Exception as exc:
            error = str(exc) if isinstance(exc, ProviderError) else _describe(exc)
    return {
        "name": info.name,
        "origin": info.origin,
        "available": available,
        "source": info.source,
        "shadowed": list(info.shadowed),
        "error": error,
        "reason": reason,
    }
