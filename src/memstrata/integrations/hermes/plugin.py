"""The Hermes plugin folder: what ``memstrata hermes install`` writes and how Hermes loads it.

Hermes discovers user memory providers in ``$HERMES_HOME/plugins/<name>/``: an
``__init__.py`` whose ``register(ctx)`` calls ``ctx.register_memory_provider(...)``, and
a ``plugin.yaml`` whose ``description`` its listings show. The folder written here is a
few lines that import the installed memstrata; all behaviour lives in the package, so
upgrading memstrata upgrades the plugin.

When Hermes runs in another Python environment than the one memstrata was installed in
(the usual case with ``pipx install hermes-agent``), ``import memstrata`` fails there.
The plugin then appends the folder memstrata was installed from, and that environment's
``site-packages`` when both run the same Python version, to ``sys.path`` (after Hermes'
own entries, so Hermes' packages keep precedence).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from memstrata.errors import ConfigError
from memstrata.integrations.hermes.provider import (
    PROVIDER_NAME,
    HermesMemstrataProvider,
    default_hermes_home,
)

PLUGIN_DIRNAME: Final = PROVIDER_NAME
# Written into every file of the folder: uninstall removes only a folder that carries it.
MARKER: Final = "Written by `memstrata hermes install`"
DESCRIPTION: Final = (
    "memstrata - natural-language recall over synced turns (CJK, dates, summaries), "
    "facts with remember, MEMORY.md/USER.md mirroring"
)

_INIT_TEMPLATE: Final = '''"""memstrata memory provider for Hermes Agent (a MemoryProvider plugin).

{marker}; remove it with `memstrata hermes uninstall`.
"""

import sys

_FALLBACK_PATHS = {paths}
_PYTHON = {python}

try:
    import memstrata  # noqa: F401
except ImportError:
    # memstrata lives in another environment: use the one that wrote this plugin.
    for _path in _FALLBACK_PATHS[:1] + (
        _FALLBACK_PATHS[1:] if tuple(sys.version_info[:2]) == _PYTHON else []
    ):
        if _path not in sys.path:
            sys.path.append(_path)

from memstrata.integrations.hermes.plugin import register  # noqa: E402,F401
'''

_YAML_TEMPLATE: Final = """# {marker}
name: {name}
description: {description}
kind: memory
"""


@dataclass(frozen=True)
class PluginReport:
    """What install or uninstall did."""

    folder: Path
    changed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for ``--json``."""
        return {"folder": str(self.folder), "changed": self.changed, "message": self.message}


def provider_class() -> type:
    """The provider as a subclass of Hermes' own ``MemoryProvider`` ABC.

    Imported lazily: only Hermes' interpreter has ``agent.memory_provider``. memstrata's
    class comes first in the MRO, so its methods fill every abstract method of the ABC.
    """
    try:
        from agent.memory_provider import MemoryProvider  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(
            "Hermes Agent is not importable here: the memstrata provider runs inside "
            "Hermes (pip install hermes-agent, then `memstrata hermes install`)."
        ) from exc
    return type("MemstrataMemoryProvider", (HermesMemstrataProvider, MemoryProvider), {})


def register(ctx: Any) -> None:
    """Hermes' plugin entry point: hand it one memstrata provider."""
    ctx.register_memory_provider(provider_class()())


def plugin_dir(hermes_home: Path | None = None) -> Path:
    """``<hermes_home>/plugins/memstrata`` (``$HERMES_HOME`` or ``~/.hermes`` by default)."""
    home = hermes_home if hermes_home is not None else default_hermes_home()
    return Path(home).expanduser() / "plugins" / PLUGIN_DIRNAME


def _install_paths() -> list[str]:
    """Where this memstrata was imported from, then this environment's site-packages."""
    import memstrata

    paths = [str(Path(memstrata.__file__).resolve().parent.parent)]
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path and path not in paths:
            paths.append(path)
    return paths


def render_init() -> str:
    """The plugin's ``__init__.py`` for this memstrata installation."""
    return _INIT_TEMPLATE.format(
        marker=MARKER,
        paths=json.dumps(_install_paths(), ensure_ascii=False),
        python=tuple(sys.version_info[:2]),
    )


def _ours(folder: Path) -> bool:
    init = folder / "__init__.py"
    try:
        return MARKER in init.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False


def install(hermes_home: Path | None = None, *, force: bool = False) -> PluginReport:
    """Write (or refresh) the plugin folder; a foreign folder of the same name is kept
    unless ``force``."""
    folder = plugin_dir(hermes_home)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} exists and is not a folder; move it away and retry.")
    if folder.is_dir() and any(folder.iterdir()) and not _ours(folder) and not force:
        raise ConfigError(
            f"{folder} holds another plugin named {PLUGIN_DIRNAME!r}; move it away, or "
            "pass --force to replace it."
        )
    files = {
        "__init__.py": render_init(),
        "plugin.yaml": _YAML_TEMPLATE.format(
            marker=MARKER, name=PROVIDER_NAME, description=json.dumps(DESCRIPTION)
        ),
    }
    changed = not all(
        (folder / n).is_file() and (folder / n).read_text(encoding="utf-8") == text
        for n, text in files.items()
    )
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, folder / name)
    stale = folder / "__pycache__"
    if changed and stale.is_dir():
        shutil.rmtree(stale, ignore_errors=True)
    verb = "Installed" if changed else "Already installed"
    return PluginReport(
        folder,
        changed,
        f"{verb}: {folder}. Select it with `hermes config set memory.provider "
        f"{PROVIDER_NAME}` (or memory.provider in config.yaml), or run `hermes memory setup`.",
    )


def uninstall(hermes_home: Path | None = None) -> PluginReport:
    """Remove the plugin folder written by :func:`install`; memstrata's data stays."""
    folder = plugin_dir(hermes_home)
    if not folder.exists():
        return PluginReport(folder, False, f"Not installed: {folder} does not exist.")
    if not folder.is_dir() or not _ours(folder):
        raise ConfigError(
            f"{folder} was not written by `memstrata hermes install`; remove it by hand "
            "if it is yours to remove."
        )
    shutil.rmtree(folder)
    return PluginReport(
        folder,
        True,
        f"Removed {folder}. memstrata's data (state.db, facts.db) is kept; set "
        "memory.provider in Hermes' config.yaml to another provider or to empty.",
    )
