"""The part of the session-store contract that import and export use.

Both :class:`memstrata.store.sqlite.store.SessionStore` (SQLite) and
:class:`memstrata.store.postgres.PostgresSessionStore` satisfy it, so importing and exporting
work on either backend; only public store methods appear here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol


class ExportStore(Protocol):
    """What export reads: the listing, lineage, sessions and messages."""

    def list_sessions_rich(
        self, *, limit: int = 20, include_archived: bool = False
    ) -> list[dict[str, Any]]: ...

    def get_lineage_ids(self, session_id: str) -> list[str]: ...

    def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    def get_messages(
        self, session_id: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]: ...


class ImportStore(ExportStore, Protocol):
    """What import writes with, on top of what export reads."""

    def create_session(
        self,
        session_id: str,
        *,
        source: str = "cli",
        user_id: str | None = None,
        model: str | None = None,
        model_config: Mapping[str, Any] | str | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        lineage_kind: str | None = None,
        started_at: float | None = None,
    ) -> str: ...

    def append_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]: ...

    def archive_messages(
        self, session_id: str, ids: Iterable[int] | None = None, compacted: bool = True
    ) -> int: ...

    def set_session_title(self, session_id: str, title: str | None) -> str | None: ...

    def get_next_title_in_lineage(self, title: str) -> str: ...

    def update_token_counts(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_calls: int = 1,
    ) -> None: ...

    def end_session(
        self, session_id: str, end_reason: str, *, ended_at: float | None = None
    ) -> bool: ...

    def set_session_archived(self, session_id: str, archived: bool = True) -> None: ...
