"""Memory writes reach the external provider whichever door they come through.

The memory announces each stored write to its listeners, and the manager of the
configured provider listens: the agent's tool loop, ``dispatch_tool``, the MCP server and
the CLI all write to curated memory, so all of them are mirrored. The bundled ``facts``
provider (offline, SQLite) is the provider here: a mirrored write is a fact with source
``mirror`` in ``facts.db``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import fresh_namespace
from memstrata.config import Config
from memstrata.errors import NoMatchError
from memstrata.mcp.service import MemoryService
from memstrata.memory.core import CuratedMemory
from memstrata.memory.files import FileMemory
from memstrata.memory.writes import MemoryWrite
from memstrata.providers.facts.schema import Fact
from memstrata.providers.facts.store import FACTS_FILENAME, FactStore
from memstrata.providers.manager import MemoryManager
from memstrata.testing import RecordingProvider
from memstrata.tools.toolbox import Toolbox, dispatch_tool


def use_facts_provider(home: Path) -> None:
    (home / "config.toml").write_text('[memory]\nprovider = "facts"\n', encoding="utf-8")


def mirrored(home: Path, text: str, timeout: float = 10.0) -> Fact:
    """The mirrored fact containing ``text``, waiting for the provider's worker."""
    deadline = time.monotonic() + timeout
    while True:
        if (home / FACTS_FILENAME).exists():
            with FactStore(home / FACTS_FILENAME) as store:
                try:
                    fact = store.find_one(text)
                except NoMatchError:
                    pass
                else:
                    if fact.source == "mirror":
                        return fact
        if time.monotonic() > deadline:
            raise AssertionError(f"no mirrored fact with {text!r} in {home / FACTS_FILENAME}")
        time.sleep(0.05)


def test_a_write_through_dispatch_tool_reaches_the_configured_provider(
    memstrata_home: Path,
) -> None:
    """The bug this fixes: dispatch_tool wrote the file and the provider never heard."""
    use_facts_provider(memstrata_home)
    out = json.loads(
        dispatch_tool("memory", {"action": "add", "target": "user", "content": "用户住在杭州"})
    )
    assert out["success"] is True, out
    fact = mirrored(memstrata_home, "杭州")
    assert (fact.target, fact.source) == ("user", "mirror")
    # The provider's own tools are offered through dispatch_tool as well.
    found = json.loads(dispatch_tool("facts_search", {"query": "杭州"}))
    assert found["success"] is True and found["count"] >= 1, found


def test_dispatch_tool_without_a_provider_starts_nothing(memstrata_home: Path) -> None:
    """No memory.provider: the write lands in the file and no facts database appears."""
    out = json.loads(dispatch_tool("memory", {"action": "add", "content": "Uses fish shell"}))
    assert out["success"] is True
    assert (memstrata_home / "memories" / "MEMORY.md").read_text() == "Uses fish shell"
    assert not (memstrata_home / FACTS_FILENAME).exists()


def test_a_broken_provider_setting_is_reported_by_every_door(memstrata_home: Path) -> None:
    """dispatch_tool answers with the fix; the CLI saves the write and warns."""
    (memstrata_home / "config.toml").write_text('[memory]\nprovider = "nope"\n')
    out = json.loads(dispatch_tool("memory", {"action": "read"}))
    assert out["success"] is False
    assert "No memory provider named 'nope'" in out["error"] and "plugins list" in out["error"]
    added = _memstrata(memstrata_home, "memory", "add", "Likes tea", "-t", "user")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("Entry added.")
    assert added.stderr.startswith("Warning: the write was saved but not mirrored")
    assert "Traceback" not in added.stderr
    assert (memstrata_home / "memories" / "USER.md").read_text() == "Likes tea"


def test_the_mcp_server_mirrors_through_the_memory_listener(memstrata_home: Path) -> None:
    """A memory tool call served over MCP reaches the provider (no mirroring in the server)."""
    use_facts_provider(memstrata_home)
    with MemoryService(Config.load(memstrata_home)) as service:
        text, is_error = service.call_tool(
            "memory", {"action": "add", "target": "memory", "content": "Deploys go through Fly.io"}
        )
        assert not is_error, text
        assert "facts_search" in [tool.name for tool in service.tools()]
        assert service.manager is not None and service.manager.flush_pending(10)
        assert mirrored(memstrata_home, "Fly.io").target == "memory"


