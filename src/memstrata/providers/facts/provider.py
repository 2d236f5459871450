"""``FactsProvider``: the bundled local memory provider over
:class:`~memstrata.providers.facts.store.FactStore`.

Select it with ``memory.provider = "facts"`` in ``config.toml``. By default it needs
nothing but the home folder (``$MEMSTRATA_HOME/facts.db``) and never touches the network;
with ``store.dsn`` set, the facts live in the session store's PostgreSQL tenant instead.
With ``search.embedder`` set ("minilm" or "e5" offline, "openai" at the configured endpoint),
recall and ``facts_search`` fuse embeddings with the keywords (hybrid recall, see
:mod:`memstrata.providers.facts.vectors`); facts are embedded lazily, at most ``INDEX_PER_TURN``
at ``initialize`` and at each ``sync_turn`` (on the background worker), never when they
are written and never inside ``prefetch``.

What it does in the lifecycle:

* ``system_prompt_block`` - the user's identity and preference slots as one line
  ("Known about the user: name: Alice; timezone: UTC+8"), computed at ``initialize``
  and returned byte-identical for the whole session, so the prompt prefix stays cached.
  A slot written during the session shows up in recall instead, and in the block of
  the next session (or after compression, which rebuilds the prompt anyway).
* ``prefetch`` - gated full-text (or hybrid) recall: at most ``recall_limit`` facts and
  ``recall_chars`` characters under ``## Recalled facts``, or ``""`` when nothing in
  the store is relevant to the message (see :mod:`memstrata.providers.facts.recall`). What the
  prompt already holds is never recalled: the block's slots, and mirrored curated
  entries that existed at session start (the built-in snapshot shows those).
* ``sync_turn`` - no extraction by a model. When the user's message starts with
  "remember that ..." (or "记住 ..."), that statement is stored as a fact (source
  ``capture``); turns of a delegated sub-agent are never captured, as their "user" is
  the parent agent. Recall statistics of the turn are written here too, on the
  background worker, so ``prefetch`` itself stays read-only.
* ``on_memory_write`` - mirrors the curated files: an ``add`` becomes a fact
  (category from :func:`~memstrata.providers.facts.classify.classify`), a ``replace`` supersedes
  the mirrored fact containing ``old_text``, a ``remove`` deletes it.
* tools ``facts_search``, ``facts_remember``, ``facts_forget``, ``facts_history``.
"""

from __future__ import annotations

import collections
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, cast

from memstrata.backends import postgres_dsn
from memstrata.config import Config
from memstrata.errors import (
    CuratedMemoryError,
    MemstrataError,
    ProviderError,
    ToolArgumentError,
)
from memstrata.llm.arguments import optional_int, required_str
from memstrata.providers.base import MemoryProvider, MemoryWriteMetadata
from memstrata.providers.facts.args import clean_fact_text
from memstrata.providers.facts.classify import classify, explicit_capture, extract_slot
from memstrata.providers.facts.contract import Fact, FactChange, FactStoreContract
from memstrata.providers.facts.opening import facts_key, open_facts
from memstrata.providers.facts.schema import CATEGORIES
from memstrata.providers.facts.store import FACTS_FILENAME, FactStore
from memstrata.search.embedders import Embedder, embedder_from_config
from memstrata.store.sqlite.database import Durability

logger = logging.getLogger(__name__)

# Slots the prompt block lists first, in this order; others follow by key.
SLOT_ORDER: Final = ("name", "pronouns", "job", "location", "timezone", "language")
MAX_BLOCK_SLOTS: Final = 12
MAX_BLOCK_CHARS: Final = 600
_MAX_SLOT_VALUE_SHOWN: Final = 80
# Facts embedded per turn (and at initialize) when an embedder is set: a new fact gets its
# vector after the turn that wrote it, and a store imported in bulk catches up over a few turns
# instead of stalling one (the rest are still found by their keywords meanwhile).
INDEX_PER_TURN: Final = 64

