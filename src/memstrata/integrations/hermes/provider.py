"""The memstrata memory provider for Hermes Agent (0.19).

Hermes loads one external ``MemoryProvider`` and drives it through its ``MemoryManager``.
:class:`HermesMemstrataProvider` implements that contract with memstrata's layers and
imports nothing from Hermes, so it runs (and is tested) anywhere; the plugin folder
written by ``memstrata hermes install`` mixes it with Hermes' own ABC
(:func:`memstrata.integrations.hermes.plugin.provider_class`).

What Hermes gets:

* every synced turn lands in memstrata's session store (``<home>/state.db``, or
  PostgreSQL when the memstrata config names a DSN), so ``memstrata_session_search``
  finds it with natural-language recall: words ORed and ranked, CJK bigrams, dates,
  optional hybrid, and cached query-focused summaries when a summary model is set;
* the facts store: ``memstrata_remember`` / ``memstrata_facts`` / ``memstrata_forget``,
  "remember that ..." captured from the user's turns, and Hermes' own MEMORY.md /
  USER.md writes mirrored into facts (``on_memory_write``);
* ``prefetch`` recalls relevant facts and the best matching earlier conversations;
* ``on_pre_compress`` hands back the facts of the conversation the compressor should
  keep, and the synced turns stay searchable after compaction.

Tool names carry a ``memstrata_`` prefix because Hermes reserves ``memory`` and
``session_search`` for its core tools and drops provider tools that shadow them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from memstrata.config import Config
from memstrata.errors import ConfigError, MemstrataError, ProviderError, ToolArgumentError
from memstrata.providers.base import MemoryWriteMetadata
from memstrata.providers.facts.provider import TOOL_SCHEMAS as FACTS_SCHEMAS
from memstrata.providers.facts.provider import FactsProvider
from memstrata.search.read import when
from memstrata.store.contract import SessionStoreContract
from memstrata.tools.session_search import SCHEMA as SESSION_SEARCH_SCHEMA
from memstrata.tools.session_search import SessionSearchTool

logger = logging.getLogger(__name__)

PROVIDER_NAME: Final = "memstrata"
CONFIG_FILENAME: Final = "memstrata.json"
IMPORTED_META_KEY: Final = "hermes.state_db_imported"
# Source recorded for a delegated sub-agent's task and result (Hermes hides these too).
DELEGATE_SOURCE: Final = "subagent"

SESSION_SEARCH_TOOL: Final = "memstrata_session_search"
REMEMBER_TOOL: Final = "memstrata_remember"
FACTS_TOOL: Final = "memstrata_facts"
FORGET_TOOL: Final = "memstrata_forget"
# Hermes-facing tool name -> the facts provider's own tool.
_FACT_TOOLS: Final = {
    REMEMBER_TOOL: "facts_remember",
    FACTS_TOOL: "facts_search",
    FORGET_TOOL: "facts_forget",
}

# Settings `hermes memory setup` asks for; saved to $HERMES_HOME/memstrata.json.
CONFIG_SCHEMA: Final[list[dict[str, Any]]] = [
    {
        "key": "home",
        "description": "memstrata home folder (state.db, facts.db, config.toml); "
        "empty: $HERMES_HOME/memstrata",
        "default": "",
    },
    {
        "key": "import_state_db",
        "description": "Import Hermes' existing state.db on first run, so past sessions "
        "are searchable too",
        "default": "false",
        "choices": ["true", "false"],
    },
    {
        "key": "scope",
        "description": "shared: one memory for everyone who talks to this agent (Hermes' "
        "own model); per-user: each gateway user_id gets a memory of their own (bots "
        "serving several people)",
        "default": "shared",
        "choices": ["shared", "per-user"],
    },
    {
        "key": "recall_sessions",
        "description": "Earlier conversations recalled into each turn (0-5; 0 recalls facts only)",
        "default": "2",
    },
]
_DEFAULTS: Final = {
    "home": "",
    "import_state_db": "false",
    "scope": "shared",
    "recall_sessions": "2",
}
_SCOPES: Final = ("shared", "per-user")
MAX_RECALL_SESSIONS: Final = 5
# Characters of recalled conversation text per turn: enough for a few exchanges, small
# next to the prompt.
RECALL_CHARS: Final = 900
_SNIPPET_CHARS: Final = 300


def _hermes_schema(schema: Mapping[str, Any], name: str, lead: str = "") -> dict[str, Any]:
    """A memstrata tool schema in Hermes' bare form, renamed (and its description led by
    ``lead``)."""
    function = dict(schema.get("function", schema))
    description = str(function.get("description", ""))
    return {
        "name": name,
        "description": f"{lead}{description}" if lead else description,
        "parameters": function["parameters"],
    }


def _facts_schema(name: str) -> Mapping[str, Any]:
    for schema in FACTS_SCHEMAS:
        if schema["function"]["name"] == name:
            return schema
    raise ProviderError(f"the facts provider has no tool {name!r}")  # pragma: no cover


TOOL_SCHEMAS: Final[list[dict[str, Any]]] = [
    _hermes_schema(
        SESSION_SEARCH_SCHEMA,
        SESSION_SEARCH_TOOL,
        "memstrata's recall over every synced conversation (natural-language questions, "
        "Chinese and other CJK text, dates). Prefer it to session_search for questions "
        "in plain words.\n\n",
    ),
    *(_hermes_schema(_facts_schema(inner), outer) for outer, inner in _FACT_TOOLS.items()),
]


def read_settings(hermes_home: Path) -> dict[str, str]:
    """The provider's settings: ``$HERMES_HOME/memstrata.json`` over the defaults."""
    settings = dict(_DEFAULTS)
    path = hermes_home / CONFIG_FILENAME
    if path.exists():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{path} is not readable JSON ({exc}); fix it or run `hermes memory setup`."
            ) from exc
        if not isinstance(saved, dict):
            raise ConfigError(f"{path} must hold a JSON object; run `hermes memory setup`.")
        settings.update({k: str(v) for k, v in saved.items() if k in _DEFAULTS})
    return settings


