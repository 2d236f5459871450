"""`memstrata migrate`: a SQLite home copied into PostgreSQL, verified, idempotent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

psycopg = pytest.importorskip("psycopg")

from helpers import PG_DSN as DSN  # noqa: E402
from helpers import tokens_sql  # noqa: E402
from memstrata.cli import cli  # noqa: E402
from memstrata.memory.files import FileMemory  # noqa: E402
from memstrata.memory.postgres import PostgresMemory  # noqa: E402
from memstrata.ops.migrate import migrate_home  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore  # noqa: E402
from memstrata.store.postgres.schema import word_vector  # noqa: E402
from memstrata.store.sqlite.store import SessionStore  # noqa: E402

pytestmark = pytest.mark.postgres

T0 = 1_767_225_600.0


def build_home(home: Path) -> None:
    """A home with every kind of row: lineage, archives, tool calls, CJK, meta, memory."""
    with SessionStore(home / "state.db") as store:
        # The child is created before its parent is known to the copy order: started_at
        # sorts it first, so the foreign key must not depend on the order.
        store.create_session("root", source="cli", model="m1", started_at=T0, title="Deploys")
        store.append_messages(
            "root",
            [
                {"role": "system", "content": "You are helpful.", "timestamp": T0 + 1},
                {"role": "user", "content": "修改youer服务端的数据库配置", "timestamp": T0 + 2},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "terminal", "arguments": '{"cmd": "ls /etc"}'},
                        }
                    ],
                    "timestamp": T0 + 3,
                    "finish_reason": "tool_calls",
                    "reasoning": "Look at the config first.",
                },
                {
                    "role": "tool",
                    "content": "nginx.conf",
                    "tool_name": "terminal",
                    "tool_call_id": "c1",
                    "timestamp": T0 + 4,
                },
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "And the screenshot?"}],
                    "timestamp": T0 + 5,
                    "token_count": 12,
                },
            ],
        )
        store.update_token_counts("root", input_tokens=100, output_tokens=40, api_calls=2)
        store.end_session("root", "compression", ended_at=T0 + 10)
        store.create_session(
            "root-2",
            source="cli",
            parent_session_id="root",
            lineage_kind="compression",
            started_at=T0 + 11,
            title="Deploys #2",
        )
        ids = store.append_messages(
            "root-2",
            [
                {"role": "user", "content": f"turn {i} about flamingo", "timestamp": T0 + 12 + i}
                for i in range(6)
            ],
        )
        store.archive_messages("root-2", ids[:2], compacted=True)
        store.archive_messages("root-2", ids[2:3], compacted=False)
        store.create_session(
            "helper", source="subagent", parent_session_id="root-2", lineage_kind="delegate"
        )
        store.append_message("helper", "assistant", "Sub-agent result.")
        store.create_session("other", source="telegram", user_id="u7", started_at=T0 - 100)
        store.set_session_archived("other")
        store.set_meta("schema_note", "copied")
        store.set_meta("last_user", "ada")
    memory = FileMemory(home)
    memory.add("memory", "Deploys go through staging first.")
    memory.add("memory", "Project uses Python 3.12.")
    memory.add("user", "Name is Ada.")


def session_rows(store: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for entry in store.list_sessions_rich(limit=100, include_archived=True):
        for sid in entry["session_ids"]:
            out[sid] = store.get_session(sid)
    for sid in ("helper", "other"):
        out[sid] = store.get_session(sid)
    return out


def messages_of(store: Any, sid: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in m.items() if k != "id"}
        for m in store.get_messages(sid, include_inactive=True)
    ]


def token_counts(namespace: str) -> dict[str, int]:
    """How many rows of ``namespace`` hold the token counts their vectors have."""
    with psycopg.connect(DSN) as conn:
        row = conn.execute(
            f"SELECT count(*), count(*) FILTER (WHERE tsv_tokens = {tokens_sql('tsv')}), "
            f"count(*) FILTER (WHERE cjk_tokens = {tokens_sql('cjk')}), "
            f"count(*) FILTER (WHERE tsv = {word_vector()}) "
            "FROM messages WHERE namespace = %s",
            (namespace,),
        ).fetchone()
    assert row is not None
    return {"rows": row[0], "word": row[1], "cjk": row[2], "vector": row[3]}


def test_cli_copies_everything_and_verifies_counts(memstrata_home: Path, namespace: str) -> None:
    build_home(memstrata_home)
    result = CliRunner().invoke(
        cli, ["migrate", "--to", DSN, "--namespace", namespace, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert report["sessions"] == {"sqlite": 4, "postgres": 4}
    assert report["messages"] == {"sqlite": 12, "postgres": 12}
    # "other" has no messages: nothing to copy for it beyond its row.
    assert (report["sessions_copied"], report["sessions_unchanged"]) == (3, 1)
    assert report["meta_keys"] == 2
    assert report["memory"] == {"memory": "copied", "user": "copied"}

    with (
        SessionStore(memstrata_home / "state.db") as lite,
        PostgresSessionStore(DSN, namespace=namespace) as pg,
    ):
        expected = session_rows(lite)
        assert session_rows(pg) == expected
        assert expected["root-2"]["parent_session_id"] == "root"
        assert expected["root"]["input_tokens"] == 100 and expected["other"]["archived"] == 1
        for sid in expected:
            assert messages_of(pg, sid) == messages_of(lite, sid), sid
        assert pg.get_meta("last_user") == "ada"
        assert pg.get_compression_tip("root") == "root-2"
        assert pg.get_lineage_ids("helper") == lite.get_lineage_ids("helper")
        assert pg.resolve_session_by_title("Deploys #2") == "root-2"
        # The copied rows are indexed: words, CJK bigrams, compacted rows, tool names.
        assert [h["session_id"] for h in pg.search_messages("数据")] == ["root"]
        assert {h["session_id"] for h in pg.search_messages("youer")} == {"root"}
        flamingo = pg.search_messages("flamingo", limit=20)
        assert len(flamingo) == 5  # the rewound row stays hidden
    # Each copied row carries its word vector and lengths in tokens, as the store writes them.
    assert token_counts(namespace) == {"rows": 12, "word": 12, "cjk": 1, "vector": 12}
    with PostgresMemory(DSN, namespace=namespace) as pg_memory:
        files = FileMemory(memstrata_home)
        assert pg_memory.entries("memory") == files.entries("memory")
        assert pg_memory.entries("user") == ["Name is Ada."]
        assert pg_memory.snapshot() == files.snapshot()


def test_rerun_is_idempotent_and_picks_up_changes(memstrata_home: Path, namespace: str) -> None:
    build_home(memstrata_home)
    first = migrate_home(DSN, namespace=namespace, home=memstrata_home)
    with PostgresSessionStore(DSN, namespace=namespace) as pg:
        ids_before = [m["id"] for m in pg.get_messages("root", include_inactive=True)]
    again = migrate_home(DSN, namespace=namespace, home=memstrata_home)
    assert again.ok and (again.sessions_copied, again.sessions_unchanged) == (0, 4)
    assert again.memory == {"memory": "unchanged", "user": "unchanged"}
    assert (again.postgres_sessions, again.postgres_messages) == (
        first.postgres_sessions,
        first.postgres_messages,
    )
    with PostgresSessionStore(DSN, namespace=namespace) as pg:
        assert [m["id"] for m in pg.get_messages("root", include_inactive=True)] == ids_before

    with SessionStore(memstrata_home / "state.db") as lite:
        lite.append_message("other", "user", "a late message")
        lite.archive_messages("root", None, compacted=True)
    steps: list[tuple[str, int, int]] = []
    third = migrate_home(
        DSN, namespace=namespace, home=memstrata_home, progress=lambda *a: steps.append(a)
    )
    assert third.ok and third.sessions_copied == 2 and third.postgres_messages == 13
    assert steps[0] == ("messages", 0, 13) and steps[-1] == ("messages", 13, 13)
    with (
        SessionStore(memstrata_home / "state.db") as lite,
        PostgresSessionStore(DSN, namespace=namespace) as pg,
    ):
        assert messages_of(pg, "root") == messages_of(lite, "root")
        assert pg.get_messages("root") == []  # every row archived, as in SQLite


def test_memory_already_in_postgres_is_kept_unless_overwritten(
    memstrata_home: Path, namespace: str
) -> None:
    build_home(memstrata_home)
    with PostgresMemory(DSN, namespace=namespace) as pg_memory:
        pg_memory.add("user", "Written on another machine.")
    result = CliRunner().invoke(cli, ["migrate", "--to", DSN, "--namespace", namespace])
    assert result.exit_code == 0, result.output
    assert "--overwrite-memory" in result.output
    assert "Verified" in result.output
    with PostgresMemory(DSN, namespace=namespace) as pg_memory:
        assert pg_memory.entries("user") == ["Written on another machine."]
    forced = migrate_home(DSN, namespace=namespace, home=memstrata_home, overwrite_memory=True)
    assert forced.memory["user"] == "copied"
    with PostgresMemory(DSN, namespace=namespace) as pg_memory:
        assert pg_memory.entries("user") == ["Name is Ada."]
        # The overwrite is in the rows' history, and undoing it brings the rows back.
        change = pg_memory.history.list(target="user", limit=1)[0]
        assert (change.who, change.action) == ("migrate", "migrate")
        assert "replacing the rows" in change.why
        pg_memory.undo(change.id)
        assert pg_memory.entries("user") == ["Written on another machine."]


def test_a_home_without_a_database_copies_memory_only(memstrata_home: Path, namespace: str) -> None:
    FileMemory(memstrata_home).add("user", "Only memory here.")
    report = migrate_home(DSN, namespace=namespace, home=memstrata_home)
    assert report.ok and report.sqlite_sessions == 0
    assert report.memory == {"memory": "absent", "user": "copied"}
    with PostgresMemory(DSN, namespace=namespace) as pg_memory:
        [change] = pg_memory.history.list()
        assert change.before is None and change.after == b"Only memory here."
        assert change.why == "copied from USER.md"
    assert "does not exist" in report.warnings[0]


def test_bad_target_fails_with_a_clear_error(memstrata_home: Path) -> None:
    build_home(memstrata_home)
    result = CliRunner().invoke(cli, ["migrate", "--to", DSN, "--namespace", "bad name!"])
    assert result.exit_code != 0
    assert "Invalid namespace" in str(result.exception) + result.output


def test_a_title_taken_in_the_namespace_is_a_clear_conflict(
    memstrata_home: Path, namespace: str
) -> None:
    build_home(memstrata_home)
    with PostgresSessionStore(DSN, namespace=namespace) as pg:
        pg.create_session("elsewhere", title="Deploys")
    result = CliRunner().invoke(cli, ["migrate", "--to", DSN, "--namespace", namespace])
    assert result.exit_code != 0
    message = str(result.exception)
    assert "already used by another session" in message and "--namespace" in message
    with PostgresSessionStore(DSN, namespace=namespace) as pg:
        assert pg.get_session("root") is None  # nothing half-copied


def test_facts_db_moves_to_the_namespace_with_history_and_reruns_leave_it(
    memstrata_home: Path, namespace: str
) -> None:
    """facts.db is copied through the facts stores' API: statuses, slots, supersession
    links, history and vectors; a re-run finds them unchanged, and differing facts in the
    namespace are kept with a warning."""
    from memstrata.providers.facts.postgres import PostgresFactStore
    from memstrata.providers.facts.store import FactStore
    from memstrata.testing.facts_contract import Concepts

    with FactStore(memstrata_home / "facts.db", embedder=Concepts()) as lite:
        old = lite.upsert_slot("editor", "vim")
        lite.upsert_slot("editor", "helix")
        lite.add("我们决定用 PostgreSQL 做账单服务", category="episodic")
        gone = lite.add("bread is in the oven")
        lite.forget(gone.id)
        lite.index_vectors()
        expected = [(f.content, f.status, f.created_at) for f in lite.list(status=None)]
        history = [(c.action, c.at) for c in lite.history()]
    result = CliRunner().invoke(
        cli, ["migrate", "--to", DSN, "--namespace", namespace, "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["facts"] == {"state": "copied", "sqlite": 4, "postgres": 4}
    with PostgresFactStore(DSN, namespace=namespace) as pg:
        assert [(f.content, f.status, f.created_at) for f in pg.list(status=None)] == expected
        assert [(c.action, c.at) for c in pg.history()] == history
        assert [f.value for f in pg.slots()] == ["helix"]
        assert pg.pending_vectors(Concepts()) == 0  # the vector came along
        assert [f.content for f in pg.search("账单")] == ["我们决定用 PostgreSQL 做账单服务"]
        superseded = pg.list(status="superseded")
        assert superseded[0].content == old.content
        assert pg.get(superseded[0].superseded_by or 0).value == "helix"
    again = migrate_home(DSN, namespace=namespace, home=memstrata_home)
    assert again.ok and again.facts == "unchanged" and again.postgres_facts == 4
    with FactStore(memstrata_home / "facts.db") as lite:
        lite.add("a fact written after the copy")
    third = migrate_home(DSN, namespace=namespace, home=memstrata_home)
    assert third.facts == "kept" and third.postgres_facts == 4
    assert any("facts.db differs" in w for w in third.warnings)