_CATEGORY_PARAM: Final = {
    "type": "string",
    "enum": list(CATEGORIES),
    "description": (
        "identity (who the user is), preference (how they like things), episodic "
        "(something that happened or was decided), note (your own conventions)."
    ),
}
TOOL_SCHEMAS: Final[list[dict[str, Any]]] = [
    {
        "type": "function",
        "function": {
            "name": "facts_search",
            "description": (
                "Search the long-term facts store (things learned about the user and past "
                "decisions, across all sessions). Natural-language words are matched by "
                'relevance; AND/OR/NOT, "phrases" and prefix* work too. An empty query '
                "lists the newest facts."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "category": _CATEGORY_PARAM,
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
                },
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "facts_remember",
            "description": (
                "Store one durable fact as a short declarative sentence ('User prefers "
                "tabs over spaces'). For a structured attribute also give key and value "
                "(key='timezone', value='UTC+8'): a new value replaces the old one, which "
                "stays in the history. Skip small talk and things easy to look up again."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The fact, one sentence."},
                    "category": _CATEGORY_PARAM,
                    "key": {
                        "type": "string",
                        "description": "Slot name, e.g. name, job, location, timezone.",
                    },
                    "value": {"type": "string", "description": "Slot value (with key)."},
                    "subject": {
                        "type": "string",
                        "enum": ["user", "agent"],
                        "description": "Whom the fact is about (default: user).",
                    },
                },
                "required": ["content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "facts_forget",
            "description": (
                "Delete a fact that is wrong or obsolete, by id (from facts_search or the "
                "recalled list) or by a piece of its text that matches exactly one fact. "
                "It stays in the history."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "The fact's id (#12 -> 12)."},
                    "query": {
                        "type": "string",
                        "description": "Text contained in exactly one live fact.",
                    },
                },
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "facts_history",
            "description": (
                "Show how facts changed (added, superseded, deleted), newest first: of "
                "one fact by id, or of the whole store."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "A fact id; omit for all."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                },
                "required": [],
            },
        },
    },
]


def _day(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(timestamp))


# Facts stores a FactsProvider of this process recalls from (see facts_key), with how
# many providers do: the built-in provider's recall of `remember`ed facts steps aside for
# them, so a fact is never recalled twice in one turn.
_RECALLING: collections.Counter[str] = collections.Counter()
_RECALLING_LOCK = threading.Lock()


def _key(where: Path | str) -> str:
    return str(Path(where).absolute()) if isinstance(where, Path) else where


def recalled_by_provider(where: Path | str) -> bool:
    """True while an initialised FactsProvider of this process recalls from ``where``: a
    facts file, or the key :func:`~memstrata.providers.facts.opening.facts_key` gives."""
    with _RECALLING_LOCK:
        return _RECALLING[_key(where)] > 0


def _track_recall(where: Path | str | None, delta: int) -> None:
    if where is None:
        return
    key = _key(where)
    with _RECALLING_LOCK:
        _RECALLING[key] += delta
        if _RECALLING[key] <= 0:
            del _RECALLING[key]


def format_recalled(facts: Sequence[Fact], budget: int) -> tuple[str, int]:
    """The ``## Recalled facts`` block of ``facts`` within ``budget`` characters.

    Returns the text (``""`` for no facts) and how many facts it shows, best first; an
    episodic fact carries its day, so the model can tell when it happened.
    """
    lines: list[str] = []
    for fact in facts:
        tags = fact.category + (f", {_day(fact.created_at)}" if fact.category == "episodic" else "")
        line = f"- #{fact.id} [{tags}] {fact.content}"
        if len(line) > budget:
            if lines:
                break
            line = line[: budget - 1] + "…"
        lines.append(line)
        budget -= len(line) + 1
    if not lines:
        return "", 0
    return "## Recalled facts\n" + "\n".join(lines), len(lines)


def fact_json(fact: Fact) -> dict[str, Any]:
    """What the model sees of a fact: compact, dates instead of epoch seconds."""
    out: dict[str, Any] = {
        "id": fact.id,
        "content": fact.content,
        "category": fact.category,
        "subject": fact.subject,
    }
    if fact.key is not None:
        out["key"], out["value"] = fact.key, fact.value
    out["source"] = fact.source
    out["updated"] = _day(fact.updated_at)
    if fact.status != "live":
        out["status"] = fact.status
    return out


def _change_json(change: FactChange) -> dict[str, Any]:
    return {
        "fact_id": change.fact_id,
        "action": change.action,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(change.at)),
        "origin": change.origin,
        "before": change.before,
        "after": change.after,
    }


