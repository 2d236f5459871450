"""L1.5 memory providers: the :class:`MemoryProvider` contract and the call adapter.

A provider adds memory beyond the two curated files: a fact store, a knowledge graph, a
hosted memory service. The :class:`~memstrata.providers.manager.MemoryManager` drives every
provider through the same lifecycle (see ``docs/providers.md``):

    initialize → system_prompt_block (once per session)
    per turn:   on_turn_start → prefetch → [model, tools] → sync_turn → queue_prefetch
    as needed:  handle_tool_call, on_memory_write, on_pre_compress, on_delegation,
                on_session_switch
    at the end: on_session_end → shutdown

A provider implements four things (``name``, :meth:`~MemoryProvider.is_available`,
:meth:`~MemoryProvider.initialize`, :meth:`~MemoryProvider.get_tool_schemas`); every other
hook has a no-op default and typed keyword arguments.

``name`` is a **class attribute**, so discovery and ``memstrata plugins list`` can show a
provider without constructing it. Providers written for Hermes Agent, which declare
``name`` as a property and take ``**kwargs`` "that may include" things, still work:
:class:`ProviderCalls` reads each hook's signature once, at registration, and adapts
every call (see :meth:`ProviderCalls.for_provider`).
"""

from __future__ import annotations

import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

from memstrata.errors import ProviderError, ToolArgumentError

logger = logging.getLogger(__name__)

BUILTIN_PROVIDER_NAME: Final = "builtin"

# One tool of a provider: the call's arguments in, a JSON-able result out.
ToolHandler = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class MemoryWriteMetadata:
    """Provenance of one curated-memory write, handed to ``on_memory_write``.

    ``origin`` says who wrote: ``"tool"`` (the model's memory tool), ``"cli"`` (a person
    at the command line) or ``"curator"`` (the background curator). A batch arrives as
    one call per operation, numbered by ``batch_index`` out of ``batch_size``.

    It also reads like the dict Hermes Agent passes (``metadata.get("origin")``), so
    providers ported from Hermes keep working.
    """

    origin: str = "tool"
    old_text: str | None = None
    session_id: str | None = None
    batch_index: int | None = None
    batch_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return asdict(self)

    def get(self, key: str, default: Any = None) -> Any:
        """Dict-style access for providers that expect a mapping."""
        return getattr(self, key, default) if key in self.__dataclass_fields__ else default

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.__dataclass_fields__

    def keys(self) -> Iterator[str]:
        """The field names, as ``dict.keys`` would give them."""
        return iter(self.__dataclass_fields__)


