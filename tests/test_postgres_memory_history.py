"""The audit history and undo of curated memory on PostgreSQL, and the CLI on a DSN."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from click.testing import CliRunner  # noqa: E402

from helpers import PG_DSN as DSN  # noqa: E402
from helpers import drop_namespace  # noqa: E402
from memstrata.cli import cli  # noqa: E402
from memstrata.errors import DriftError, InvalidMemoryArgument  # noqa: E402
from memstrata.memory.core import CuratedMemory  # noqa: E402
from memstrata.memory.files import FileMemory  # noqa: E402
from memstrata.memory.history import ChangeLog, MemoryChange  # noqa: E402
from memstrata.memory.postgres import PostgresMemory  # noqa: E402
from memstrata.memory.tool import MemoryTool  # noqa: E402
from memstrata.store.postgres import PostgresSessionStore  # noqa: E402

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(namespace: str) -> Iterator[PostgresMemory]:
    with PostgresMemory(DSN, namespace=namespace) as memory:
        yield memory


def _row(namespace: str, target: str = "memory") -> bytes | None:
    """The row's text as the history records it (None: no row)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        found = conn.execute(
            "SELECT content FROM curated_memory WHERE namespace = %s AND target = %s",
            (namespace, target),
        ).fetchone()
    return None if found is None else str(found[0]).encode()


def _set_raw(namespace: str, target: str, content: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO curated_memory (namespace, target, content) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, target) DO UPDATE SET content = excluded.content",
            (namespace, target, content),
        )


def test_tool_and_api_writes_are_recorded_with_exact_text(
    pg: PostgresMemory, namespace: str
) -> None:
    """add, replace and remove, by the tool and the API, each append one row with the text."""
    assert isinstance(pg, CuratedMemory) and isinstance(pg.history, ChangeLog)
    snapshots = [_row(namespace)]
    tool = MemoryTool(memory=pg)
    for call in (
        {"action": "add", "target": "memory", "content": "Repo uses uv"},
        {"action": "replace", "target": "memory", "old_text": "uv", "content": "Repo uses uv 0.5"},
        {"action": "add", "target": "memory", "content": "Tests run with pytest"},
        {"action": "remove", "target": "memory", "old_text": "uv 0.5"},
    ):
        assert tool.handle(call)["success"] is True, call
        snapshots.append(_row(namespace))
    results = [
        pg.add("memory", "CI runs on every push"),
        pg.replace("memory", "CI runs", "CI runs on every push and tag"),
        pg.remove("memory", "pytest"),
    ]
    assert pg.add("memory", "CI runs on every push and tag").change_id is None  # no change
    changes = list(reversed(pg.history.list()))
    assert [(c.who, c.action) for c in changes] == [
        ("tool", "add"),
        ("tool", "replace"),
        ("tool", "add"),
        ("tool", "remove"),
        ("api", "add"),
        ("api", "replace"),
        ("api", "remove"),
    ]
    assert [c.before for c in changes[:4]] == snapshots[:-1]
    assert [c.after for c in changes[:4]] == snapshots[1:]
    assert changes[0].before is None and changes[0].why == "memory tool call"
    assert [r.change_id for r in results] == [c.id for c in changes[4:]]
    assert [c.before for c in changes[1:]] == [c.after for c in changes[:-1]]
    assert changes[-1].after == _row(namespace) == b"CI runs on every push and tag"
    assert [c.id for c in changes] == list(range(1, 8)) and pg.history.count() == 7
    assert pg.history.get(5) == changes[4]
    assert [c.id for c in pg.history.list(target="memory", limit=2)] == [7, 6]
    assert pg.history.list(target="user") == []


def test_attributed_names_who_and_why(pg: PostgresMemory) -> None:
    """attributed() names the author and reason of the rows, as on files."""
    with pg.attributed("import", "from the old notes file"):
        pg.add("user", "Prefers answers in French.")
    (change,) = pg.history.list()
    assert (change.who, change.why, change.target) == ("import", "from the old notes file", "user")


