"""What a search costs PostgreSQL in statements: each one a round trip, counted per query
class on a tenant larger than the ranking sample (so rare and common terms take their
own paths), and the shape of the statements that replaced others."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg._connection_base import BaseConnection  # noqa: E402
from psycopg._cursor_base import BaseCursor  # noqa: E402

from helpers import PG_DSN as DSN  # noqa: E402
from helpers import drop_namespace  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore  # noqa: E402

pytestmark = pytest.mark.postgres


class Statements:
    """Every statement sent to the server while installed, as its SQL text: what a
    cursor sends and what a connection sends itself (``BEGIN``, ``COMMIT``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        send, prepared, command = (
            BaseCursor._execute_send,
            BaseCursor._send_query_prepared,
            BaseConnection._exec_command,
        )

        def text(query: Any) -> str:
            raw = query if isinstance(query, (bytes, str)) else getattr(query, "query", query)
            return raw.decode() if isinstance(raw, bytes) else str(raw)

        def counted_send(cur: Any, query: Any, **kw: Any) -> Any:
            self.sent.append(text(query))
            return send(cur, query, **kw)

        def counted_prepared(cur: Any, name: Any, query: Any, **kw: Any) -> Any:
            self.sent.append(text(query))
            return prepared(cur, name, query, **kw)

        def counted_command(conn: Any, cmd: Any, *args: Any, **kw: Any) -> Any:
            self.sent.append(text(cmd))
            return (yield from command(conn, cmd, *args, **kw))

        monkeypatch.setattr(BaseCursor, "_execute_send", counted_send)
        monkeypatch.setattr(BaseCursor, "_send_query_prepared", counted_prepared)
        monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)

    def during(self, call: Any) -> list[str]:
        """The statements ``call()`` sent."""
        self.sent = []
        call()
        return list(self.sent)


@pytest.fixture
def pg() -> Iterator[PostgresSessionStore]:
    namespace = f"t-stmts-{uuid.uuid4().hex[:12]}"
    try:
        with PostgresSessionStore(DSN, namespace=namespace) as store:
            yield store
    finally:
        drop_namespace(namespace)


def test_a_snapshot_begins_in_one_statement(
    pg: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search's snapshot is ``BEGIN ISOLATION LEVEL REPEATABLE READ`` (no SET
    TRANSACTION after a plain BEGIN), and the pooled connection's next transaction is a
    plain one again."""
    pg.create_session("s")
    pg.append_messages("s", [{"role": "user", "content": "the walrus sang"}])
    spy = Statements(monkeypatch)
    sent = spy.during(lambda: pg.search_messages("walrus", limit=5))
    assert sent[0] == "BEGIN ISOLATION LEVEL REPEATABLE READ"
    assert sent[-1] == "COMMIT"
    assert not any("SET TRANSACTION" in s for s in sent)
    with pg.connection() as conn:
        row = conn.execute("SELECT current_setting('transaction_isolation') AS level").fetchone()
        assert row is not None and row["level"] == "read committed"
    with pg.connection(snapshot=True) as conn:
        row = conn.execute("SELECT current_setting('transaction_isolation') AS level").fetchone()
        assert row is not None and row["level"] == "repeatable read"
