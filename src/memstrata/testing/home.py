"""A throwaway memstrata home: curated memory and a session store in a temporary folder.

The pair every test of an agent needs, real (files and a SQLite database, as in
production) and gone when the block ends. Settings go in as ``config.toml`` sections.

Example::

    from memstrata import Agent
    from memstrata.testing import Reply, ScriptedClient, TemporaryHome

    with TemporaryHome(memory={"user_char_limit": 500}) as home:
        client = ScriptedClient([Reply.text("Hello!")])
        with Agent(client, home.store, home.manager()) as agent:
            assert agent.run_turn("Hi").text == "Hello!"
        assert home.store.list_sessions()[0]["message_count"] == 2
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from memstrata.config import Config
from memstrata.memory.files import FileMemory
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore

__all__ = ["TemporaryHome"]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"TemporaryHome settings take bools, numbers and strings, got {value!r}")


class TemporaryHome:
    """A memstrata home in a new temporary folder, removed by :meth:`close`.

    Keyword arguments are ``config.toml`` sections: ``TemporaryHome(memory={"provider":
    ""}, compression={"threshold": 0.5})``. :attr:`memory` (a
    :class:`~memstrata.memory.files.FileMemory`) and :attr:`store` (a
    :class:`~memstrata.store.sqlite.store.SessionStore` on ``state.db``) are opened
    at once; :meth:`manager` builds a manager over the memory with the given providers.
    """

    def __init__(self, **sections: Mapping[str, Any]) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="memstrata-test-"))
        try:
            if sections:
                lines: list[str] = []
                for section, values in sections.items():
                    lines.append(f"[{section}]")
                    lines.extend(f"{key} = {_toml_value(v)}" for key, v in values.items())
                (self.path / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
            self.config = Config.load(self.path)
            self.memory = FileMemory(self.path, config=self.config)
            self.store = SessionStore(config=self.config)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        self._managers: list[MemoryManager] = []
        self.closed = False

    @property
    def home(self) -> Path:
        """The folder (what ``MEMSTRATA_HOME`` would name)."""
        return self.path

    def manager(self, *providers: object, **options: Any) -> MemoryManager:
        """A :class:`MemoryManager` over :attr:`memory` with ``providers`` added (several
        are allowed); ``options`` go to its constructor. Shut down by :meth:`close`."""
        options.setdefault("allow_multiple", len(providers) > 1)
        manager = MemoryManager(memory=self.memory, config=self.config, **options)
        for provider in providers:
            if not manager.add_provider(provider):
                raise ValueError(f"the manager refused provider {provider!r}; see the log")
        self._managers.append(manager)
        return manager

    def close(self) -> None:
        """Shut the managers down, close the store and delete the folder."""
        if self.closed:
            return
        self.closed = True
        try:
            for manager in self._managers:
                manager.shutdown_all()
            self.store.close()
        finally:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