def test_undo_restores_the_exact_previous_text(pg: PostgresMemory, namespace: str) -> None:
    """A hand-written row with CRLF and a BOM comes back character for character."""
    original = "\ufeffHand note one\r\n§\r\nHand note two\r\n"
    _set_raw(namespace, "memory", original)
    result = pg.add("memory", "New note")
    assert _row(namespace) != original.encode()
    undo = pg.undo(result.change_id or 0)
    assert _row(namespace) == original.encode()
    assert (undo.action, undo.undoes, undo.after) == ("undo", result.change_id, original.encode())
    assert undo.why == f"undo of change #{result.change_id}"


def test_undo_is_refused_after_a_later_change_unless_forced(
    pg: PostgresMemory, namespace: str
) -> None:
    """Undoing a change the row moved past is refused with the file backend's words."""
    first = pg.add("memory", "alpha").change_id or 0
    pg.add("memory", "beta")
    with pytest.raises(DriftError) as refused:
        pg.undo(first)
    message = str(refused.value)
    assert message.startswith(f"MEMORY.md of namespace {namespace!r} changed after change #1")
    assert "Undo the later changes first" in message and "pass --force" in message
    assert pg.entries("memory") == ["alpha", "beta"] and pg.history.count() == 2
    forced = pg.undo(first, force=True)
    assert _row(namespace) == b"" and pg.entries("memory") == []
    assert forced.why == "undo of change #1 (forced)" and forced.before == b"alpha\n\xc2\xa7\nbeta"


def test_undo_of_an_undo_puts_the_change_back(pg: PostgresMemory, namespace: str) -> None:
    """An undo is a change itself: undoing it restores what the undone change wrote."""
    pg.add("memory", "alpha")
    second = pg.add("memory", "beta").change_id or 0
    undo = pg.undo(second)
    assert pg.entries("memory") == ["alpha"]
    redo = pg.undo(undo.id)
    assert pg.entries("memory") == ["alpha", "beta"]
    assert (redo.undoes, redo.after) == (undo.id, pg.history.get(second).after)


def test_undo_of_a_targets_first_change_empties_the_row(pg: PostgresMemory) -> None:
    """The first change had no row before it: undo empties the row; undo of that redoes it."""
    first = pg.add("memory", "alpha").change_id or 0
    emptied = pg.undo(first)
    assert pg.history.get(first).before is None and emptied.after == b""
    assert pg.entries("memory") == []
    again = pg.undo(emptied.id)
    assert pg.entries("memory") == ["alpha"] and again.before == b""


def test_unknown_change_ids_say_what_to_do(pg: PostgresMemory) -> None:
    """get/undo of a change that does not exist names the fix, as on files."""
    with pytest.raises(InvalidMemoryArgument, match="nothing has been recorded yet"):
        pg.undo(1)
    pg.add("memory", "alpha")
    with pytest.raises(InvalidMemoryArgument, match="memstrata memory history"):
        pg.history.get(99)


def test_reset_is_recorded_and_undone(pg: PostgresMemory, namespace: str) -> None:
    """reset empties the row and keeps the text in the history; undo brings it back."""
    pg.add("user", "Name is Ada")
    change = pg.reset("user")
    assert change is not None and (change.action, change.after) == ("reset", b"")
    assert change.before == b"Name is Ada" and pg.entries("user") == []
    assert pg.reset("user") is None and pg.history.count() == 2
    pg.undo(change.id)
    assert pg.entries("user") == ["Name is Ada"]


def test_same_history_as_file_memory_on_one_sequence(
    pg: PostgresMemory, memstrata_home: Path
) -> None:
    """The same writes and undos leave the same history rows on files and on rows."""
    files = FileMemory(memstrata_home)

    def run(memory: PostgresMemory | FileMemory) -> list[tuple[Any, ...]]:
        memory.add("memory", "alpha")
        with memory.attributed("curator", "merge"):
            memory.replace("memory", "alpha", "alpha two")
        memory.add("user", "Name is Ada")
        memory.remove("memory", "alpha")
        memory.undo(4)
        with pytest.raises(DriftError):
            memory.undo(1)
        memory.undo(1, force=True)
        memory.undo(6)
        return [_fields(c) for c in memory.history.list()]

    on_rows, on_files = run(pg), run(files)
    # One difference: a file that did not exist is removed again by an undo, a row is
    # emptied instead (see PostgresMemory.undo). Otherwise the rows are the same.
    assert on_rows[-1][5] is None and on_files[-1][5] is None  # the first add: no text
    assert on_files[1][6] is None and on_rows[1][6] == b""  # the forced undo of it
    assert [_absent_as_empty(r) for r in on_rows] == [_absent_as_empty(r) for r in on_files]


