"""Facts under ``store.dsn``: the remember tool, its recall, the facts provider and the
curator use the PostgreSQL tenant of the session store, and tenants never meet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import PG_DSN, fresh_namespace
from helpers import drop_namespace
from memstrata.cli import cli
from memstrata.config import Config
from memstrata.errors import NoMatchError
from memstrata.providers.facts import open_facts
from memstrata.providers.facts.postgres import PostgresFactStore
from memstrata.providers.facts.provider import FactsProvider
from memstrata.providers.facts.remembered import recall_remembered
from memstrata.store.postgres import PostgresSessionStore
from memstrata.tools.remember import RememberTool

pytestmark = pytest.mark.postgres


@pytest.fixture
def tenant(memstrata_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """store.dsn and a fresh store.namespace set for the home, the rows dropped after."""
    namespace = fresh_namespace()
    monkeypatch.setenv("MEMSTRATA_STORE__DSN", PG_DSN)
    monkeypatch.setenv("MEMSTRATA_STORE__NAMESPACE", namespace)
    yield namespace
    drop_namespace(namespace)


def test_open_facts_follows_the_dsn(memstrata_home: Path, tenant: str) -> None:
    """With a DSN the facts are the tenant's rows; without one, the home's facts.db."""
    with open_facts() as facts:
        assert isinstance(facts, PostgresFactStore) and facts.namespace == tenant
        assert tenant in facts.location and "postgresql://" in facts.location
    assert not (memstrata_home / "facts.db").exists()


def test_remember_writes_the_tenant_and_another_machine_recalls_it(
    memstrata_home: Path, tenant: str, tmp_path: Path
) -> None:
    """A fact remembered under a DSN is in PostgreSQL, not in a local file, and a second
    home pointed at the same tenant (another machine) recalls it."""
    tool = RememberTool(memstrata_home)
    try:
        result = tool.handle({"content": "We chose Postgres for the billing service"})
    finally:
        tool.close()
    assert result["success"] and not (memstrata_home / "facts.db").exists()
    with PostgresFactStore(PG_DSN, namespace=tenant) as facts:
        assert [f.content for f in facts.list()] == ["We chose Postgres for the billing service"]
    other_home = tmp_path / "laptop"
    other_home.mkdir()
    recalled = recall_remembered(other_home, "is the billing service on Postgres?")
    assert "We chose Postgres for the billing service" in recalled
    assert not (other_home / "facts.db").exists()


def test_the_facts_provider_uses_the_tenant_and_the_builtin_recall_steps_aside(
    memstrata_home: Path, tenant: str
) -> None:
    """The provider's store is the tenant's; while it recalls, the built-in recall of the
    same tenant returns nothing (no fact is recalled twice)."""
    provider = FactsProvider(config=Config.load(memstrata_home))
    provider.initialize("s1", home=memstrata_home)
    try:
        assert isinstance(provider.store, PostgresFactStore)
        out = provider.handle_tool_call(
            "facts_remember",
            {"content": "User keeps bees on the roof", "key": "hobby", "value": "bees"},
        )
        assert out["success"], out
        assert "bees" in provider.prefetch("how are the bees on the roof?", session_id="s1")
        assert recall_remembered(memstrata_home, "how are the bees on the roof?") == ""
    finally:
        provider.shutdown()
    assert "bees" in recall_remembered(memstrata_home, "how are the bees on the roof?")
    assert not (memstrata_home / "facts.db").exists()


def test_tenants_never_see_each_other(tenant: str) -> None:
    """Ids, search, recall, slots and history are scoped to the namespace."""
    other = fresh_namespace()
    try:
        with (
            PostgresFactStore(PG_DSN, namespace=tenant) as mine,
            PostgresFactStore(PG_DSN, namespace=other) as theirs,
        ):
            secret = theirs.add("Their launch code is swordfish")
            theirs.upsert_slot("timezone", "UTC-5")
            mine.upsert_slot("timezone", "UTC+8")
            with pytest.raises(NoMatchError):
                mine.get(secret.id)
            with pytest.raises(NoMatchError):
                mine.forget(secret.id)
            assert mine.search("swordfish") == [] and mine.recall("launch code swordfish") == []
            assert [f.value for f in mine.slots()] == ["UTC+8"]
            assert [c.fact_id for c in mine.history()] == [mine.slots()[0].id]
            assert theirs.get(secret.id).status == "live"
    finally:
        drop_namespace(other)


def test_deleting_a_namespace_deletes_its_facts(tenant: str) -> None:
    """`memstrata namespaces delete` (the session store's delete_namespace) takes the
    tenant's facts, history and vectors with it."""
    with PostgresSessionStore(PG_DSN, namespace=tenant) as store:
        store.create_session("s1")
    with PostgresFactStore(PG_DSN, namespace=tenant) as facts:
        facts.add("User's passport number is in the safe")
    result = CliRunner().invoke(cli, ["namespaces", "delete", tenant, "--yes", "--json"])
    assert result.exit_code == 0, result.output
    assert '"facts": 1' in result.output
    with PostgresFactStore(PG_DSN, namespace=tenant) as facts:
        assert facts.count(status=None) == 0 and facts.history() == []


def test_the_facts_example_of_docs_postgres_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example of the "Facts" section of docs/postgres.md prints what the page says."""
    monkeypatch.setenv("MEMSTRATA_PG_DSN", PG_DSN)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "postgres.md").read_text(
        encoding="utf-8"
    )
    section = doc.split("## Facts", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0]
    tenants = {name: fresh_namespace() for name in ("alice", "bob")}
    for name, fresh in tenants.items():
        code = code.replace(f'namespace="{name}"', f'namespace="{fresh}"')
    try:
        exec(compile(code, "docs/postgres.md", "exec"), {"__name__": "__doc__"})
    finally:
        for fresh in tenants.values():
            drop_namespace(fresh)
    assert capsys.readouterr().out == shown


def test_the_ui_facts_page_shows_the_namespace_facts(memstrata_home: Path, tenant: str) -> None:
    """`memstrata ui` reads the facts the configuration names: under a DSN, the
    namespace's, and no facts.db is created."""
    pytest.importorskip("jinja2")
    from memstrata.backends import open_memory, open_store
    from memstrata.ui.views import Home, facts_view

    with PostgresFactStore(PG_DSN, namespace=tenant) as facts:
        facts.upsert_slot("editor", "helix")
    config = Config.load(memstrata_home)
    memory = open_memory(config)
    try:
        with open_store(config) as store:
            view = facts_view(Home(config, memory, store, "postgres"))
    finally:
        memory.close()  # type: ignore[attr-defined]  # PostgresMemory holds a pool
    assert view["exists"] and tenant in view["path"]
    assert [f["content"] for f in view["slots"]["user"]] == ["editor: helix"]
    assert not (memstrata_home / "facts.db").exists()
