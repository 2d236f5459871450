"""Locate (or create) a virtual environment holding the real Hermes Agent from PyPI.

The Hermes integration test and ``benchmarks/integrations.py`` run Hermes in its own
interpreter, as users do: Hermes pins its own dependencies, which must not be mixed into
the project's environment. The environment is cached per Hermes version under
``$XDG_CACHE_HOME/memstrata-tests`` (``~/.cache`` by default), so it is built once per
machine; ``MEMSTRATA_TEST_HERMES_PYTHON`` points at an existing Hermes interpreter
instead.

Run it directly to build the environment: ``python scripts/hermes_venv.py``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from pathlib import Path

HERMES_VERSION = "0.19.0"
HERMES_REQUIREMENT = f"hermes-agent=={HERMES_VERSION}"
_DONE = ".memstrata-complete"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memstrata-tests" / f"hermes-agent-{HERMES_VERSION}"


def _python_of(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def find_python() -> Path | None:
    """Hermes' interpreter if one is ready: ``MEMSTRATA_TEST_HERMES_PYTHON`` or the cache."""
    explicit = os.environ.get("MEMSTRATA_TEST_HERMES_PYTHON", "").strip()
    if explicit:
        return Path(explicit)
    folder = cache_dir()
    return _python_of(folder) if (folder / _DONE).exists() else None


def ensure_python() -> Path:
    """Hermes' interpreter, building the cached environment first if needed (minutes;
    about 250 MB). Concurrent callers wait for one build."""
    found = find_python()
    if found is not None:
        return found
    folder = cache_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / _DONE).exists():
            return _python_of(folder)
        venv.EnvBuilder(with_pip=True, clear=True).create(folder)
        python = _python_of(folder)
        subprocess.run(  # noqa: S603 - our own venv's pip, fixed arguments
            [str(python), "-m", "pip", "install", "--quiet", HERMES_REQUIREMENT],
            check=True,
            timeout=1800,
        )
        (folder / _DONE).write_text(HERMES_REQUIREMENT + "\n", encoding="utf-8")
    return python


if __name__ == "__main__":
    print(ensure_python())
    sys.exit(0)