def _opt(args: Mapping[str, Any], name: str, kind: type) -> Any:
    """Argument ``name`` if present and of ``kind``; ToolArgumentError otherwise."""
    value = args.get(name)
    if value is None or (kind is str and value == ""):
        return None
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, kind):
        expected = "an integer" if kind is int else "a string"
        raise ToolArgumentError(f"'{name}' must be {expected}, got {value!r}.")
    return value


class FactsProvider(MemoryProvider):
    """Categorised facts with slots, recall and history, in the local ``facts.db`` or,
    under ``store.dsn``, in the PostgreSQL tenant of the session store.

    ``path`` overrides ``<home>/facts.db`` (and keeps the facts in that file whatever the
    DSN); ``recall_limit`` and ``recall_chars`` bound
    what ``prefetch`` injects per turn; ``capture_explicit`` turns the "remember that
    ..." capture in ``sync_turn`` on or off. ``config`` supplies the store's durability
    and busy timeout (``store.durability``, ``store.busy_timeout_ms``) and the embedder
    (``search.embedder``); ``embedder`` overrides the latter.
    """

    name: ClassVar[str] = "facts"
    description: ClassVar[str] = (
        "Facts (SQLite or PostgreSQL): categories, key/value slots, full-text recall, history"
    )

    def __init__(
        self,
        *,
        config: Config | None = None,
        path: Path | None = None,
        recall_limit: int = 5,
        recall_chars: int = 800,
        capture_explicit: bool = True,
        embedder: Embedder | None = None,
    ) -> None:
        if recall_limit < 1 or recall_chars < 80:
            raise ProviderError(
                "FactsProvider needs recall_limit >= 1 and recall_chars >= 80 "
                f"(got {recall_limit} and {recall_chars})."
            )
        self.config = config
        self.path = path
        self.recall_limit = recall_limit
        self.recall_chars = recall_chars
        self.capture_explicit = capture_explicit
        self.embedder = embedder
        self.session_id = ""
        self.primary = True
        self._store: FactStoreContract | None = None
        self._where: str | None = None
        self._block = ""
        self._in_prompt: frozenset[int] = frozenset()
        self._recalled: list[int] = []
        self._recalled_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------

    def is_available(self) -> bool:
        """True when this Python's SQLite has FTS5 (checked in memory, no network), or the
        facts live in PostgreSQL (``store.dsn``)."""
        if self.path is None and self.config is not None and postgres_dsn(self.config):
            return True
        conn = sqlite3.connect(":memory:")
        try:
            conn.execute("CREATE VIRTUAL TABLE probe USING fts5(x)")
        except sqlite3.Error:
            return False
        finally:
            conn.close()
        return True

    def initialize(
        self,
        session_id: str,
        *,
        home: Path,
        platform: str = "cli",
        agent_context: str = "primary",
        user_id: str | None = None,
        session_title: str | None = None,
        **extra: Any,
    ) -> None:
        """Open the facts store (``<home>/facts.db``, created on first use, or the
        PostgreSQL tenant under ``store.dsn``) and freeze the prompt block."""
        on_server = self.path is None and self.config is not None
        on_server = on_server and postgres_dsn(cast(Config, self.config)) is not None
        if on_server:
            where = facts_key(cast(Config, self.config), Path(home))
        else:
            where = str((self.path or Path(home) / FACTS_FILENAME).absolute())
        if self._store is None or self._where != where:
            if self._store is not None:
                self._store.close()
                _track_recall(self._where, -1)
            embedder = self.embedder or self._configured_embedder()
            if on_server:
                self._store = open_facts(self.config, home=Path(home), embedder=embedder)
            else:
                durability, busy_ms = "normal", 5000
                if self.config is not None:
                    durability = str(self.config.get("store.durability"))
                    busy_ms = int(self.config.get("store.busy_timeout_ms"))
                self._store = FactStore(
                    Path(where),
                    durability=cast(Durability, durability),
                    busy_timeout_ms=busy_ms,
                    embedder=embedder,
                )
                if self.config is not None:
                    self._store.typos = bool(self.config.get("search.typos"))
            self._where = where
            _track_recall(where, +1)
        self.session_id = session_id
        self.primary = agent_context == "primary"
        self._freeze()
        self._index_some()

    def _configured_embedder(self) -> Embedder | None:
        """``search.embedder`` of the config (None without a config or when it is "")."""
        if self.config is None:
            return None
        try:
            return embedder_from_config(self.config)
        except MemstrataError as exc:
            # A broken embedder setting must not take the agent's memory down: recall
            # stays keyword-only and says why once.
            logger.warning("facts: keyword-only recall, the embedder is unusable: %s", exc)
            return None

    def _index_some(self) -> None:
        """Embed up to INDEX_PER_TURN facts that have no vector yet (when hybrid is on)."""
        store = self._store
        if store is None or store.embedder is None:
            return
        try:
            store.index_vectors(limit=INDEX_PER_TURN)
        except MemstrataError as exc:
            logger.warning("facts: could not embed new facts (keywords still work): %s", exc)

    @property
    def store(self) -> FactStoreContract:
        """The open store; ProviderError before :meth:`initialize`."""
        if self._store is None:
            raise ProviderError(
                "The facts provider is not initialised: call initialize(session_id, "
                "home=...) (MemoryManager.initialize_all does) before using it."
            )
        return self._store

    def _freeze(self) -> None:
        # Mirrored facts that exist now are entries of MEMORY.md / USER.md, which the
        # built-in provider's frozen snapshot already puts in this session's prompt:
        # they are left out of the block and of recall, so nothing is said twice.
        # Entries mirrored later in the session are not in the snapshot and are recalled.
        mirrored = self.store.list(source="mirror", limit=10_000)
        slots = [f for f in self.store.slots(subject="user") if f.source != "mirror"]
        rank = {key: i for i, key in enumerate(SLOT_ORDER)}
        slots.sort(key=lambda f: (rank.get(f.key or "", len(rank)), f.key or ""))
        parts: list[str] = []
        shown: list[int] = [f.id for f in mirrored]
        length = 0
        for fact in slots[:MAX_BLOCK_SLOTS]:
            value = fact.value or ""
            if len(value) > _MAX_SLOT_VALUE_SHOWN:
                value = value[: _MAX_SLOT_VALUE_SHOWN - 1] + "…"
            part = f"{(fact.key or '').replace('_', ' ')}: {value}"
            if length + len(part) > MAX_BLOCK_CHARS:
                break
            parts.append(part)
            shown.append(fact.id)
            length += len(part) + 2
        self._block = "Known about the user: " + "; ".join(parts) if parts else ""
        self._in_prompt = frozenset(shown)

    def system_prompt_block(self) -> str:
        """The user's slots as frozen at session start ("" when there are none)."""
        return self._block

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None,
        reset: bool,
        reason: str,
    ) -> None:
        """Follow the new session id and refreeze the block for the prompt built next."""
        self.session_id = new_session_id
        self._flush_recalls()
        self._freeze()

    def on_session_end(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Write the pending recall statistics."""
        self._flush_recalls()

    def shutdown(self) -> None:
        """Write the pending recall statistics and close the database."""
        if self._store is not None:
            self._flush_recalls()
            self._store.close()
            _track_recall(self._where, -1)
            self._store = None
            self._where = None

    # -- per turn -----------------------------------------------------------------------

    def prefetch(self, query: str, *, session_id: str) -> str:
        """``## Recalled facts`` relevant to ``query``, or ``""`` when none is."""
        if self._store is None or not query.strip():
            return ""
        facts = self._store.recall(query, limit=self.recall_limit, exclude=self._in_prompt)
        text, shown = format_recalled(facts, self.recall_chars)
        if shown:
            with self._recalled_lock:
                self._recalled.extend(f.id for f in facts[:shown])
        return text

    def _flush_recalls(self) -> None:
        with self._recalled_lock:
            ids, self._recalled = self._recalled, []
        if ids and self._store is not None:
            self._store.mark_recalled(ids)

    def sync_turn(
        self,
        user: str,
        assistant: str,
        *,
        session_id: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Store an explicit "remember that ..." of the user; write recall statistics."""
        self._flush_recalls()
        self._index_some()
        if not (self.capture_explicit and self.primary) or self._store is None:
            return
        statement = explicit_capture(user)
        if statement is None:
            return
        category, subject = classify("capture", statement)
        slot = extract_slot(statement)
        try:
            self._store.add(
                statement,
                category=category,
                subject=subject,
                key=slot[0] if slot else None,
                value=slot[1] if slot else None,
                source="capture",
                session_id=session_id or self.session_id,
            )
        except CuratedMemoryError as exc:
            logger.warning("facts: did not capture %r: %s", statement[:60], exc)

    # -- mirroring curated memory ---------------------------------------------------------

    def on_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        *,
        metadata: MemoryWriteMetadata | None = None,
    ) -> None:
        """Mirror one curated-memory write (add, replace or remove) into the store."""
        store = self.store
        origin = f"mirror:{metadata.origin}" if metadata is not None else "mirror"
        session_id = (metadata.session_id if metadata is not None else None) or self.session_id
        old_text = metadata.old_text if metadata is not None else None
        if action == "add":
            self._mirror_add(target, content, origin, session_id, supersedes=())
            return
        needle = old_text or (content if action == "remove" else None)
        found = store.find_text(needle, source="mirror", target=target) if needle else []
        if len(found) > 1:
            # The curated file matched old_text to exactly one entry; the facts have
            # diverged (an edit outside the tool). Touch the newest, never several.
            logger.info(
                "facts: %d mirrored facts contain %r; using #%d", len(found), needle, found[0].id
            )
        if action == "replace":
            self._mirror_add(
                target, content, origin, session_id, supersedes=[f.id for f in found[:1]]
            )
        elif action == "remove" and found:
            store.forget(found[0].id, origin=origin, session_id=session_id)

    def _mirror_add(
        self,
        target: str,
        content: str,
        origin: str,
        session_id: str,
        *,
        supersedes: Sequence[int],
    ) -> None:
        if not content.strip():
            return
        category, subject = classify(target, content)
        slot = extract_slot(content) if subject == "user" else None
        self.store.add(
            content,
            category=category,
            subject=subject,
            key=slot[0] if slot else None,
            value=slot[1] if slot else None,
            source="mirror",
            target=target,
            session_id=session_id,
            origin=origin,
            supersedes=supersedes,
        )

    # -- tools --------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """facts_search, facts_remember, facts_forget and facts_history."""
        return [dict(schema) for schema in TOOL_SCHEMAS]

    def handle_tool_call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one tool; errors come back as ``{"success": false, "error": ...}``."""
        handlers = {
            "facts_search": self._tool_search,
            "facts_remember": self._tool_remember,
            "facts_forget": self._tool_forget,
            "facts_history": self._tool_history,
        }
        return self._dispatch_tool(handlers, name, args)

    def _tool_search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        query = _opt(args, "query", str) or ""
        category = _opt(args, "category", str)
        limit = optional_int(args, "limit", minimum=1, maximum=20, default=5)
        facts = self.store.search(query, category=category, limit=limit)
        if facts and query.strip():
            self.store.mark_recalled(f.id for f in facts)
        return {"success": True, "count": len(facts), "facts": [fact_json(f) for f in facts]}

    def _tool_remember(self, args: Mapping[str, Any]) -> dict[str, Any]:
        content = required_str(args, "content", '{"content": "User prefers tabs over spaces"}')
        # Size first: an oversized fact is refused before it is classified or scanned.
        content = clean_fact_text(content)
        subject = _opt(args, "subject", str) or "user"
        default_category, _ = classify("user" if subject == "user" else "memory", content)
        fact = self.store.add(
            content,
            category=_opt(args, "category", str) or default_category,
            subject=subject,
            key=_opt(args, "key", str),
            value=_opt(args, "value", str),
            source="tool",
            session_id=self.session_id or None,
        )
        return {"success": True, "fact": fact_json(fact)}

    def _tool_forget(self, args: Mapping[str, Any]) -> dict[str, Any]:
        fact_id = _opt(args, "id", int)
        query = _opt(args, "query", str)
        if fact_id is None and query is None:
            raise ToolArgumentError(
                "Send 'id' (from facts_search) or 'query' (text of exactly one fact)."
            )
        if fact_id is None:
            fact_id = self.store.find_one(query).id
        fact = self.store.forget(fact_id, origin="tool", session_id=self.session_id or None)
        return {"success": True, "forgotten": fact_json(fact)}

    def _tool_history(self, args: Mapping[str, Any]) -> dict[str, Any]:
        fact_id = _opt(args, "id", int)
        limit = optional_int(args, "limit", minimum=1, maximum=50, default=10)
        if fact_id is not None:
            self.store.get(fact_id)  # NoMatchError for an unknown id
        changes = self.store.history(fact_id, limit=limit)
        return {
            "success": True,
            "count": len(changes),
            "changes": [_change_json(c) for c in changes],
        }
