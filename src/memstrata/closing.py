"""One ``with`` protocol for every object that holds connections or files until closed."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

__all__ = ["Closing"]


class Closing(abc.ABC):
    """Use the object as a context manager: ``with X(...) as x:`` calls ``x.close()`` at exit.

    Example::

        with SessionStore() as store:
            store.list_sessions()
    """

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the object holds (idempotent)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
