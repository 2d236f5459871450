"""Import and export on the PostgreSQL store: the same public API, the same results."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

from memstrata.ops.export import all_session_ids, export_sessions
from memstrata.ops.importing import import_source
from memstrata.store.postgres import PostgresSessionStore
from memstrata.store.sqlite.store import SessionStore

pytestmark = pytest.mark.postgres

DSN = os.environ.get("MEMSTRATA_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
HERMES_HOME = Path(__file__).parent / "data" / "import" / "hermes_home"
CHATGPT = Path(__file__).parent / "data" / "import" / "chatgpt_conversations.json"


@pytest.fixture
def pg() -> Iterator[PostgresSessionStore]:
    with PostgresSessionStore(DSN, namespace=f"t-{uuid.uuid4().hex[:16]}", pool_size=2) as store:
        try:
            yield store
        finally:
            store.delete_namespace()


def _snapshot(store: Any) -> dict[str, Any]:
    """Sessions (the SQLite columns) and messages (row ids aside) keyed by session id."""
    out: dict[str, Any] = {}
    for sid in sorted(all_session_ids(store)):
        session = store.get_session(sid)
        messages = [
            {k: v for k, v in m.items() if k not in ("id", "session_id")}
            for m in store.get_messages(sid, include_inactive=True)
        ]
        out[sid] = {"session": session, "messages": messages}
    return out


def _common(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both snapshots cut to the session keys the two backends share."""
    for sid in a.keys() & b.keys():
        keys = a[sid]["session"].keys() & b[sid]["session"].keys()
        for snap in (a, b):
            snap[sid]["session"] = {k: snap[sid]["session"][k] for k in sorted(keys)}
    return a, b


def test_hermes_import_into_postgres_matches_sqlite(
    pg: PostgresSessionStore, tmp_path: Path
) -> None:
    """The Hermes fixture imports into PostgreSQL exactly as into SQLite, and only once."""
    with SessionStore(tmp_path / "state.db") as lite:
        import_source(HERMES_HOME, lite)
        expected = _snapshot(lite)
    report = import_source(HERMES_HOME, pg)
    assert report.sessions_added == 5 and report.bad == []
    got, want = _common(_snapshot(pg), expected)
    assert got == want
    again = import_source(HERMES_HOME, pg)
    assert (again.sessions_added, again.messages_added) == (0, 0)


def test_export_from_sqlite_import_into_postgres(pg: PostgresSessionStore, tmp_path: Path) -> None:
    """A SQLite export imported into PostgreSQL, exported again, gives the same sessions."""
    with SessionStore(tmp_path / "state.db") as lite:
        import_source(CHATGPT, lite)
        import_source(HERMES_HOME, lite)
        buffer = io.StringIO()
        export_sessions(lite, buffer, fmt="jsonl")
        expected = _snapshot(lite)
    path = tmp_path / "sessions.jsonl"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    report = import_source(path, pg)
    assert report.sessions_added == len(expected) and report.bad == []
    got, want = _common(_snapshot(pg), expected)
    assert got == want
