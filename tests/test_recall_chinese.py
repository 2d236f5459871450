"""Chinese recall end to end: a two-clause question finds its session on both backends,
through the store, ``session_search``, the CLI and the MCP tool."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from conftest import PG_DSN, fresh_namespace
from helpers import run_memstrata
from memstrata.search.recall import session_search

STORED = "我们决定下周二把数据库迁移到新的集群，先做备份。"
OTHER = "周末去公园看花，天气很好。"
QUESTION = "上次我们讨论数据库迁移，结论是什么？"


def seed(store: Any) -> None:
    """The answer's session and an unrelated one."""
    store.create_session("migration", source="cli")
    store.append_messages(
        "migration",
        [
            {"role": "user", "content": "数据库的事情怎么安排？"},
            {"role": "assistant", "content": STORED},
        ],
    )
    store.create_session("weekend", source="cli")
    store.append_messages("weekend", [{"role": "user", "content": OTHER}])


def test_two_clause_question_finds_its_session_in_the_store(store: Any) -> None:
    """The store's own search and session_search put the migration session first."""
    seed(store)
    hits = store.search_messages(QUESTION, limit=5)
    assert hits and hits[0]["session_id"] == "migration"
    assert STORED in {h["snippet"].replace(">>>", "").replace("<<<", "") for h in hits}
    found = session_search(store, QUESTION, summarize=False)
    assert [r["session_id"] for r in found["results"]][:1] == ["migration"]


def test_a_quoted_pasted_message_finds_its_session(store: Any) -> None:
    """Quotes around a pasted sentence do not turn it into a phrase that finds nothing."""
    seed(store)
    pasted = '他说："上次讨论的数据库迁移，最后怎么定的？"'
    found = session_search(store, pasted, summarize=False)
    assert [r["session_id"] for r in found["results"]][:1] == ["migration"]


def _env(home: Path, dsn: str | None, namespace: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_"))
    }
    env["MEMSTRATA_HOME"] = str(home)
    if dsn:
        env["MEMSTRATA_STORE__DSN"] = dsn
        env["MEMSTRATA_STORE__NAMESPACE"] = namespace or "default"
    return env


def _backend(request: pytest.FixtureRequest, home: Path) -> tuple[str | None, str | None]:
    """Seed the backend named by the test's parameter; return its (dsn, namespace)."""
    if request.param == "sqlite":
        from memstrata.store.sqlite.store import SessionStore

        with SessionStore(home / "state.db") as sqlite_store:
            seed(sqlite_store)
        return None, None
    from memstrata.store.postgres import PostgresSessionStore

    namespace = fresh_namespace()
    with PostgresSessionStore(PG_DSN, namespace=namespace, pool_size=1) as pg_store:
        seed(pg_store)
    request.addfinalizer(lambda: _drop(namespace))
    return PG_DSN, namespace


def _drop(namespace: str) -> None:
    from helpers import drop_namespace

    drop_namespace(namespace)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def seeded_home(request: pytest.FixtureRequest, memstrata_home: Path) -> dict[str, str]:
    """A home whose store (SQLite file or PostgreSQL tenant) holds the seeded sessions;
    returns the environment a subprocess needs to reach it."""
    dsn, namespace = _backend(request, memstrata_home)
    return _env(memstrata_home, dsn, namespace)


def test_cli_search_finds_the_session(seeded_home: dict[str, str]) -> None:
    """`memstrata search QUESTION --json` run as a subprocess ranks the session first."""
    done = run_memstrata("search", QUESTION, "--json", "--no-summary", env=seeded_home)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [r["session_id"] for r in result["results"]][:1] == ["migration"]


def test_mcp_tool_finds_the_session(seeded_home: dict[str, str]) -> None:
    """The MCP server's session_search tool, driven by the SDK client over stdio."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memstrata", "mcp"], env=seeded_home
    )

    async def main() -> dict[str, Any]:
        async with Client(params) as client:
            result = await client.call_tool(
                "session_search", {"query": QUESTION, "summarize": False}
            )
            block = result.content[0]
            assert isinstance(block, types.TextContent)
            value: dict[str, Any] = json.loads(block.text)
            return value

    found = anyio.run(main)
    assert [r["session_id"] for r in found["results"]][:1] == ["migration"]
