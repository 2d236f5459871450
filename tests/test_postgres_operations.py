"""PostgreSQL operations: errors that name the fix, per-tenant stats and optimize, and
``memstrata namespaces list|delete``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import PG_DSN, fresh_namespace
from helpers import drop_namespace
from memstrata.cli import cli
from memstrata.errors import SchemaError

SCRIPT = Path(sys.executable).parent / "memstrata"
DEAD_DSN = "postgresql://someone:s3cret@127.0.0.1:1/nothing"


def run_script(home: Path, dsn: str, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMSTRATA_"))}
    env.update(MEMSTRATA_HOME=str(home), MEMSTRATA_STORE__DSN=dsn)
    start = time.perf_counter()
    done = subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return done, time.perf_counter() - start


@pytest.mark.postgres
def test_a_stopped_server_is_one_line_within_two_seconds_from_every_command(
    memstrata_home: Path,
) -> None:
    """The same single line from every command, fast, without the password."""
    messages = set()
    for args in (["sessions", "list"], ["memory", "list"], ["search", "x"], ["sessions", "stats"]):
        done, seconds = run_script(memstrata_home, DEAD_DSN, *args)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert seconds <= 2.0, (args, seconds)
        messages.add(lines[0])
    (line,) = messages
    assert line.startswith(
        "Error: Cannot connect to PostgreSQL at postgresql://someone:[REDACTED]@"
    )
    assert "Connection refused" in line and "s3cret" not in line
    assert "memstrata help postgres" in line


@pytest.fixture
def own_schema() -> Iterator[str]:
    """A schema of its own with a search_path that leaves out public (where pg_trgm is)."""
    import psycopg

    from memstrata.store.postgres import PostgresSessionStore

    PostgresSessionStore(PG_DSN, namespace=fresh_namespace()).close()  # extensions exist
    name = f"own_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield name
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def with_options(dsn: str, search_path: str) -> str:
    joiner = "&" if "?" in dsn else "?"
    return f"{dsn}{joiner}options=-csearch_path%3D{search_path}"


@pytest.mark.postgres
def test_extensions_outside_the_search_path_name_the_fix(own_schema: str) -> None:
    from memstrata.store.postgres import PostgresSessionStore

    with pytest.raises(SchemaError) as caught:
        PostgresSessionStore(with_options(PG_DSN, own_schema), namespace="t")
    message = str(caught.value)
    assert "pg_trgm (in schema 'public')" in message
    assert f"options=-csearch_path%3D{own_schema},public" in message
    assert "gin_trgm_ops" not in message
    # The fix it names works: the tables go into the schema of one's own.
    fixed = with_options(PG_DSN, f"{own_schema},public")
    with PostgresSessionStore(fixed, namespace="t") as store:
        store.create_session("s1")
        assert store.resolve_session("s1") == "s1"


@pytest.mark.postgres
def test_the_cli_shows_the_fix_not_a_traceback(memstrata_home: Path, own_schema: str) -> None:
    done, _ = run_script(memstrata_home, with_options(PG_DSN, own_schema), "sessions", "list")
    assert done.returncode == 1
    assert done.stderr.startswith("Error: The extension(s) pg_trgm")
    assert "Traceback" not in done.stderr


@pytest.fixture
def two_tenants(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    from memstrata.store.postgres import PostgresSessionStore

    mine, theirs = fresh_namespace(), fresh_namespace()
    with PostgresSessionStore(PG_DSN, namespace=theirs) as store:
        for i in range(30):
            store.create_session(f"theirs-{i}", source="cli")
            store.append_message(f"theirs-{i}", "user", "their text " * 50)
    with PostgresSessionStore(PG_DSN, namespace=mine) as store:
        store.create_session("mine-1", source="cli")
        store.append_message("mine-1", "user", "my one message")
    monkeypatch.setenv("MEMSTRATA_STORE__DSN", PG_DSN)
    monkeypatch.setenv("MEMSTRATA_STORE__NAMESPACE", mine)
    try:
        yield mine, theirs
    finally:
        drop_namespace(mine)
        drop_namespace(theirs)


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    return result.exit_code, result.output


@pytest.mark.postgres
def test_stats_report_the_tenant_only(two_tenants: tuple[str, str]) -> None:
    code, out = invoke("sessions", "stats", "--json")
    assert code == 0, out
    stats = json.loads(out)
    assert stats["sessions"] == 1 and stats["messages"] == 1
    assert "db_bytes" not in stats
    # The tenant's own rows: far below the other tenant's 30 long messages.
    assert 0 < stats["tenant_bytes"] < 2_000


@pytest.mark.postgres
def test_optimize_leaves_shared_tables_alone_unless_asked(two_tenants: tuple[str, str]) -> None:
    code, out = invoke("sessions", "optimize", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["steps"] == [] and "--all-namespaces" in data["skipped"]
    code, out = invoke("sessions", "optimize", "--all-namespaces", "--json")
    assert code == 0, out
    assert json.loads(out)["steps"] == ["merge full-text indexes", "vacuum", "analyze"]


@pytest.mark.postgres
def test_namespaces_list_and_delete(two_tenants: tuple[str, str]) -> None:
    mine, theirs = two_tenants
    code, out = invoke("namespaces", "list", "--json")
    assert code == 0, out
    rows = {r["namespace"]: r for r in json.loads(out)}
    assert rows[mine]["sessions"] == 1 and rows[mine]["current"] is True
    assert rows[theirs]["sessions"] == 30 and rows[theirs]["messages"] == 30
    code, out = invoke("namespaces", "delete", theirs, stdin="n\n")
    assert code == 1 and "30 session(s)" in out
    code, out = invoke("namespaces", "delete", theirs, "--yes", "--json")
    assert code == 0, out
    assert json.loads(out)["deleted"]["sessions"] == 30
    code, out = invoke("namespaces", "list", "--json")
    names = {r["namespace"] for r in json.loads(out)}
    assert mine in names and theirs not in names
    code, out = invoke("namespaces", "delete", theirs, "--yes")
    assert code == 1 and f"No namespace {theirs!r} holds any rows" in out


def test_namespaces_on_sqlite_is_the_one_file(memstrata_home: Path) -> None:
    from memstrata.store.sqlite.store import SessionStore

    with SessionStore() as store:
        store.create_session("s1")
    code, out = invoke("namespaces", "list", "--json")
    assert code == 0, out
    assert json.loads(out) == [
        {
            "namespace": None,
            "sessions": 1,
            "messages": 0,
            "memory_rows": 0,
            "last_active": None,
            "current": True,
        }
    ]
    code, out = invoke("namespaces", "delete", "x", "--yes")
    assert code == 1 and "Namespaces live in PostgreSQL" in out
