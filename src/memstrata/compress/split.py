"""Committing a compaction to the session store: split the session, or compact in place.

**Split** (the default, the seed's design): the old session ends with
``end_reason='compression'``; a child session starts with ``parent_session_id`` set and
``lineage_kind='compression'``, titled ``"X #2"`` after its parent's ``"X"``
(:meth:`~memstrata.store.sqlite.store.SessionStore.get_next_title_in_lineage`), and receives the
compressed conversation. The parent keeps every original row, searchable as before;
``get_compression_tip`` and ``list_sessions_rich`` lead to the child.

**In place** (``compression.in_place = true``): one session id; the live rows are
archived (``active=0, compacted=1``, still found by search) and the compressed
conversation becomes the live rows, in one transaction.

Either way the store changes in one transaction, so a failure leaves the parent live
and untouched; only then are the hooks told: memory providers get
``on_session_switch(new_id, parent_session_id=old, reset=False, reason="compression")``
and a context engine ``on_session_start(new_id, boundary_reason="compression",
parent_session_id=old)``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from memstrata.compress.compressor import CompressionResult, ContextCompressor
from memstrata.errors import SessionNotFoundError, SessionStoreError
from memstrata.store.codec import check_message_keys
from memstrata.store.contract import SessionStoreContract

logger = logging.getLogger(__name__)

END_REASON = "compression"
# Keys of a stored row that are bookkeeping, not part of a message.
_ROW_KEYS = frozenset({"id", "session_id", "active", "compacted"})


@runtime_checkable
class SessionSwitchListener(Protocol):
    """What :func:`split_session` tells about the move (``MemoryManager`` is one)."""

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str | None = None,
        reset: bool = False,
        reason: str = "",
    ) -> None:
        """The agent continues in ``new_session_id``."""


@runtime_checkable
class CompactionListener(SessionSwitchListener, Protocol):
    """A switch listener that also contributes text before compression (``MemoryManager``)."""

    def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """Text the providers want kept; it is fed to the summary model as source material."""
        ...


@runtime_checkable
class ContextEngine(Protocol):
    """A context engine that keeps its own lineage graph of session boundaries."""

    def on_session_start(
        self, session_id: str, *, boundary_reason: str, parent_session_id: str | None
    ) -> None:
        """A session starts; ``boundary_reason`` says why (here ``"compression"``)."""


def make_session_id(now: float | None = None) -> str:
    """A fresh id in the ``YYYYMMDD_HHMMSS_<6 hex>`` form sessions use."""
    moment = datetime.fromtimestamp(time.time() if now is None else now)
    return f"{moment:%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def stored_rows(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], str | None]:
    """The messages as store rows, and the text of their leading system message(s).

    The system prompt lives on the session row (``sessions.system_prompt``), not among
    the messages; row bookkeeping keys (``id``, ``active``, ...) and in-memory markers
    (keys starting with ``_``) are left out. Any other unknown key is refused here,
    before anything is written.
    """
    start = 0
    system: list[str] = []
    while start < len(messages) and messages[start].get("role") == "system":
        content = messages[start].get("content")
        system.append(content if isinstance(content, str) else str(content or ""))
        start += 1
    rows: list[dict[str, Any]] = []
    for index, message in enumerate(messages[start:], start=start):
        row = {k: v for k, v in message.items() if k not in _ROW_KEYS and not k.startswith("_")}
        check_message_keys(row, index)
        rows.append(row)
    return rows, ("\n\n".join(system) if system else None)


def _notify(
    new_id: str,
    parent_id: str,
    manager: SessionSwitchListener | None,
    context_engine: ContextEngine | None,
) -> None:
    if manager is not None:
        manager.on_session_switch(
            new_id, parent_session_id=parent_id, reset=False, reason=END_REASON
        )
    if context_engine is not None:
        try:
            context_engine.on_session_start(
                new_id, boundary_reason=END_REASON, parent_session_id=parent_id
            )
        except Exception:
            # The store is already committed; a broken engine must not undo the compaction.
            logger.exception("Context engine failed in on_session_start for %s", new_id)


def split_session(
    store: SessionStoreContract,
    old_session_id: str,
    compressed_messages: Sequence[Mapping[str, Any]],
    *,
    manager: SessionSwitchListener | None = None,
    context_engine: ContextEngine | None = None,
    in_place: bool = False,
    new_session_id: str | None = None,
    system_prompt: str | None = None,
) -> str:
    """Commit a compaction of ``old_session_id``; return the session to continue in.

    Append every turn to the old session before calling this: its rows are what search
    finds later. ``compressed_messages`` is the compressor's output; a leading system
    message becomes the child's ``system_prompt`` unless ``system_prompt`` is given
    (otherwise the parent's is carried over).

    Raises :class:`~memstrata.errors.SessionNotFoundError` for an unknown session and
    :class:`~memstrata.errors.SessionStoreError` when the session already ended (another
    process compacted it first: continue at ``store.get_compression_tip(old_session_id)``)
    or a message is malformed. On any error the store is left as it was.
    """
    rows, leading_system = stored_rows(compressed_messages)
    prompt = system_prompt if system_prompt is not None else leading_system
    parent = store.get_session(old_session_id)
    if parent is None:
        raise SessionNotFoundError(
            f"No session {old_session_id!r} to compress: append its turns to the store first."
        )
    if in_place:
        with store.write():
            store.archive_and_compact(old_session_id, rows)
            if prompt is not None:
                store.update_system_prompt(old_session_id, prompt)
        _notify(old_session_id, old_session_id, manager, context_engine)
        return old_session_id

    child = new_session_id or make_session_id()
    now = time.time()
    # One transaction: a failure part-way leaves no half-made child behind.
    with store.write():
        _commit_split(store, parent, child, rows, prompt, now)
    _notify(child, old_session_id, manager, context_engine)
    return child


def _commit_split(
    store: SessionStoreContract,
    parent: Mapping[str, Any],
    child: str,
    rows: Sequence[Mapping[str, Any]],
    system_prompt: str | None,
    now: float,
) -> None:
    old = str(parent["id"])
    if store.get_session(child) is not None:
        raise SessionStoreError(
            f"Session {child!r} already exists; pass a fresh new_session_id (or none)."
        )
    # Inside the write transaction the check and the end cannot race: a second
    # compactor finds the parent ended and stops instead of creating a sibling.
    if not store.end_session(old, END_REASON, ended_at=now):
        current = store.get_session(old)
        reason = current["end_reason"] if current else None
        raise SessionStoreError(
            f"Session {old!r} already ended ({reason}); it cannot be "
            f"split again. Continue at store.get_compression_tip({old!r})."
        )
    store.create_session(
        child,
        source=str(parent.get("source") or "cli"),
        user_id=parent.get("user_id"),
        model=parent.get("model"),
        model_config=parent.get("model_config"),
        system_prompt=system_prompt if system_prompt is not None else parent.get("system_prompt"),
        parent_session_id=old,
        lineage_kind=END_REASON,
        started_at=now,
    )
    title = parent.get("title")
    if title:
        store.set_session_title(child, store.get_next_title_in_lineage(str(title)))
    store.append_messages(child, rows)


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_session` did: the compressor's result and where to continue."""

    result: CompressionResult
    session_id: str
    parent_session_id: str | None = None

    @property
    def split(self) -> bool:
        """True when a child session was created."""
        return self.parent_session_id is not None and self.parent_session_id != self.session_id


def compact_session(
    store: SessionStoreContract,
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    compressor: ContextCompressor,
    *,
    manager: CompactionListener | None = None,
    context_engine: ContextEngine | None = None,
    in_place: bool | None = None,
    focus_topic: str | None = None,
    force: bool = False,
) -> Compaction:
    """The whole compaction step of the lifecycle, in the seed's order.

    ``manager.on_pre_compress(messages)`` gives the providers' text to keep, the
    compressor summarises, and when it changed the conversation the result is committed
    with :func:`split_session` (``in_place`` defaults to ``compression.in_place``). An
    aborted or ineffective compression leaves the session untouched.
    """
    provider_context = ""
    if manager is not None:
        provider_context = manager.on_pre_compress(messages) or ""
    result = compressor.compress(
        messages, focus_topic=focus_topic, provider_context=provider_context, force=force
    )
    if not result.compressed:
        return Compaction(result, session_id)
    place = compressor.settings.in_place if in_place is None else in_place
    live = split_session(
        store,
        session_id,
        result.messages,
        manager=manager,
        context_engine=context_engine,
        in_place=place,
    )
    return Compaction(result, live, session_id)