def _absent_as_empty(fields: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(b"" if value is None else value for value in fields)


def _fields(change: MemoryChange) -> tuple[Any, ...]:
    return (
        change.id,
        change.target,
        change.action,
        change.who,
        change.why,
        change.before,
        change.after,
        change.undoes,
    )


def test_namespaces_do_not_see_each_others_history(pg: PostgresMemory, namespace: str) -> None:
    """Each tenant numbers its own changes and cannot read or undo another's."""
    other_ns = f"t-hist-{uuid.uuid4().hex[:12]}"
    try:
        with PostgresMemory(DSN, namespace=other_ns) as other:
            pg.add("memory", "alice's secret")
            pg.add("memory", "alice's second")
            assert other.history.list() == [] and other.history.count() == 0
            with pytest.raises(InvalidMemoryArgument, match="nothing has been recorded"):
                other.history.get(1)
            with pytest.raises(InvalidMemoryArgument):
                other.undo(2)
            other.add("memory", "bob's note")
            assert [c.id for c in other.history.list()] == [1]
            assert other.history.get(1).after == b"bob's note"
            assert all(b"bob" not in (c.after or b"") for c in pg.history.list())
            assert pg.entries("memory") == ["alice's secret", "alice's second"]
            with PostgresSessionStore(DSN, namespace=other_ns) as store:
                assert store.delete_namespace()["curated_memory_history"] == 1
            assert other.history.count() == 0 and pg.history.count() == 2
            assert len(pg.history.list(limit=10**30)) == 2  # any limit: SQL's bigint held
    finally:
        drop_namespace(other_ns)


def test_a_change_and_its_history_row_commit_together(pg: PostgresMemory, namespace: str) -> None:
    """When the history row cannot be written, the change is rolled back with it."""
    pg.add("memory", "kept")
    trigger = f"t_refuse_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'history refused'; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER {trigger} BEFORE INSERT ON curated_memory_history "
            f"FOR EACH ROW WHEN (NEW.namespace = '{namespace}') "
            "EXECUTE FUNCTION pg_temp.refuse()"
        )
        try:
            with pytest.raises(psycopg.Error, match="history refused"):
                pg.add("memory", "lost with its row")
        finally:
            conn.execute(f"DROP TRIGGER {trigger} ON curated_memory_history")
    assert pg.entries("memory") == ["kept"] and pg.history.count() == 1


def test_history_rows_are_never_updated(pg: PostgresMemory, namespace: str) -> None:
    """An UPDATE of a recorded change is refused by the database."""
    pg.add("memory", "alpha")
    with (
        psycopg.connect(DSN, autocommit=True) as conn,
        pytest.raises(psycopg.Error, match="append-only"),
    ):
        conn.execute(
            "UPDATE curated_memory_history SET who = 'someone else' WHERE namespace = %s",
            (namespace,),
        )
    assert pg.history.get(1).who == "api"


def test_writers_of_both_targets_get_distinct_ordered_ids(namespace: str) -> None:
    """Writers on two targets (two row locks) still number the tenant's changes 1..N."""
    errors: list[BaseException] = []

    def writer(target: str, count: int) -> None:
        try:
            with PostgresMemory(DSN, namespace=namespace) as memory:
                for index in range(count):
                    memory.add(target, f"{target} note {index}")  # type: ignore[arg-type]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t, 15)) for t in ("memory", "user")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with PostgresMemory(DSN, namespace=namespace) as memory:
        changes = list(reversed(memory.history.list(limit=100)))
        assert [c.id for c in changes] == list(range(1, 31))
        for target in ("memory", "user"):
            mine = [c for c in changes if c.target == target]
            assert [c.before for c in mine[1:]] == [c.after for c in mine[:-1]]
            assert mine[-1].after == _row(namespace, target)


# -- the CLI under a PostgreSQL store.dsn ------------------------------------------------


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["memory", *args])
    return result.exit_code, result.output


