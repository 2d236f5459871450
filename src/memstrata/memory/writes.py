"""Write listeners: curated memory tells who listens about every write it stored.

Mirroring a write to an external provider used to be the job of each caller that wrote
(the agent's tool loop, the MCP server), and a caller that forgot (``dispatch_tool``, the
CLI) left the provider behind. The memory itself now announces each stored write, one
:class:`MemoryWrite` per operation, to the callables added with
:meth:`~memstrata.memory.core.CuratedMemoryBase.add_write_listener`; whoever writes, and
through whichever door, every listener hears of it.

Listeners run in the writer's thread after the write is stored and its lock released, so
a slow listener should hand the work on (the :class:`~memstrata.providers.manager.MemoryManager`
queues it on its background worker). A listener that raises is logged and skipped: the
write has happened and must not be reported as failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MemoryWrite", "WriteListener", "WriteListeners"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryWrite:
    """One stored operation on curated memory.

    ``origin`` is who wrote (the author of :meth:`attributed`: ``"tool"``, ``"cli"``,
    ``"curator"``, ...). A batch arrives as one write per operation, numbered by
    ``batch_index`` out of ``batch_size`` (both None for a single operation).
    """

    action: str
    """``"add"``, ``"replace"`` or ``"remove"``."""
    target: str
    """``"memory"`` or ``"user"``."""
    content: str
    old_text: str | None = None
    origin: str = "tool"
    batch_index: int | None = None
    batch_size: int | None = None


WriteListener = Callable[[MemoryWrite], None]


class WriteListeners:
    """The listeners of one memory object (thread-safe; called in the order added)."""

    def __init__(self) -> None:
        self._listeners: list[WriteListener] = []
        self._lock = threading.Lock()

    def add(self, listener: WriteListener) -> Callable[[], None]:
        """Add ``listener``; return the function that removes it (idempotent)."""
        if not callable(listener):
            raise TypeError(f"a write listener must be callable, got {type(listener).__name__}")
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def __len__(self) -> int:
        with self._lock:
            return len(self._listeners)

    def emit(self, writes: list[MemoryWrite]) -> None:
        """Tell every listener about ``writes``, in order; failures are logged."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            for write in writes:
                try:
                    listener(write)
                except Exception:
                    logger.warning("memory write listener %r failed", listener, exc_info=True)
