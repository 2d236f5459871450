"""The ``remember`` tool: the model captures a fact the moment it notices it.

Memory is categorised by how it is used:

* **identity and preferences** (who the user is, how they like things done) belong in
  the frozen snapshot, ``USER.md`` / ``MEMORY.md``, written with the ``memory`` tool;
* **episodic facts** (what happened, what was decided) go to the facts store
  (``$MEMSTRATA_HOME/facts.db``, or the PostgreSQL tenant under ``store.dsn``) through
  ``remember`` and come back only when a later
  message is about them, through prefetch, so they cost no prompt space otherwise;
* **working state** (the task at hand) stays in the conversation.

``remember`` needs no external memory provider: the tool writes the facts store, and the
built-in provider's prefetch (:func:`recall_remembered`) recalls from it. When the
bundled ``facts`` provider is active it recalls the same store itself, so the built-in
recall steps aside and nothing is recalled twice.

Example::

    from memstrata.tools.toolbox import dispatch_tool

    dispatch_tool("remember", {"content": "We chose Postgres for the billing service",
                               "category": "episodic"})
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from memstrata.config import Config, memstrata_home
from memstrata.llm.arguments import optional_str, required_str
from memstrata.providers.facts.classify import classify
from memstrata.providers.facts.contract import FactStoreContract
from memstrata.providers.facts.opening import open_facts
from memstrata.providers.facts.provider import fact_json
from memstrata.providers.facts.remembered import RECALL_CHARS, RECALL_LIMIT, recall_remembered
from memstrata.providers.facts.schema import CATEGORIES

logger = logging.getLogger(__name__)

REMEMBER_TOOL_NAME: Final = "remember"

REMEMBER_TOOL_DESCRIPTION: Final = (
    "Capture one fact the moment you notice it, so a later session can recall it. Use it "
    "for things that happened or were decided ('On 2026-03-02 the user chose Postgres for "
    "billing'): they are stored outside the prompt and come back automatically when a "
    "later message is about them. Write one short declarative sentence that makes sense "
    "on its own (names and dates, not 'it' or 'yesterday'). Who the user is and how they "
    "like to work belong in the memory tool instead; the task in progress needs no tool. "
    "A saved fact is done: do not repeat the call."
)

REMEMBER_TOOL_SCHEMA: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": REMEMBER_TOOL_NAME,
        "description": REMEMBER_TOOL_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "The fact, one sentence."},
                "category": {
                    "type": "string",
                    "enum": list(CATEGORIES),
                    "description": (
                        "episodic (happened or was decided; the default), identity (who the "
                        "user is), preference (how they like things), note (your own "
                        "conventions)."
                    ),
                },
            },
            "required": ["content"],
        },
    },
}

_EXAMPLE: Final = '{"content": "The user moved the launch to 2026-05-04", "category": "episodic"}'


class RememberTool:
    """The ``remember`` tool over the facts store of ``home`` (opened on first use).

    ``session_id`` (settable) is stored with each fact, so a fact can be traced to the
    conversation it came from.
    """

    name: Final = REMEMBER_TOOL_NAME
    schema: Final = REMEMBER_TOOL_SCHEMA

    def __init__(
        self,
        home: Path | None = None,
        *,
        config: Config | None = None,
        session_id: str | None = None,
    ) -> None:
        if home is None:
            home = config.home if config is not None else memstrata_home()
        self.home = Path(home)
        self.config = config
        self.session_id = session_id
        self._store: FactStoreContract | None = None
        self._lock = threading.Lock()

    def _facts(self) -> FactStoreContract:
        with self._lock:
            if self._store is None:
                cfg = self.config if self.config is not None else Config.load(self.home)
                self._store = open_facts(cfg, home=self.home)
            return self._store

    def handle(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Store the fact; errors raise and are turned into text by the toolbox."""
        content = required_str(args, "content", _EXAMPLE)
        category = optional_str(args, "category")
        if not category:
            # An unlabelled fact is taken as episodic unless it reads like a profile line.
            guessed, _ = classify("user", content)
            category = guessed if guessed == "identity" else "episodic"
        fact = self._facts().add(
            content, category=category, source="tool", session_id=self.session_id
        )
        return {
            "success": True,
            "done": True,
            "fact": fact_json(fact),
            "message": "Remembered. It will be recalled when a later message is about it; "
            "do not repeat this call.",
        }

    def reset_turn(self) -> None:
        """Nothing is counted per turn."""

    def close(self) -> None:
        """Close the facts database (it reopens on the next call)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


__all__ = [
    "RECALL_CHARS",
    "RECALL_LIMIT",
    "REMEMBER_TOOL_NAME",
    "REMEMBER_TOOL_SCHEMA",
    "RememberTool",
    "recall_remembered",
]
