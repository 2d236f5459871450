"""What the built-in provider recalls each turn: facts saved with the ``remember`` tool.

The ``remember`` tool (:mod:`memstrata.tools.remember`) writes ``<home>/facts.db``;
:func:`recall_remembered` reads it back for the built-in provider's prefetch. It lives with
the facts store, below the tools, so the providers never import a tool.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from memstrata.config import Config
from memstrata.errors import StorageError
from memstrata.providers.facts.provider import format_recalled, recalled_by_provider
from memstrata.providers.facts.store import FACTS_FILENAME, FactStore

__all__ = ["RECALL_CHARS", "RECALL_LIMIT", "recall_remembered"]

logger = logging.getLogger(__name__)

RECALL_LIMIT: Final = 5
RECALL_CHARS: Final = 800


def recall_remembered(
    home: Path,
    message: str,
    *,
    config: Config | None = None,
    limit: int = RECALL_LIMIT,
    chars: int = RECALL_CHARS,
) -> str:
    """``## Recalled facts`` from ``<home>/facts.db`` relevant to ``message``, or ``""``.

    The built-in provider's prefetch: it reads only (no database is created by chatting),
    skips facts mirrored from the curated files (the snapshot shows those), and returns
    ``""`` while a ``facts`` provider of this process recalls the same file itself.
    """
    path = Path(home) / FACTS_FILENAME
    if not message.strip() or not path.exists():
        return ""
    if recalled_by_provider(path):
        return ""
    cfg = config if config is not None else Config.load(home)
    try:
        with FactStore(path, busy_timeout_ms=int(cfg.get("store.busy_timeout_ms"))) as store:
            mirrored = [f.id for f in store.list(source="mirror", limit=10_000)]
            facts = store.recall(message, limit=limit, exclude=mirrored)
    except StorageError:
        # Recall is best effort: a locked or damaged facts file never blocks a turn.
        logger.warning("remembered facts were not recalled from %s", path, exc_info=True)
        return ""
    return format_recalled(facts, chars)[0]