def _memstrata(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMSTRATA_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "memstrata", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_memory_add_mirrors_only_when_a_provider_is_configured(tmp_path: Path) -> None:
    """`memstrata memory add` starts no provider by default; with one configured, the
    write is mirrored with origin cli before the command exits."""
    home = tmp_path / "home"
    plain = _memstrata(home, "memory", "add", "Prefers tea", "-t", "user")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("Entry added.")
    assert not (home / FACTS_FILENAME).exists()

    use_facts_provider(home)
    added = _memstrata(home, "memory", "add", "User's name is Zhang Wei", "-t", "user")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("Entry added.") and added.stderr == ""
    fact = mirrored(home, "Zhang Wei", timeout=0.5)  # already there: the CLI waited
    with FactStore(home / FACTS_FILENAME) as store:
        assert store.history(fact.id)[0].origin == "mirror:cli"
    listed = _memstrata(home, "memory", "list")
    assert listed.returncode == 0 and "Zhang Wei" in listed.stdout


def test_every_write_to_the_memory_is_announced_once_per_operation(memstrata_home: Path) -> None:
    """Single writes, a batch (numbered), the author as origin; no-op writes stay silent."""
    memory = FileMemory(memstrata_home)
    heard: list[MemoryWrite] = []
    stop = memory.add_write_listener(heard.append)
    memory.add("memory", "Uses SQLite")
    memory.add("memory", "Uses SQLite")  # a duplicate changes nothing: not announced
    with memory.attributed("curator", "merge"):
        memory.apply_batch(
            "memory",
            [
                {"action": "replace", "old_text": "SQLite", "content": "Uses PostgreSQL"},
                {"action": "add", "content": "Deploys on Fridays"},
            ],
        )
    memory.remove("memory", "Fridays")
    stop()
    memory.add("memory", "Not heard")
    assert heard == [
        MemoryWrite("add", "memory", "Uses SQLite", origin="api"),
        MemoryWrite(
            "replace",
            "memory",
            "Uses PostgreSQL",
            old_text="SQLite",
            origin="curator",
            batch_index=0,
            batch_size=2,
        ),
        MemoryWrite(
            "add", "memory", "Deploys on Fridays", origin="curator", batch_index=1, batch_size=2
        ),
        MemoryWrite("remove", "memory", "", old_text="Fridays", origin="api"),
    ]


@pytest.fixture(params=["files", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_memory(request: pytest.FixtureRequest, memstrata_home: Path) -> Iterator[CuratedMemory]:
    """Curated memory on each backend: the files of a home, or a PostgreSQL namespace."""
    if request.param == "files":
        yield FileMemory(memstrata_home)
        return
    pytest.importorskip("psycopg")
    from helpers import PG_DSN, drop_namespace
    from memstrata.memory.postgres import PostgresMemory

    name = fresh_namespace()
    try:
        with PostgresMemory(PG_DSN, namespace=name) as memory:
            yield memory
    finally:
        drop_namespace(name)


def test_both_backends_announce_writes_to_the_manager(any_memory: CuratedMemory) -> None:
    """The write listener is part of the memory contract: PostgreSQL rows mirror too."""
    manager = MemoryManager(memory=any_memory)
    provider = RecordingProvider()
    assert manager.add_provider(provider)
    manager.initialize_all("s1")
    box = Toolbox()
    box.register_provider_tools(manager)
    batch = {
        "target": "user",
        "operations": [
            {"action": "add", "content": "Name is 王芳"},
            {"action": "add", "content": "Works in Shenzhen"},
        ],
    }
    assert box.call("memory", batch)["success"] is True
    refused = box.call("memory", {"action": "remove", "target": "user", "old_text": "nope"})
    assert refused["success"] is False and refused["current_entries"] == [
        "Name is 王芳",
        "Works in Shenzhen",
    ]
    assert manager.flush_pending(10)
    assert provider.writes == [
        ("add", "user", "Name is 王芳"),
        ("add", "user", "Works in Shenzhen"),
    ]
    assert [(m.batch_index, m.batch_size, m.origin) for m in provider.write_metadata if m] == [
        (0, 2, "tool"),
        (1, 2, "tool"),
    ]
    manager.shutdown_all()


def test_a_failing_listener_never_fails_the_write(
    memstrata_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    memory = FileMemory(memstrata_home)

    def broken(write: MemoryWrite) -> None:
        raise RuntimeError("listener down")

    memory.add_write_listener(broken)
    assert memory.add("user", "Name is Ada").changed
    assert memory.entries("user") == ["Name is Ada"]
    assert "listener down" in caplog.text


def test_the_manager_mirrors_writes_made_beside_its_tools(memstrata_home: Path) -> None:
    """A write straight to the manager's memory (a curator, an importer) is mirrored too,
    and a shut-down manager stops listening."""
    memory = FileMemory(memstrata_home)
    manager = MemoryManager(memory=memory)
    provider = RecordingProvider()
    assert manager.add_provider(provider)
    manager.initialize_all("s1")
    with memory.attributed("curator"):
        memory.add("user", "Name is Ada")
    assert manager.flush_pending(10)
    assert provider.writes == [("add", "user", "Name is Ada")]
    assert provider.write_metadata[0].origin == "curator"
    assert provider.write_metadata[0].session_id == "s1"
    manager.shutdown_all()
    memory.add("user", "Likes tea")
    assert provider.writes == [("add", "user", "Name is Ada")]
