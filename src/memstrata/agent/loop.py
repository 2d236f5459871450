"""The reference agent loop: every layer wired in the order of the memory lifecycle.

::

    Agent(...)                 MemoryManager (built-in provider first, then memory.provider)
    start()                    initialize_all(session_id, platform) -> system prompt built once
                               (identity, tool guidance, context files, frozen L1 snapshot,
                               provider blocks, date, platform hint), stored with the session
    run_turn(text)             on_turn_start -> prefetch_all -> fence into the API copy of the
                               user message only -> model call with tools (memory,
                               session_search, provider tools) and the tool loop, streamed
                               through the fence scrubber -> sync_all -> queue_prefetch_all
    (context > threshold)      on_pre_compress -> compress -> old session ends
                               ('compression') -> child session with the rebuilt prompt
                               -> on_session_switch(reason="compression")
    close()                    on_session_end(messages) -> end_session -> shutdown_all

The system prompt never changes within a session: memory writes land on disk and in the
tool response, and show in the prompt of the next session (or after a compression).
Per-turn recall goes only into the user message's API copy, whose exact bytes are stored
as ``api_content``; so every request starts with the previous request byte for byte, and
a resumed session replays the same prefix.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Self

from memstrata.agent.turn import (
    Pricing,
    TextSink,
    TurnResult,
    api_message,
    assistant_message,
    call_model,
    message_from_row,
    open_tool_calls,
    refit_api_content,
    tool_message,
    user_api_content,
    without_api_content,
)
from memstrata.closing import Closing
from memstrata.compress.compressor import CompressionResult, ContextCompressor, estimate_tokens
from memstrata.compress.split import Compaction, make_session_id, split_session
from memstrata.config import Config
from memstrata.errors import SessionStoreError
from memstrata.llm.types import Completion, LLMClient, TokenUsage, ToolCall
from memstrata.memory.core import CuratedMemory
from memstrata.prompt.builder import PromptBuilder, PromptContext
from memstrata.prompt.fencing import StreamingContextScrubber, build_memory_context_block
from memstrata.providers.manager import MemoryManager
from memstrata.store.sqlite.store import SessionStore
from memstrata.tools.remember import RememberTool
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox, error_response

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOOL_ITERATIONS: Final = 25
DEFAULT_CONTEXT_WINDOW: Final = 128_000
TOOL_LIMIT_RESULT: Final = (
    "Not run: the limit of {limit} tool rounds for one user turn was reached. Do not call "
    "more tools now; answer the user with what you have and say what is left to do."
)
INTERRUPTED_RESULT: Final = "Not run: the turn was interrupted before this tool call ran."
TOOL_LIMIT_NOTE: Final = "[Stopped: the model kept calling tools past the limit of {limit} rounds.]"


class Agent(Closing):
    """A chat agent with layered memory over any OpenAI-compatible model.

    Example::

        from memstrata import Agent

        with Agent() as agent:                      # model from config or MEMSTRATA_MODEL
            print(agent.run_turn("Hi, I'm Ada and I prefer metric units.").text)

    Args:
        client: the chat model (default ``client_for("main", config)``).
        config: settings (default :meth:`Config.load`).
        store: the session store (default ``$MEMSTRATA_HOME/state.db``; closed by
            :meth:`close` only when the agent opened it).
        manager: the memory manager (default :meth:`MemoryManager.from_config`).
        toolbox: extra tools; ``session_search`` is added when it is missing. The
            ``memory`` tool and provider tools come from the manager.
        prompt_builder: the system-prompt tiers (default :class:`PromptBuilder`).
        compressor: context compression (default: a :class:`ContextCompressor` over the
            ``[compression]`` settings and ``context_window``).
        system_message: the caller's system message (the prompt's context tier).
        session_id: resume this session if it exists, else create it with this id.
        title: the title of a new session.
        source: the session's source label (``cli``, ``api``, ...).
        platform: the platform hint of the prompt and of ``initialize_all``.
        cwd: where context files (AGENTS.md, CLAUDE.md) are looked for; None: nowhere.
        context_files: explicit context files instead of searching ``cwd``.
        context_window: the model's window in tokens (compression threshold, file caps).
        max_tool_iterations: rounds of tool calls run per user turn; past it the model
            is told to answer and gets one last call.
        stream: stream replies (text reaches ``on_text`` as it arrives).
        pricing: prices for the cost recorded with the session (None: the ``llm.*_price_per_mtok``
            settings, and no cost when those are unset).
        clock: the time source of the prompt's date line.
    """

    def __init__(
        self,
        client: LLMClient | None = None,
        *,
        config: Config | None = None,
        store: SessionStore | None = None,
        manager: MemoryManager | None = None,
        toolbox: Toolbox | None = None,
        prompt_builder: PromptBuilder | None = None,
        compressor: ContextCompressor | None = None,
        system_message: str | None = None,
        session_id: str | None = None,
        title: str | None = None,
        source: str = "cli",
        platform: str = "cli",
        cwd: Path | None = None,
        context_files: Sequence[Path] | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        max_tool_iterations: int = DEFAULT_MAX_TOOL_ITERATIONS,
        stream: bool = True,
        pricing: Pricing | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        if max_tool_iterations < 1:
            raise ValueError("max_tool_iterations must be at least 1")
        self.config = config if config is not None else Config.load()
        if client is None:
            from memstrata.llm.settings import client_for

            client = client_for("main", self.config)
        self.client = client
        self._owns_store = store is None
        self.store = store if store is not None else SessionStore(config=self.config)
        self.manager = manager if manager is not None else MemoryManager.from_config(self.config)
        self.memory: CuratedMemory = self.manager.memory
        self.toolbox = toolbox if toolbox is not None else Toolbox()
        # The memory tool and the providers' tools run in the same toolbox as the rest,
        # so one edge turns every tool error into the model's text.
        self.toolbox.register_provider_tools(self.manager)
        self.search_tool: SessionSearchTool | None = None
        if "session_search" not in self.toolbox:
            self.search_tool = SessionSearchTool(store=self.store, config=self.config)
            self.toolbox.register_tool(self.search_tool)
        if "remember" not in self.toolbox and not self.manager.has_tool("remember"):
            # Episodic facts: stored in facts.db, recalled by the built-in prefetch.
            self.toolbox.register_tool(RememberTool(config=self.config))
        self.prompt_builder = prompt_builder if prompt_builder is not None else PromptBuilder()
        self.context_window = int(context_window)
        self.compressor = (
            compressor
            if compressor is not None
            else ContextCompressor(config=self.config, context_window=self.context_window)
        )
        self.system_message = system_message
        self.title = title
        self.source = source
        self.platform = platform
        self.cwd = cwd
        self.context_files = list(context_files) if context_files is not None else None
        self.max_tool_iterations = int(max_tool_iterations)
        self.stream = stream
        self.pricing = pricing if pricing is not None else Pricing.from_config(self.config)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.clock = clock

        self.session_id: str = session_id or make_session_id()
        self.system_prompt: str = ""
        self.messages: list[dict[str, Any]] = []
        self.usage = TokenUsage()
        """Token usage of every model call this agent made (all sessions)."""
        self.cost_usd = 0.0
        self._scrubber = StreamingContextScrubber()
        self._row_exists = False
        self._last_prompt_tokens = 0
        self._started = False
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------

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

        return Curator(self.memory, config=self.config).start_background()

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

    # -- the system prompt --------------------------------------------------------------

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools offered to the model: the manager's (memory, providers), then the
        toolbox's own (session_search, extras), one definition per name."""
        return self.toolbox.schemas()

    def tool_names(self) -> list[str]:
        """Names of the tools offered to the model."""
        return [s["function"]["name"] for s in self.tool_schemas()]

    def prompt_context(self) -> PromptContext:
        """What the prompt tiers read, as of now."""
        return PromptContext(
            home=self.config.home,
            tool_names=self.tool_names(),
            system_message=self.system_message,
            cwd=self.cwd,
            context_files=self.context_files,
            memory=self.memory,
            manager=self.manager,
            platform=self.platform,
            now=self.clock(),
            context_window=self.context_window,
        )

    def build_system_prompt(self, *, reload_memory: bool = False) -> str:
        """Build the prompt from the tiers; ``reload_memory`` re-freezes the L1 snapshot
        first. The agent calls it at session start and after compression only."""
        if reload_memory:
            self.memory.load()
        return self.prompt_builder.build(self.prompt_context())

    def request_messages(self) -> list[dict[str, Any]]:
        """The messages of the next request: the system prompt, then the conversation as
        sent (user messages with their recall fence)."""
        return [
            {"role": "system", "content": self.system_prompt},
            *(api_message(m) for m in self.messages),
        ]

    # -- one turn -------------------------------------------------------------------------

    def run_turn(
        self,
        text: str,
        *,
        on_text: TextSink | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> TurnResult:
        """Answer one user message, running tools as the model asks.

        ``on_text`` receives reply text as it streams (fences already removed);
        ``on_tool_call`` is told about each tool call before it runs. Raises
        :class:`~memstrata.errors.LLMError` when the model fails; the turn's messages
        so far stay in the session, so the next turn continues from them.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("A turn needs a non-empty user message.")
        self.start()
        if self._closed:
            raise SessionStoreError("This agent is closed; create a new Agent.")
        self._ensure_row()
        self.toolbox.reset_turn()
        turn_number = 1 + sum(1 for m in self.messages if m["role"] == "user")
        self.manager.on_turn_start(turn_number, text)
        recall = self.manager.prefetch_all(text, session_id=self.session_id)
        fence = build_memory_context_block(recall)
        user: dict[str, Any] = {"role": "user", "content": text}
        api = user_api_content(text, fence)
        if api is not None:
            user["api_content"] = api
        self._append([user])

        usage = TokenUsage()
        cost: float | None = None
        calls_run: list[ToolCall] = []
        api_calls = 0
        compressed = False
        hit_limit = False
        final = ""
        try:
            rounds = 0
            while True:
                compressed = self._maybe_compress() or compressed
                completion = self._call(on_text)
                api_calls += 1
                usage = usage + completion.usage
                if self.pricing is not None:
                    cost = (cost or 0.0) + self.pricing.cost(completion.usage)
                self._append([assistant_message(completion)])
                if not completion.tool_calls:
                    final = completion.text
                    break
                rounds += 1
                if hit_limit:
                    # The grace call still asked for tools: close them and stop here.
                    self._append_tool_errors(completion.tool_calls, self._limit_text())
                    final = completion.text or TOOL_LIMIT_NOTE.format(
                        limit=self.max_tool_iterations
                    )
                    if on_text is not None and not completion.text:
                        on_text(final)
                    break
                if rounds > self.max_tool_iterations:
                    hit_limit = True
                    self._append_tool_errors(completion.tool_calls, self._limit_text())
                    continue
                calls_run.extend(completion.tool_calls)
                self._run_tools(completion.tool_calls, on_tool_call)
        finally:
            self._close_open_calls()
        self.manager.sync_all(
            text,
            final,
            session_id=self.session_id,
            messages=[without_api_content(m) for m in self.messages],
        )
        self.manager.queue_prefetch_all(text, session_id=self.session_id)
        return TurnResult(
            text=final,
            session_id=self.session_id,
            api_calls=api_calls,
            tool_calls=tuple(calls_run),
            usage=usage,
            cost_usd=cost,
            compressed=compressed,
            hit_tool_limit=hit_limit,
        )

    def _limit_text(self) -> str:
        return json.dumps(
            error_response(TOOL_LIMIT_RESULT.format(limit=self.max_tool_iterations)),
            ensure_ascii=False,
        )

    def _call(self, on_text: TextSink | None) -> Completion:
        messages = self.request_messages()
        completion = call_model(
            self.client,
            messages,
            self.tool_schemas(),
            stream=self.stream,
            scrubber=self._scrubber,
            on_text=on_text,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        self._record_usage(completion.usage)
        self._last_prompt_tokens = completion.usage.prompt_tokens
        return completion

    def _record_usage(self, usage: TokenUsage) -> None:
        self.usage = self.usage + usage
        cost = self.pricing.cost(usage) if self.pricing is not None else None
        if cost is not None:
            self.cost_usd += cost
        try:
            self.store.update_token_counts(
                self.session_id,
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                cache_read_tokens=usage.cached_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                estimated_cost_usd=cost,
            )
        except SessionStoreError:
            logger.warning("Could not record token usage for %s", self.session_id, exc_info=True)

    def _run_tools(
        self, calls: Sequence[ToolCall], on_tool_call: Callable[[ToolCall], None] | None
    ) -> None:
        results: list[dict[str, Any]] = []
        for call in calls:
            if on_tool_call is not None:
                on_tool_call(call)
            results.append(tool_message(call.id, call.name, self.dispatch_tool_call(call)))
        self._append(results)

    def dispatch_tool_call(self, call: ToolCall) -> str:
        """Run one tool call and return the model-facing JSON; never raises.

        Every tool (memory, providers', session_search, extras) runs in the toolbox;
        memory writes reach the external providers through the memory's write listener.
        """
        return self.toolbox.dispatch(call.name, call.arguments)

    def _append_tool_errors(self, calls: Sequence[ToolCall], content: str) -> None:
        self._append([tool_message(c.id, c.name, content) for c in calls])

    def _close_open_calls(self) -> None:
        """Answer tool calls left without a result (an interrupt), so the conversation
        stays valid for the next request."""
        missing = open_tool_calls(self.messages)
        if missing:
            content = json.dumps(error_response(INTERRUPTED_RESULT), ensure_ascii=False)
            self._append([tool_message(cid, name, content) for cid, name in missing])

    def _append(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Store messages in the session (one transaction), then add them to the
        conversation: what is sent is always what is stored."""
        rows = [dict(m) for m in messages]
        self.store.append_messages(self.session_id, rows)
        self.messages.extend(dict(m) for m in messages)

    # -- compression ------------------------------------------------------------------

    def context_tokens(self) -> int:
        """The size of the next request: the endpoint's last count or the estimate."""
        return max(self._last_prompt_tokens, estimate_tokens(self.request_messages()))

    def _maybe_compress(self) -> bool:
        if not self.compressor.should_compress(self.context_tokens(), self.context_window):
            return False
        return self.compress(force=False).result.compressed

    def compress(self, focus: str | None = None, *, force: bool = True) -> Compaction:
        """Compress the conversation now (``/compress [focus]``).

        The middle turns are summarised; the session splits (the old one ends with
        ``end_reason='compression'``, the child continues with a rebuilt prompt and a
        fresh memory snapshot) or, with ``compression.in_place``, is compacted in place.
        A compression that changed nothing leaves everything as it was.
        """
        self.start()
        if not self.messages:
            return Compaction(CompressionResult([], "nothing_to_do"), self.session_id)
        self._ensure_row()
        raw = [without_api_content(m) for m in self.messages]
        provider_context = self.manager.on_pre_compress(raw)
        result = self.compressor.compress(
            self.messages, focus_topic=focus, provider_context=provider_context, force=force
        )
        if not result.compressed:
            return Compaction(result, self.session_id)
        compacted = [refit_api_content(m) for m in result.messages]
        prompt = self.build_system_prompt(reload_memory=True)
        old = self.session_id
        live = split_session(
            self.store,
            old,
            compacted,
            manager=self.manager,
            in_place=self.compressor.settings.in_place,
            system_prompt=prompt,
        )
        self.session_id = live
        self.messages = compacted
        self.system_prompt = prompt
        self.title = self.store.get_session_title(live)
        self._last_prompt_tokens = 0
        self._point_tools_at(live)
        return Compaction(result, live, old)


__all__ = ["DEFAULT_MAX_TOOL_ITERATIONS", "Agent", "Pricing", "TurnResult"]
