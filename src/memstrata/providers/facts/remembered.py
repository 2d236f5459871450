"""What the built-in provider recalls each turn: facts saved with the ``remember`` tool.

The ``remember`` tool (:mod:`memstrata.tools.remember`) writes the facts store
(``<home>/facts.db``, or the PostgreSQL tenant under ``store.dsn``);
:class:`RememberedRecall` reads it back for the built-in provider's prefetch. It lives
with the facts store, below the tools, so the providers never import a tool.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Final

from memstrata.backends import postgres_dsn
from memstrata.config import Config
from memstrata.errors import StorageError
from memstrata.providers.facts.contract import FactStoreContract
from memstrata.providers.facts.opening import facts_key, open_facts
from memstrata.providers.facts.provider import format_recalled, recalled_by_provider

__all__ = ["RECALL_CHARS", "RECALL_LIMIT", "RememberedRecall", "recall_remembered"]

logger = logging.getLogger(__name__)

RECALL_LIMIT: Final = 5
RECALL_CHARS: Final = 800


class RememberedRecall:
    """The built-in provider's recall of remembered facts.

    The SQLite file is opened per recall and only when it exists (no database is created
    by chatting); a PostgreSQL tenant's store is opened on first use and kept until
    :meth:`close`, as a connection per turn would cost more than the recall.
    """

    def __init__(self, home: Path, *, config: Config | None = None) -> None:
        self.home = Path(home)
        self.config = config
        self._server: FactStoreContract | None = None
        self._lock = threading.Lock()

    def recall(self, message: str, *, limit: int = RECALL_LIMIT, chars: int = RECALL_CHARS) -> str:
        """``## Recalled facts`` relevant to ``message``, or ``""``.

        Facts mirrored from the curated files are skipped (the snapshot shows those), and
        ``""`` comes back while a ``facts`` provider of this process recalls the same
        store itself.
        """
        if not message.strip():
            return ""
        cfg = self.config if self.config is not None else Config.load(self.home)
        where = facts_key(cfg, self.home)
        on_server = postgres_dsn(cfg) is not None
        if (not on_server and not Path(where).exists()) or recalled_by_provider(where):
            return ""
        try:
            if on_server:
                with self._lock:
                    if self._server is None:
                        self._server = open_facts(cfg, home=self.home)
                    return self._recall(self._server, message, limit, chars)
            with open_facts(cfg, home=self.home) as store:
                return self._recall(store, message, limit, chars)
        except StorageError:
            # Recall is best effort: a locked or damaged store never blocks a turn.
            logger.warning("remembered facts were not recalled from %s", where, exc_info=True)
            return ""

    @staticmethod
    def _recall(store: FactStoreContract, message: str, limit: int, chars: int) -> str:
        mirrored = [f.id for f in store.list(source="mirror", limit=10_000)]
        facts = store.recall(message, limit=limit, exclude=mirrored)
        return format_recalled(facts, chars)[0]

    def close(self) -> None:
        """Close the kept PostgreSQL store, if one was opened."""
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None


def recall_remembered(
    home: Path,
    message: str,
    *,
    config: Config | None = None,
    limit: int = RECALL_LIMIT,
    chars: int = RECALL_CHARS,
) -> str:
    """``## Recalled facts`` of ``home``'s facts relevant to ``message``, or ``""``: one
    :meth:`RememberedRecall.recall`, its store closed afterwards."""
    recaller = RememberedRecall(home, config=config)
    try:
        return recaller.recall(message, limit=limit, chars=chars)
    finally:
        recaller.close()
