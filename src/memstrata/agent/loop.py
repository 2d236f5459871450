"""The reference agent loop: every layer wired in the order of the memory lifecycle.

::

    Agent(client, store,       MemoryManager (built-in provider first, then memory.provider);
          manager, settings)   Agent.from_config() builds the parts from config.toml
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

The session lifecycle (start, new_session, resume, set_title, close) lives in
:mod:`memstrata.agent.session`; this module adds the turn and compression on top.

The system prompt never changes within a session: memory writes land on disk and in the
tool response, and show in the prompt of the next session (or after a compression).
Per-turn recall goes only into the user message's API copy, whose exact bytes are stored
as ``api_content``; so every request starts with the previous request byte for byte, and
a resumed session replays the same prefix.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, Self

from memstrata.agent.session import SessionLifecycle
from memstrata.agent.settings import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOOL_ITERATIONS,
    SETTING_NAMES,
    AgentSettings,
)
from memstrata.agent.turn import (
    Pricing,
    TextSink,
    TurnResult,
    api_message,
    assistant_message,
    call_model,
    open_tool_calls,
    refit_api_content,
    tool_message,
    user_api_content,
    without_api_content,
)
from memstrata.compress.compressor import CompressionResult, ContextCompressor, estimate_tokens
from memstrata.compress.split import Compaction, make_session_id, split_session
from memstrata.config import Config
from memstrata.errors import SessionStoreError
from memstrata.llm.arguments import error_response
from memstrata.llm.types import Completion, LLMClient, TokenUsage, ToolCall
from memstrata.prompt.builder import PromptBuilder, PromptContext
from memstrata.prompt.fencing import StreamingContextScrubber, build_memory_context_block
from memstrata.providers.manager import MemoryManager
from memstrata.store.contract import SessionStoreContract
from memstrata.tools.remember import RememberTool
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox

logger = logging.getLogger(__name__)

TOOL_LIMIT_RESULT: Final = (
    "Not run: the limit of {limit} tool rounds for one user turn was reached. Do not call "
    "more tools now; answer the user with what you have and say what is left to do."
)
INTERRUPTED_RESULT: Final = "Not run: the turn was interrupted before this tool call ran."
TOOL_LIMIT_NOTE: Final = "[Stopped: the model kept calling tools past the limit of {limit} rounds.]"


class Agent(SessionLifecycle):
    """A chat agent with layered memory over any OpenAI-compatible model.

    Example::

        from memstrata import Agent, AgentSettings

        # The parts from config.toml (model, store, memory.provider):
        with Agent.from_config(settings=AgentSettings(title="Units")) as agent:
            print(agent.run_turn("Hi, I'm Ada and I prefer metric units.").text)

        # Or the parts given, as tests and embedding applications do:
        agent = Agent(client, store, manager, settings=AgentSettings(stream=False))

    Args:
        client: the chat model.
        store: the session store (any backend of the store contract); the caller
            closes it (:meth:`from_config` hands an agent the store it opened).
        manager: the memory manager; its memory and config are the agent's.
        settings: the session to open, the prompt's context and the turn's limits
            (see :class:`~memstrata.agent.settings.AgentSettings`).
        toolbox: extra tools. The ``memory`` tool and provider tools are registered into
            it from the manager; ``session_search`` and ``remember`` are added when missing.
        prompt_builder: the system-prompt tiers (default :class:`PromptBuilder`).
        compressor: context compression (default: a :class:`ContextCompressor` over the
            ``[compression]`` settings and ``settings.context_window``).

    0.1's keyword arguments (``config=``, ``title=``, ``stream=``, ...) and leaving a part
    out still work, with a :class:`DeprecationWarning` naming the replacement.
    """

    def __init__(
        self,
        client: LLMClient | None = None,
        store: SessionStoreContract | None = None,
        manager: MemoryManager | None = None,
        settings: AgentSettings | None = None,
        *,
        toolbox: Toolbox | None = None,
        prompt_builder: PromptBuilder | None = None,
        compressor: ContextCompressor | None = None,
        **deprecated: Any,
    ) -> None:
        config, settings = _legacy_arguments(
            deprecated, settings, missing=[client is None, store is None, manager is None]
        )
        if config is None:
            config = manager.config if manager is not None else Config.load()
        client, store, manager, self._owns_store = _open_parts(config, client, store, manager)
        self._setup(client, store, manager, settings, config, toolbox, prompt_builder, compressor)

    @classmethod
    def from_config(
        cls,
        config: Config | None = None,
        *,
        client: LLMClient | None = None,
        store: SessionStoreContract | None = None,
        manager: MemoryManager | None = None,
        settings: AgentSettings | None = None,
        toolbox: Toolbox | None = None,
        prompt_builder: PromptBuilder | None = None,
        compressor: ContextCompressor | None = None,
    ) -> Self:
        """An agent whose missing parts come from ``config`` (default :meth:`Config.load`):
        the ``main`` model (:func:`~memstrata.llm.settings.client_for`), the session store
        of the home (closed with the agent) and :meth:`MemoryManager.from_config`."""
        config = config if config is not None else Config.load()
        client, store, manager, owns_store = _open_parts(config, client, store, manager)
        agent = cls.__new__(cls)
        agent._owns_store = owns_store
        try:
            agent._setup(
                client,
                store,
                manager,
                settings or AgentSettings(),
                config,
                toolbox,
                prompt_builder,
                compressor,
            )
        except BaseException:
            if owns_store:
                store.close()
            raise
        return agent

    def _setup(
        self,
        client: LLMClient,
        store: SessionStoreContract,
        manager: MemoryManager,
        settings: AgentSettings,
        config: Config,
        toolbox: Toolbox | None,
        prompt_builder: PromptBuilder | None,
        compressor: ContextCompressor | None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.client = client
        self.store = store
        self.manager = manager
        self.memory = manager.memory
        self.toolbox = toolbox if toolbox is not None else Toolbox()
        # The memory tool and the providers' tools run in the same toolbox as the rest,
        # so one edge turns every tool error into the model's text.
        self.toolbox.register_provider_tools(manager)
        self.search_tool = None
        if "session_search" not in self.toolbox:
            self.search_tool = SessionSearchTool(store=store, config=config)
            self.toolbox.register_tool(self.search_tool)
        if "remember" not in self.toolbox:
            # Episodic facts: stored in facts.db, recalled by the built-in prefetch.
            self.toolbox.register_tool(RememberTool(config=config))
        self.prompt_builder = prompt_builder if prompt_builder is not None else PromptBuilder()
        self.context_window = settings.context_window
        self.compressor = (
            compressor
            if compressor is not None
            else ContextCompressor(config=config, context_window=self.context_window)
        )
        self.system_message = settings.system_message
        self.title = settings.title
        self.source = settings.source
        self.platform = settings.platform
        self.cwd = settings.cwd
        self.context_files = list(settings.context_files) if settings.context_files else None
        self.max_tool_iterations = settings.max_tool_iterations
        self.stream = settings.stream
        self.pricing = (
            settings.pricing if settings.pricing is not None else Pricing.from_config(config)
        )
        self.temperature = settings.temperature
        self.max_tokens = settings.max_tokens
        self.clock = settings.clock

        self.session_id = settings.session_id or make_session_id()
        self.system_prompt = ""
        self.messages = []
        self.usage = TokenUsage()
        """Token usage of every model call this agent made (all sessions)."""
        self.cost_usd = 0.0
        self._scrubber = StreamingContextScrubber()
        self._row_exists = False
        self._last_prompt_tokens = 0
        self._started = False
        self._closed = False

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


def _open_parts(
    config: Config,
    client: LLMClient | None,
    store: SessionStoreContract | None,
    manager: MemoryManager | None,
) -> tuple[LLMClient, SessionStoreContract, MemoryManager, bool]:
    """The parts ``config`` names for the ones not given, and True when the store was
    opened here (the agent then closes it; here too, if the manager cannot be built)."""
    if client is None:
        from memstrata.llm.settings import client_for

        client = client_for("main", config)
    owns_store = store is None
    if store is None:
        from memstrata.store.sqlite.store import SessionStore

        store = SessionStore(config=config)
    try:
        manager = manager if manager is not None else MemoryManager.from_config(config)
    except BaseException:
        if owns_store:
            store.close()
        raise
    return client, store, manager, owns_store


def _legacy_arguments(
    deprecated: dict[str, Any], settings: AgentSettings | None, *, missing: list[bool]
) -> tuple[Config | None, AgentSettings]:
    """0.1's ``Agent(config=..., title=..., ...)``: the config and the settings they meant.

    Each use warns once per call with the replacement; an unknown keyword is a TypeError,
    as it was.
    """
    unknown = sorted(set(deprecated) - SETTING_NAMES - {"config"})
    if unknown:
        raise TypeError(f"Agent() got unexpected keyword argument(s): {', '.join(unknown)}")
    config = deprecated.pop("config", None)
    if deprecated:
        names = ", ".join(f"{k}=" for k in sorted(deprecated))
        warnings.warn(
            f"Agent({names}) is deprecated: pass settings=AgentSettings({names}...) instead.",
            DeprecationWarning,
            stacklevel=3,
        )
        if "context_files" in deprecated and deprecated["context_files"] is not None:
            deprecated["context_files"] = tuple(deprecated["context_files"])
        settings = replace(settings if settings is not None else AgentSettings(), **deprecated)
    if config is not None or any(missing):
        warnings.warn(
            "Agent() building its own parts (config=, or no client, store or manager) is "
            "deprecated: use Agent.from_config(config, ...) or pass client, store and "
            "manager.",
            DeprecationWarning,
            stacklevel=3,
        )
    return config, settings if settings is not None else AgentSettings()


__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOOL_ITERATIONS",
    "Agent",
    "AgentSettings",
    "Pricing",
    "TurnResult",
]