def _flag(value: str, key: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise ConfigError(f"memstrata setting {key} must be true or false, got {value!r}.")


def _recall_sessions(value: str) -> int:
    try:
        count = int(value.strip() or "0")
    except ValueError:
        count = -1
    if not 0 <= count <= MAX_RECALL_SESSIONS:
        raise ConfigError(
            f"memstrata setting recall_sessions must be 0 to {MAX_RECALL_SESSIONS}, got {value!r}."
        )
    return count


def default_hermes_home() -> Path:
    """``$HERMES_HOME``, else ``~/.hermes`` (Hermes' own default)."""
    raw = os.environ.get("HERMES_HOME", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".hermes"


def _scope(value: str) -> str:
    scope = value.strip().lower()
    if scope not in _SCOPES:
        raise ConfigError(f"memstrata setting scope must be {' or '.join(_SCOPES)}, got {value!r}.")
    return scope


def user_folder(user_id: str) -> str:
    """A folder name for ``user_id``: readable, safe on every file system, and unique
    (a digest of the whole id), so no id can reach another user's folder."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", user_id)[:40]
    digest = hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}"


def memstrata_home_for(
    hermes_home: Path, settings: Mapping[str, str], user_id: str | None = None
) -> Path:
    """The memstrata home a Hermes profile uses: the ``home`` setting or a subfolder;
    with ``scope = per-user`` and a gateway ``user_id``, that user's folder under it."""
    configured = settings.get("home", "").strip()
    base = hermes_home / "memstrata"
    if configured:
        path = Path(configured).expanduser()
        base = path if path.is_absolute() else hermes_home / path
    if user_id and _scope(settings.get("scope", "shared")) == "per-user":
        return base / "users" / user_folder(user_id)
    return base


def _text(content: Any) -> str:
    """The text of a message's content (OpenAI parts joined), "" for none."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


class HermesMemstrataProvider:
    """memstrata's layers behind Hermes Agent's ``MemoryProvider`` hooks.

    Hermes calls ``initialize`` once, then per turn ``on_turn_start``, ``prefetch``,
    ``sync_turn`` and ``queue_prefetch`` (the last two on its background worker), tools
    through ``handle_tool_call``, and ``shutdown`` at exit. All state is behind one lock
    or in thread-safe stores, since those calls come from three threads.
    """

    def __init__(self) -> None:
        self.session_id = ""
        self.hermes_home: Path | None = None
        self.home: Path | None = None
        self.platform = "cli"
        self.primary = True
        self.recall_sessions = int(_DEFAULTS["recall_sessions"])
        self.config: Config | None = None
        self._store: SessionStoreContract | None = None
        self._facts: FactsProvider | None = None
        self._search: SessionSearchTool | None = None
        self._known_sessions: set[str] = set()
        self._session_facts: list[int] = []
        self._warm: tuple[str, str] | None = None
        self._lock = threading.RLock()

    # -- identity ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``memstrata``: what ``memory.provider`` names in Hermes' config.yaml."""
        return PROVIDER_NAME

    def is_available(self) -> bool:
        """True when SQLite has FTS5; no network, no files touched."""
        return FactsProvider().is_available()

    # -- setup ---------------------------------------------------------------------------

    def get_config_schema(self) -> list[dict[str, Any]]:
        """The fields ``hermes memory setup`` asks for."""
        return [dict(field) for field in CONFIG_SCHEMA]

    def save_config(self, values: Mapping[str, Any], hermes_home: str | Path) -> None:
        """Validate and write the settings to ``$HERMES_HOME/memstrata.json``."""
        folder = Path(hermes_home)
        settings = read_settings(folder)
        unknown = sorted(set(values) - set(_DEFAULTS))
        if unknown:
            raise ConfigError(
                f"Unknown memstrata setting(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(_DEFAULTS))}."
            )
        settings.update({k: "" if v is None else str(v) for k, v in values.items()})
        _flag(settings["import_state_db"], "import_state_db")
        _scope(settings["scope"])
        _recall_sessions(settings["recall_sessions"])
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{CONFIG_FILENAME}.tmp"
        tmp.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", "utf-8")
        tmp.replace(folder / CONFIG_FILENAME)

    def backup_paths(self) -> list[str]:
        """The memstrata home when it lies outside HERMES_HOME (``hermes backup`` walks
        HERMES_HOME only). Resolved from settings alone: Hermes may call it before
        :meth:`initialize`."""
        hermes_home = self.hermes_home or default_hermes_home()
        try:
            home = memstrata_home_for(hermes_home, read_settings(hermes_home))
        except ConfigError:
            return []
        try:
            home.resolve().relative_to(hermes_home.resolve())
        except ValueError:
            return [str(home)]
        return []

    # -- lifecycle -----------------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """Open the stores under the memstrata home and start ``session_id``.

        ``hermes_home`` (always passed by Hermes) locates the settings and the default
        home; ``platform`` becomes the session's source; a non-primary
        ``agent_context`` (subagent, cron, flush) recalls but never writes.
        """
        raw_home = kwargs.get("hermes_home")
        if not raw_home:
            raise ProviderError(
                "memstrata needs hermes_home to initialise; Hermes' MemoryManager passes it "
                "(call initialize_all, or pass hermes_home=...)."
            )
        hermes_home = Path(str(raw_home)).expanduser()
        settings = read_settings(hermes_home)
        user_id = str(kwargs.get("user_id") or "") or None
        home = memstrata_home_for(hermes_home, settings, user_id)
        home.mkdir(parents=True, exist_ok=True)
        config = Config.load(home)
        with self._lock:
            self.shutdown()
            self.hermes_home, self.home, self.config = hermes_home, home, config
            self.platform = str(kwargs.get("platform") or "cli")
            self.primary = str(kwargs.get("agent_context") or "primary") == "primary"
            self.recall_sessions = _recall_sessions(settings["recall_sessions"])
            from memstrata.backends import open_store

            self._store = open_store(config)
            facts = FactsProvider(config=config)
            facts.initialize(
                session_id,
                home=home,
                platform=self.platform,
                agent_context="primary" if self.primary else "subagent",
            )
            self._facts = facts
            self._search = SessionSearchTool(
                self._store, config=config, current_session_id=session_id
            )
            self._switch(session_id)
            # Hermes' state.db holds everyone's sessions: never copied into one user's home.
            shared = home == memstrata_home_for(hermes_home, settings)
            if shared and _flag(settings["import_state_db"], "import_state_db"):
                self._import_state_db(hermes_home)

    def _import_state_db(self, hermes_home: Path) -> None:
        """Import Hermes' own state.db once, so sessions from before memstrata are found."""
        store = self.store
        source = hermes_home / "state.db"
        if store.get_meta(IMPORTED_META_KEY) or not source.exists():
            return
        from memstrata.ops.importing import import_source

        try:
            report = import_source(source, store, fmt="hermes")
        except MemstrataError as exc:
            logger.warning("memstrata: Hermes' state.db was not imported: %s", exc)
            return
        store.set_meta(IMPORTED_META_KEY, str(source))
        logger.info("memstrata: imported Hermes' state.db: %s", report)

    @property
    def store(self) -> SessionStoreContract:
        """The session store; ProviderError before :meth:`initialize`."""
        if self._store is None:
            raise ProviderError(
                "The memstrata provider is not initialised: Hermes calls initialize() "
                "first (MemoryManager.initialize_all)."
            )
        return self._store

    @property
    def facts(self) -> FactsProvider:
        """The facts provider; ProviderError before :meth:`initialize`."""
        if self._facts is None:
            raise ProviderError(
                "The memstrata provider is not initialised: Hermes calls initialize() first."
            )
        return self._facts

    def _switch(self, session_id: str) -> None:
        self.session_id = session_id
        self._session_facts = []
        self._warm = None
        if self._search is not None:
            self._search.current_session_id = session_id or None

    def _ensure_session(
        self,
        session_id: str,
        *,
        source: str | None = None,
        parent: str | None = None,
        lineage_kind: str | None = None,
    ) -> None:
        if session_id in self._known_sessions:
            return
        store = self.store
        if parent is not None and store.get_session(parent) is None:
            parent, lineage_kind = None, None
        store.create_session(
            session_id,
            source=source or self.platform,
            parent_session_id=parent,
            lineage_kind=lineage_kind,
        )
        self._known_sessions.add(session_id)

    def shutdown(self) -> None:
        """Close every database; safe to call twice."""
        with self._lock:
            facts, self._facts = self._facts, None
            store, self._store = self._store, None
            self._search = None
            self._known_sessions.clear()
            if facts is not None:
                facts.shutdown()
            if store is not None:
                store.close()

    # -- prompt and recall ---------------------------------------------------------------

    def system_prompt_block(self) -> str:
        """The user's known slots (frozen for the session) and a line about the tools."""
        block = self.facts.system_prompt_block() if self._facts is not None else ""
        tools = (
            "memstrata memory: past conversations are searchable with "
            f"{SESSION_SEARCH_TOOL} (plain-language questions work); save durable facts "
            f"with {REMEMBER_TOOL}."
        )
        return f"{block}\n{tools}" if block else tools

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """Facts and earlier conversations relevant to ``query`` ("" when none are).

        Uses what :meth:`queue_prefetch` warmed for the same text, else recalls now:
        both are local index reads, well inside Hermes' prefetch timeout.
        """
        if not query.strip() or self._facts is None:
            return ""
        warm = self._warm
        if warm is not None and warm[0] == query:
            return warm[1]
        return self._recall(query, session_id or self.session_id)

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        """Recall for ``query`` ahead of the next turn (on Hermes' background worker)."""
        if not query.strip() or self._facts is None:
            return
        self._warm = (query, self._recall(query, session_id or self.session_id))

    def _recall(self, query: str, session_id: str) -> str:
        parts = [self.facts.prefetch(query, session_id=session_id)]
        if self.recall_sessions:
            parts.append(self._recall_conversations(query, session_id))
        return "\n\n".join(p for p in parts if p)

    def _recall_conversations(self, query: str, session_id: str) -> str:
        store = self.store
        exclude = store.get_lineage_ids(session_id) if session_id in self._known_sessions else []
        try:
            found = store.search_sessions(
                query,
                limit=self.recall_sessions,
                exclude_session_ids=exclude or None,
                exclude_sources=DELEGATE_SOURCE,
                by_lineage=True,
            )
        except MemstrataError as exc:
            logger.debug("memstrata: conversation recall failed: %s", exc)
            return ""
        lines: list[str] = []
        budget = RECALL_CHARS
        for hit in found:
            message = store.get_message(int(hit["match_message_id"]))
            text = " ".join(_text(message.get("content")).split()) if message else ""
            if not text:
                continue
            if len(text) > _SNIPPET_CHARS:
                text = text[: _SNIPPET_CHARS - 1] + "…"
            stamp = when(hit.get("timestamp"))
            line = f"- {stamp} ({hit['session_id']}) {hit['matched_role']}: {text}"
            if len(line) > budget:
                break
            lines.append(line)
            budget -= len(line) + 1
        if not lines:
            return ""
        return "## From earlier conversations\n" + "\n".join(lines)

    # -- writes --------------------------------------------------------------------------

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        """Nothing is counted per turn beyond what the facts provider keeps."""
        if self._facts is not None:
            self._facts.on_turn_start(turn_number, message)

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Store the finished turn (user, then assistant) in the session store."""
        if not self.primary or self._facts is None:
            return
        sid = session_id or self.session_id
        if not sid:
            return
        with self._lock:
            self._ensure_session(sid)
            rows = [
                {"role": "user", "content": user_content},
                {"role": "assistant", "content": assistant_content},
            ]
            self.store.append_messages(sid, [r for r in rows if r["content"]])
        self.facts.sync_turn(user_content, assistant_content, session_id=sid)

    def on_session_end(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Close the session in the store (its turns stay searchable)."""
        if self._facts is None:
            return
        self._facts.on_session_end(messages)
        if self.primary and self.session_id in self._known_sessions:
            self.store.end_session(self.session_id, "session_end")

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str = "",
        reset: bool = False,
        rewound: bool = False,
        **kwargs: Any,
    ) -> None:
        """Follow Hermes to ``new_session_id``; a compression continuation keeps lineage."""
        if self._facts is None or not new_session_id:
            return
        reason = str(kwargs.get("reason") or "")
        with self._lock:
            if (
                self.primary
                and reason == "compression"
                and parent_session_id
                and parent_session_id != new_session_id
            ):
                self._ensure_session(
                    new_session_id, parent=parent_session_id, lineage_kind="compression"
                )
            self._switch(new_session_id)
        self._facts.on_session_switch(
            new_session_id,
            parent_session_id=parent_session_id or None,
            reset=reset,
            reason=reason or ("new" if reset else "switch"),
        )

    def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """What the summary must keep: facts saved in this conversation, and where the
        compressed turns can still be read."""
        if self._facts is None:
            return ""
        ids = list(self._session_facts)
        mine = [f for f in self.facts.store.list(limit=200) if f.session_id == self.session_id]
        seen: set[int] = set()
        lines: list[str] = []
        for fact in [*(self._fact_or_none(i) for i in ids), *mine]:
            if fact is None or fact.id in seen or fact.status != "live":
                continue
            seen.add(fact.id)
            lines.append(f"- {fact.content}")
        if not lines:
            return ""
        return (
            "Facts saved during this conversation (keep them in the summary):\n"
            + "\n".join(lines[:30])
            + f"\nThe compressed turns stay searchable with {SESSION_SEARCH_TOOL}."
        )

    def _fact_or_none(self, fact_id: int) -> Any:
        try:
            return self.facts.store.get(fact_id)
        except MemstrataError:
            return None

    def on_memory_write(
        self,
        action: str,
        target: str,
        content: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Mirror a write of Hermes' built-in memory tool into the facts store."""
        if self._facts is None or not self.primary:
            return
        meta = metadata or {}
        old_text = meta.get("old_text")
        origin = meta.get("write_origin") or meta.get("origin") or "tool"
        self._facts.on_memory_write(
            action,
            target,
            content,
            metadata=MemoryWriteMetadata(
                origin=str(origin),
                old_text=str(old_text) if old_text else None,
                session_id=str(meta.get("session_id") or self.session_id) or None,
            ),
        )

    def on_delegation(
        self, task: str, result: str, *, child_session_id: str = "", **kwargs: Any
    ) -> None:
        """Record a sub-agent's task and result as a delegate session of this one."""
        if self._facts is None or not self.primary or not child_session_id:
            return
        with self._lock:
            parent = self.session_id if self.session_id in self._known_sessions else None
            self._ensure_session(
                child_session_id,
                source=DELEGATE_SOURCE,
                parent=parent,
                lineage_kind="delegate" if parent else None,
            )
            rows = [{"role": "user", "content": task}, {"role": "assistant", "content": result}]
            self.store.append_messages(child_session_id, [r for r in rows if r["content"]])

    # -- tools ---------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """``memstrata_session_search`` and the three facts tools, in Hermes' bare form."""
        return [json.loads(json.dumps(s)) for s in TOOL_SCHEMAS]

    def handle_tool_call(self, tool_name: str, args: Mapping[str, Any], **kwargs: Any) -> str:
        """Run one tool; the result (or a fixable error) as a JSON string."""
        try:
            result = self._call(tool_name, args if isinstance(args, Mapping) else {})
        except MemstrataError as exc:
            result = {"success": False, "error": str(exc)}
        return json.dumps(result, ensure_ascii=False, default=str)

    def _call(self, tool_name: str, args: Mapping[str, Any]) -> Mapping[str, Any]:
        if tool_name == SESSION_SEARCH_TOOL:
            if self._search is None:
                raise ProviderError("The memstrata provider is not initialised.")
            return self._search.handle(args)
        inner = _FACT_TOOLS.get(tool_name)
        if inner is None:
            known = ", ".join([SESSION_SEARCH_TOOL, *_FACT_TOOLS])
            raise ToolArgumentError(f"Unknown tool {tool_name!r}; memstrata's tools: {known}.")
        if inner == "facts_remember" and not self.primary:
            raise ToolArgumentError(
                "Facts are saved by the primary agent only; report the fact in your result."
            )
        result = self.facts.handle_tool_call(inner, args)
        fact = result.get("fact")
        if inner == "facts_remember" and isinstance(fact, dict) and "id" in fact:
            self._session_facts.append(int(fact["id"]))
        return result