class MemoryProvider(ABC):
    """Base class of every memory provider.

    Subclasses set ``name`` (a short lowercase identifier, e.g. ``"facts"``) and
    implement :meth:`is_available`, :meth:`initialize` and :meth:`get_tool_schemas`.
    Optional hooks are no-ops; override the ones the backend needs. Hooks may raise:
    the manager logs the error and carries on, so a failing provider never breaks a turn.

    Capabilities are class attributes:

    * ``description`` — one line shown by ``memstrata plugins list``;
    * ``prefetch_timeout`` — seconds the manager waits for :meth:`prefetch` each turn
      (``None``: the manager's ``external_prefetch_timeout``, 8 s by default).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    prefetch_timeout: ClassVar[float | None] = None

    # -- required ---------------------------------------------------------------------

    @abstractmethod
    def is_available(self) -> bool:
        """True if the provider can run here (packages installed, keys present).

        Must not touch the network: it is called by ``memstrata plugins list``.
        """

    @abstractmethod
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
        """Prepare for a session. ``home`` is the memstrata home folder.

        ``agent_context`` is ``"primary"`` for the main agent and ``"subagent"`` for a
        delegated one; ``extra`` carries caller-specific context (chat ids, callbacks).
        """

    @abstractmethod
    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """Function-tool definitions this provider handles (OpenAI format or bare).

        Return ``[]`` for a provider that only recalls and syncs.
        """

    # -- optional, per session --------------------------------------------------------

    def system_prompt_block(self) -> str:
        """Static text for the system prompt, built once per session (``""``: none)."""
        return ""

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files; called once, after the last hook."""

    def get_config_schema(self) -> list[dict[str, Any]]:
        """Settings the provider asks for at setup: ``[{"key", "description", ...}]``."""
        return []

    def save_config(self, values: Mapping[str, Any], home: Path) -> None:  # noqa: B027
        """Persist settings collected by a setup wizard under ``home``."""

    # -- optional, per turn -----------------------------------------------------------

    def prefetch(self, query: str, *, session_id: str) -> str:
        """Recall text relevant to ``query`` for this turn (``""``: nothing).

        Should answer quickly, ideally from what :meth:`queue_prefetch` warmed up; the
        manager waits at most ``prefetch_timeout`` seconds and fences the result.
        """
        return ""

    def queue_prefetch(self, query: str, *, session_id: str) -> None:  # noqa: B027
        """Warm up recall for the next turn; runs on the manager's background worker."""

    def sync_turn(  # noqa: B027 - optional hook
        self,
        user: str,
        assistant: str,
        *,
        session_id: str,
        messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Persist a finished turn; runs on the background worker, turns in order."""

    def handle_tool_call(self, name: str, args: Mapping[str, Any]) -> str | dict[str, Any]:
        """Run one of this provider's tools; return a JSON string or a JSON-able dict."""
        raise ProviderError(
            f"Memory provider {self.name!r} offers tool {name!r} but does not implement "
            "handle_tool_call; implement it or stop listing the tool in get_tool_schemas."
        )

    def _dispatch_tool(
        self, handlers: Mapping[str, ToolHandler], name: str, args: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Run ``handlers[name](args)`` for :meth:`handle_tool_call`.

        Errors raise (an unknown tool is a :class:`ToolArgumentError`); the toolbox the
        provider's tools are registered in turns them into the model's text.
        """
        handler = handlers.get(name)
        if handler is None:
            known = ", ".join(handlers)
            raise ToolArgumentError(f"Unknown tool '{name}'. The {self.name} tools are: {known}.")
        return handler(args)

    # -- optional hooks ---------------------------------------------------------------

    def on_turn_start(self, turn_number: int, message: str) -> None:  # noqa: B027
        """A user turn begins (``turn_number`` counts from 1 within the session)."""

    def on_session_end(self, messages: Sequence[Mapping[str, Any]]) -> None:  # noqa: B027
        """The session ends; ``messages`` is its whole transcript."""

    def on_session_switch(  # noqa: B027 - optional hook
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None,
        reset: bool,
        reason: str,
    ) -> None:
        """The agent moved to another session (``reason``: "compression", "new", ...).

        ``reset`` is true when the conversation starts over (``/new``) and false when
        it continues under a new id (compression split).
        """

    def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """Text to keep through compression; it is fed into the summary prompt."""
        return ""

    def on_delegation(  # noqa: B027 - optional hook
        self, task: str, result: str, *, child_session_id: str
    ) -> None:
        """A delegated sub-agent finished ``task`` with ``result``."""

    def on_memory_write(  # noqa: B027 - optional hook
        self,
        action: str,
        target: str,
        content: str,
        *,
        metadata: MemoryWriteMetadata | None = None,
    ) -> None:
        """Curated memory changed (``action``: add, replace or remove; ``target``:
        memory or user). Use it to mirror the built-in files into the backend."""


# ---------------------------------------------------------------------------------------
# Calling providers written against other signatures


@dataclass(frozen=True)
class _Signature:
    """What one hook accepts: keyword names, ``**kwargs``, positional capacity."""

    keywords: frozenset[str]
    var_keyword: bool
    positional: int  # how many arguments can be passed positionally
    var_positional: bool

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> _Signature:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # a builtin or C callable: assume the widest form
            return cls(frozenset(), True, 99, True)
        keywords = frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        return cls(
            keywords=keywords,
            var_keyword=any(p.kind is p.VAR_KEYWORD for p in params),
            positional=positional,
            var_positional=any(p.kind is p.VAR_POSITIONAL for p in params),
        )

    def accepts(self, name: str) -> bool:
        return self.var_keyword or name in self.keywords

    def keep(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments this hook can take."""
        if self.var_keyword:
            return dict(kwargs)
        return {k: v for k, v in kwargs.items() if k in self.keywords}


_HOOKS: Final = (
    "initialize",
    "prefetch",
    "queue_prefetch",
    "sync_turn",
    "on_session_switch",
    "on_delegation",
    "on_memory_write",
)
_REQUIRED: Final = ("is_available", "initialize", "get_tool_schemas")


def provider_name(provider: object) -> str:
    """The provider's name, whether a class attribute or a property; "" if it has none."""
    try:
        value = provider.name  # type: ignore[attr-defined]
    except Exception:  # a property that raises is a missing name
        return ""
    return value if isinstance(value, str) else ""


class ProviderCalls:
    """Calls one provider's hooks the way its signatures allow.

    Built once per provider at registration. Native providers get exactly the typed
    arguments of :class:`MemoryProvider`. Providers written against Hermes Agent's hook
    signatures are adapted:

    * a hook gets only the keywords it declares, unless it takes ``**kwargs``;
    * ``initialize`` that does not declare ``home`` also receives ``hermes_home``
      (the same folder), as Hermes providers read that name;
    * ``on_memory_write(action, target, content)`` (legacy, three arguments) gets no
      metadata; a fourth positional parameter gets it positionally;
    * ``sync_turn`` without ``messages`` (or without ``session_id``) is called without it;
    * ``on_session_switch`` without a ``reason`` parameter receives ``rewound=False``;
    * missing optional hooks on a duck-typed provider (not a subclass) are skipped.
    """

    def __init__(self, provider: object) -> None:
        self.provider = provider
        self.name = provider_name(provider)
        self._signatures: dict[str, _Signature] = {}
        for hook in _HOOKS:
            fn = getattr(provider, hook, None)
            if callable(fn):
                self._signatures[hook] = _Signature.of(fn)

    @classmethod
    def for_provider(cls, provider: object) -> ProviderCalls:
        """Check that ``provider`` looks like a provider and build its adapter."""
        name = provider_name(provider)
        if not name:
            raise ProviderError(
                f"{type(provider).__name__} has no name. Set a class attribute, e.g. "
                f'name = "{type(provider).__name__.lower()}".'
            )
        missing = [m for m in _REQUIRED if not callable(getattr(provider, m, None))]
        if missing:
            raise ProviderError(
                f"Memory provider {name!r} lacks {', '.join(missing)}. Subclass "
                "memstrata.MemoryProvider and implement its abstract methods."
            )
        return cls(provider)

    def _hook(self, hook: str) -> Callable[..., Any] | None:
        fn = getattr(self.provider, hook, None)
        return fn if callable(fn) else None

    def call(self, hook: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``hook`` with the keyword arguments it accepts; None if it is absent."""
        fn = self._hook(hook)
        if fn is None:
            return None
        signature = self._signatures.get(hook)
        return fn(*args, **(signature.keep(kwargs) if signature else kwargs))

    def _declares(self, hook: str, name: str) -> bool:
        signature = self._signatures.get(hook)
        return signature is not None and name in signature.keywords

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        """``initialize``; a hook that does not declare ``home`` also gets ``hermes_home``."""
        if "home" in kwargs and not self._declares("initialize", "home"):
            kwargs.setdefault("hermes_home", kwargs["home"])
        self.call("initialize", session_id, **kwargs)

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        """``on_session_switch``; a Hermes-style hook (no ``reason``) gets ``rewound=False``."""
        if not self._declares("on_session_switch", "reason"):
            kwargs.setdefault("rewound", False)
        self.call("on_session_switch", new_session_id, **kwargs)

    def on_memory_write(
        self, action: str, target: str, content: str, metadata: MemoryWriteMetadata
    ) -> None:
        """``on_memory_write`` in keyword, positional or legacy three-argument form."""
        fn = self._hook("on_memory_write")
        if fn is None:
            return
        signature = self._signatures["on_memory_write"]
        if signature.accepts("metadata"):
            fn(action, target, content, metadata=metadata)
        elif signature.var_positional or signature.positional >= 4:
            fn(action, target, content, metadata)
        else:
            fn(action, target, content)
