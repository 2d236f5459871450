"""The session lifecycle of an agent: open, resume, start over, title, end.

::

    start()          initialize_all(session_id, platform) -> the system prompt built once
                     (or the stored one replayed when the session exists)
    new_session()    on_session_end -> end_session('new_session') -> a fresh id and a
                     re-frozen memory snapshot -> on_session_switch(reset=True)
    resume(id)       end the current one ('switched') -> load the stored prompt and
                     messages of the id's compression tip -> on_session_switch
    close()          on_session_end(messages) -> end_session('user_exit') -> shutdown_all

:class:`SessionLifecycle` holds this, and the :class:`~memstrata.agent.loop.Agent` adds
the turn on top. A session row is created on first need, so a session nobody used
leaves no row.
"""

from __future__ import annotations

import abc
import logging
import threading
from typing import TYPE_CHECKING, Any, Self

from memstrata.agent.turn import message_from_row, without_api_content
from memstrata.closing import Closing
from memstrata.compress.split import make_session_id
from memstrata.config import Config
from memstrata.errors import SessionStoreError
from memstrata.llm.types import LLMClient
from memstrata.memory.core import CuratedMemory
from memstrata.providers.manager import MemoryManager
from memstrata.store.contract import SessionStoreContract

if TYPE_CHECKING:
    from memstrata.tools.session_search import SessionSearchTool

__all__ = ["SessionLifecycle"]

logger = logging.getLogger(__name__)


class SessionLifecycle(Closing, abc.ABC):
    """Which session an agent is in, and the provider hooks around moving between them.

    A subclass sets the attributes declared here and builds the system prompt
    (:meth:`build_system_prompt`).
    """

    config: Config
    client: LLMClient
    store: SessionStoreContract
    manager: MemoryManager
    memory: CuratedMemory
    search_tool: SessionSearchTool | None
    source: str
    platform: str
    title: str | None
    session_id: str
    system_prompt: str
    messages: list[dict[str, Any]]
    _owns_store: bool
    _row_exists: bool
    _last_prompt_tokens: int
    _started: bool
    _closed: bool

    @abc.abstractmethod
    def build_system_prompt(self, *, reload_memory: bool = False) -> str:
        """The system prompt of a new session (``reload_memory``: re-freeze L1 first)."""

    def __enter__(self) -> Self:
        # Unlike a store, an agent also starts its session on entry; exit closes it.
        self.start()
        return self

    def start(self) -> str:
        """Initialise the providers and open the session (resumed when it exists).

        Idempotent; :meth:`run_turn` calls it. Returns the session id.
        """
        if self._started:
            return self.session_id
        self._started = True
        existing = self.store.get_session(self.session_id) is not None
        if existing:
            # A compressed session continues in its newest child, never in itself.
            self.session_id = self.store.get_compression_tip(self.session_id)
        self.manager.initialize_all(
            self.session_id, platform=self.platform, session_title=self.title
        )
        if existing:
            self._load_session(self.session_id)
        else:
            self.system_prompt = self.build_system_prompt()
            if self.title:
                self._ensure_row()
        self._point_tools_at(self.session_id)
        return self.session_id

    def close(self) -> None:
        """End the session: providers get ``on_session_end``, then ``shutdown_all``."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._started:
                self._end_current("user_exit")
        finally:
            self.manager.shutdown_all()
            if self._owns_store:
                self.store.close()

    def curate_in_background(self) -> threading.Thread:
        """Consolidate MEMORY.md and USER.md on a background thread; return the thread.

        Meant for between sessions (after :meth:`close` or :meth:`new_session`), never
        inside a turn. See :class:`~memstrata.memory.curator.Curator`; failures are logged.
        """
        from memstrata.memory.curator import Curator
        from memstrata.providers.facts.opening import open_facts

        return Curator(self.memory, config=self.config, facts=open_facts).start_background()

    def _end_current(self, reason: str) -> None:
        self.manager.on_session_end([without_api_content(m) for m in self.messages])
        if self._row_exists:
            try:
                self.store.end_session(self.session_id, reason)
            except SessionStoreError:
                logger.warning("Could not end session %s", self.session_id, exc_info=True)

    def new_session(self, *, title: str | None = None) -> str:
        """Start over in a fresh session (``/new``): memory is re-read into a new snapshot."""
        self.start()
        self._end_current("new_session")
        old = self.session_id
        self.session_id = make_session_id()
        self.title = title
        self.messages = []
        self._row_exists = False
        self._last_prompt_tokens = 0
        self.system_prompt = self.build_system_prompt(reload_memory=True)
        if title:
            self._ensure_row()
        self.manager.on_session_switch(
            self.session_id, parent_session_id=None, reset=True, reason="new"
        )
        self._point_tools_at(self.session_id)
        logger.info("Left session %s for new session %s", old, self.session_id)
        return self.session_id

    def resume(self, session_id: str) -> str:
        """Continue a stored session (its compression tip), replaying its exact prompt.

        ``session_id`` may be a unique prefix. The stored system prompt is reused
        verbatim, so the first request repeats the original prefix byte for byte.
        """
        self.start()
        target = self.store.get_compression_tip(self.store.resolve_session_id(session_id))
        if target == self.session_id:
            return target
        self._end_current("switched")
        self._load_session(target)
        self.manager.on_session_switch(target, reset=False, reason="resume")
        self._point_tools_at(target)
        return target

    def set_title(self, title: str | None) -> str | None:
        """Title the current session (None or blank clears it); returns the stored title.

        Raises :class:`~memstrata.errors.TitleConflictError` when another conversation
        holds the title.
        """
        self.start()
        self._ensure_row()
        self.title = self.store.set_session_title(self.session_id, title)
        return self.title

    def _load_session(self, session_id: str) -> None:
        session = self.store.get_session(session_id)
        if session is None:
            raise SessionStoreError(f"No session {session_id!r}; list them with /sessions.")
        if session.get("ended_at") is not None:
            self.store.reopen_session(session_id)
        self.session_id = session_id
        self.title = session.get("title")
        self.messages = [message_from_row(r) for r in self.store.get_messages(session_id)]
        self._row_exists = True
        self._last_prompt_tokens = 0
        stored = session.get("system_prompt")
        if isinstance(stored, str) and stored.strip():
            self.system_prompt = stored
        else:
            self.system_prompt = self.build_system_prompt(reload_memory=True)
            self.store.update_system_prompt(session_id, self.system_prompt)

    def _ensure_row(self) -> None:
        """Create the session row on first need (a session nobody used leaves no row)."""
        if self._row_exists:
            return
        self.store.create_session(
            self.session_id,
            source=self.source,
            model=getattr(self.client, "model", None),
            system_prompt=self.system_prompt,
            title=self.title,
        )
        self._row_exists = True

    def _point_tools_at(self, session_id: str) -> None:
        if self.search_tool is not None:
            self.search_tool.current_session_id = session_id