@pytest.fixture
def on_dsn(namespace: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MEMSTRATA_STORE__DSN", DSN)
    monkeypatch.setenv("MEMSTRATA_STORE__NAMESPACE", namespace)
    return namespace


def test_memory_commands_follow_store_dsn(on_dsn: str, memstrata_home: Path) -> None:
    """add/list/history/undo/reset under MEMSTRATA_STORE__DSN work on the namespace's rows."""
    code, out = _cli("add", "Deploys go through staging first")
    assert code == 0 and out.startswith("Entry added. memory:"), out
    with PostgresMemory(DSN, namespace=on_dsn) as reader:
        assert reader.entries("memory") == ["Deploys go through staging first"]
    code, out = _cli("add", "Prefers answers in French.", "-t", "user")
    assert code == 0, out
    code, out = _cli("replace", "staging", "Deploys go through staging, then canary")
    assert code == 0, out
    code, out = _cli("list", "--json")
    assert code == 0, out
    listed = json.loads(out)
    assert listed["memory"]["entries"] == ["Deploys go through staging, then canary"]
    assert listed["user"]["path"] is None and listed["user"]["namespace"] == on_dsn

    code, out = _cli("history", "--json")
    assert code == 0, out
    rows = json.loads(out)
    assert [(r["id"], r["action"], r["who"]) for r in rows] == [
        (3, "replace", "cli"),
        (2, "add", "cli"),
        (1, "add", "cli"),
    ]
    code, out = _cli("history", "-t", "user")
    assert code == 0 and "\tuser\tadd\tcli\t" in out and "replace" not in out, out

    code, out = _cli("undo", "1")
    assert code == 1 and "changed after change #1" in out and "--force" in out, out
    code, out = _cli("undo", "3")
    assert code == 0, out
    assert out == (
        f"Undid change #3: MEMORY.md of namespace {on_dsn!r} is back to the bytes it held "
        "before it (recorded as change #4).\n"
    )
    with PostgresMemory(DSN, namespace=on_dsn) as reader:
        assert reader.entries("memory") == ["Deploys go through staging first"]
        assert reader.history.get(4).who == "cli"

    code, out = _cli("reset", "-t", "user", "--yes")
    assert code == 0 and "undo it with `memstrata memory undo 5`" in out, out
    code, out = _cli("read", "-t", "user", "--json")
    assert code == 0 and json.loads(out)["entries"] == [], out
    # Nothing went to the files of the home folder.
    assert not (memstrata_home / "memories").exists()
    assert not (memstrata_home / "memory_history.db").exists()


def test_memory_path_under_a_dsn_names_the_setting(on_dsn: str, memstrata_home: Path) -> None:
    """`memory path` does not print file paths nobody reads: it names store.dsn instead."""
    code, out = _cli("path")
    assert code == 1
    assert "Curated memory is kept in PostgreSQL at " in out
    assert f"namespace {on_dsn!r}" in out and "store.dsn" in out and "MEMORY.md" not in out
    assert not (memstrata_home / "memories").exists()


def test_memory_approve_under_a_dsn_writes_the_rows(on_dsn: str, memstrata_home: Path) -> None:
    """A staged tool write approved from the CLI lands in the namespace's rows."""
    (memstrata_home / "config.toml").write_text("[memory]\nwrite_approval = true\n")
    with PostgresMemory(DSN, namespace=on_dsn) as memory:
        staged = MemoryTool(memory=memory).handle(
            {"action": "add", "target": "user", "content": "Likes tea."}
        )
        assert memory.entries("user") == [], staged
    code, out = _cli("pending", "--json")
    assert code == 0, out
    (pending,) = json.loads(out)
    code, out = _cli("approve", pending["id"])
    assert code == 0, out
    with PostgresMemory(DSN, namespace=on_dsn) as memory:
        assert memory.entries("user") == ["Likes tea."]
        assert memory.history.list()[0].who == "cli"


def test_an_unreachable_dsn_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, memstrata_home: Path
) -> None:
    """A DSN that cannot be reached fails the command with the reason, not a traceback."""
    monkeypatch.setenv("MEMSTRATA_STORE__DSN", "postgresql://127.0.0.1:1/test")
    code, out = _cli("list")
    assert code == 1 and "Cannot connect to PostgreSQL at postgresql://127.0.0.1:1/test" in out, out
    assert not (memstrata_home / "memories").exists()
