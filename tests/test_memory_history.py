"""The audit history of curated memory: every change recorded, undo byte for byte."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.errors import DriftError, InvalidMemoryArgument
from memstrata.memory.files import FileMemory
from memstrata.memory.history import MemoryHistory
from memstrata.memory.tool import MemoryTool


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def test_every_write_records_exact_before_and_after_bytes(memstrata_home: Path) -> None:
    """add, replace, remove and batch each append one row holding the file's exact bytes."""
    memory = FileMemory(memstrata_home)
    path = memory.path("memory")
    snapshots = [_bytes(path)]
    memory.add("memory", "Repo uses uv")
    snapshots.append(_bytes(path))
    memory.add("memory", "Tests run with pytest")
    snapshots.append(_bytes(path))
    memory.replace("memory", "uv", "Repo uses uv 0.5")
    snapshots.append(_bytes(path))
    memory.apply_batch("memory", [{"action": "remove", "old_text": "pytest"}])
    snapshots.append(_bytes(path))
    memory.add("memory", "Repo uses uv 0.5")  # a no-op write is not a change
    changes = list(reversed(memory.history.list()))
    assert [c.action for c in changes] == ["add", "add", "replace", "batch"]
    assert [c.before for c in changes] == snapshots[:-1]
    assert [c.after for c in changes] == snapshots[1:]
    assert changes[0].before is None and {c.target for c in changes} == {"memory"}
    assert all(c.who == "api" for c in changes)


def test_attribution_names_who_and_why(memstrata_home: Path) -> None:
    """attributed() and the tool/CLI defaults name the author of each change."""
    memory = FileMemory(memstrata_home)
    with memory.attributed("import", "from hermes MEMORY.md"):
        memory.add("memory", "Imported note")
    MemoryTool(memory).handle({"action": "add", "target": "user", "content": "Likes tea"})
    result = CliRunner().invoke(cli, ["memory", "add", "CLI note"])
    assert result.exit_code == 0, result.output
    rows = [(c.who, c.why, c.target) for c in reversed(memory.history.list())]
    assert rows == [
        ("import", "from hermes MEMORY.md", "memory"),
        ("tool", "memory tool call", "user"),
        ("cli", "", "memory"),
    ]


def test_undo_restores_bytes_exactly_even_unusual_ones(memstrata_home: Path) -> None:
    """A hand-written file with CRLF and a BOM comes back byte for byte after undo."""
    memory = FileMemory(memstrata_home)
    path = memory.path("memory")
    path.parent.mkdir(parents=True, exist_ok=True)
    original = "\ufeffHand note one\r\n§\r\nHand note two\r\n".encode()
    path.write_bytes(original)
    result = memory.add("memory", "Added by the agent")
    assert result.change_id is not None and _bytes(path) != original
    undo = memory.undo(result.change_id)
    assert _bytes(path) == original
    assert undo.action == "undo" and undo.undoes == result.change_id
    assert undo.before is not None and undo.after == original


def test_undo_of_the_first_write_removes_the_file(memstrata_home: Path) -> None:
    """The file did not exist before the first change, so undoing it deletes the file."""
    memory = FileMemory(memstrata_home)
    change = memory.add("user", "Name is Ada").change_id
    assert change is not None
    memory.undo(change)
    assert not memory.path("user").exists()
    assert memory.entries("user") == []


def test_undo_refuses_when_the_file_changed_since_unless_forced(memstrata_home: Path) -> None:
    """Undoing an older change would drop later edits: refused, then forced and recorded."""
    memory = FileMemory(memstrata_home)
    first = memory.add("memory", "one").change_id
    memory.add("memory", "two")
    after_both = _bytes(memory.path("memory"))
    assert first is not None
    with pytest.raises(DriftError, match=r"changed after change #1.*--force"):
        memory.undo(first)
    assert _bytes(memory.path("memory")) == after_both
    forced = memory.undo(first, force=True)
    assert _bytes(memory.path("memory")) is None  # the file did not exist before #1
    assert "forced" in forced.why and forced.before == after_both
    # The forced undo is itself a change: undoing it brings both entries back.
    memory.undo(forced.id)
    assert _bytes(memory.path("memory")) == after_both


def test_unknown_change_gives_a_clear_error(memstrata_home: Path) -> None:
    """An id that was never recorded says how to list the real ones."""
    memory = FileMemory(memstrata_home)
    with pytest.raises(InvalidMemoryArgument, match="nothing has been recorded"):
        memory.undo(3)
    memory.add("memory", "x")
    with pytest.raises(InvalidMemoryArgument, match="memstrata memory history"):
        memory.undo(99)


def test_reset_is_recorded_and_undoable(memstrata_home: Path) -> None:
    """`memory reset` empties the file as a recorded change that undo reverts."""
    memory = FileMemory(memstrata_home)
    memory.add("memory", "keep me")
    before = _bytes(memory.path("memory"))
    result = CliRunner().invoke(cli, ["memory", "reset", "--target", "memory", "--yes"])
    assert result.exit_code == 0, result.output
    last = memory.history.list(limit=1)[0]
    assert (last.action, last.who, last.after) == ("reset", "cli", b"")
    memory.undo(last.id)
    assert _bytes(memory.path("memory")) == before


def test_history_reads_any_limit(memstrata_home: Path) -> None:
    """A limit past what SQL's integers hold reads every change (the CLI refuses it
    with a usage error instead)."""
    memory = FileMemory(memstrata_home)
    memory.add("memory", "alpha")
    memory.add("memory", "beta")
    assert len(memory.history.list(limit=10**30)) == 2
    with pytest.raises(InvalidMemoryArgument, match="no change #"):
        memory.history.get(10**30)  # an id past SQL's integers: no change, no overflow
    result = CliRunner().invoke(cli, ["memory", "history", "--limit", str(10**30)])
    assert result.exit_code == 2 and "1000000000" in result.output, result.output


def test_history_file_is_private(memstrata_home: Path) -> None:
    """The history holds every byte memory ever held: 0600 like the memory files."""
    FileMemory(memstrata_home).add("memory", "secret-ish")
    assert (memstrata_home / "memory_history.db").stat().st_mode & 0o777 == 0o600


def test_cli_history_and_undo(memstrata_home: Path) -> None:
    """history lists changes (JSON too); undo N restores; a conflict exits 1 with advice."""
    runner = CliRunner()
    assert runner.invoke(cli, ["memory", "history"]).output == "No memory changes recorded yet.\n"
    runner.invoke(cli, ["memory", "add", "alpha"])
    runner.invoke(cli, ["memory", "add", "beta"])
    listed = json.loads(runner.invoke(cli, ["memory", "history", "--json"]).output)
    assert [c["id"] for c in listed] == [2, 1]
    assert listed[0]["who"] == "cli" and listed[0]["before_bytes"] == 5
    table = runner.invoke(cli, ["memory", "history", "-n", "1"]).output
    rows = [line for line in table.splitlines() if line.startswith("2\t")]
    assert len(rows) == 1 and "\tadd\tcli\t" in rows[0] and "1\t" not in table
    refused = runner.invoke(cli, ["memory", "undo", "1"])
    assert refused.exit_code == 1 and "--force" in refused.stderr
    done = runner.invoke(cli, ["memory", "undo", "2"])
    assert done.exit_code == 0 and "recorded as change #3" in done.output
    assert FileMemory(memstrata_home).entries("memory") == ["alpha"]
    forced = runner.invoke(cli, ["memory", "undo", "1", "--force", "--json"])
    assert json.loads(forced.output)["undoes"] == 1
    assert not FileMemory(memstrata_home).path("memory").exists()


_WRITER = """
import sys
from memstrata.memory.files import FileMemory
memory = FileMemory(lock_timeout=60)
for i in range(int(sys.argv[2])):
    memory.add("memory", f"writer {sys.argv[1]} entry {i}")
"""


def test_history_chain_is_consistent_under_concurrent_processes(memstrata_home: Path) -> None:
    """Four processes writing at once: one row per write, each starting where the last ended."""
    env = dict(os.environ, MEMSTRATA_HOME=str(memstrata_home))
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(n), "8"], env=env) for n in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    changes = list(reversed(MemoryHistory(memstrata_home / "memory_history.db").list(limit=100)))
    assert len(changes) == 32
    for previous, change in itertools.pairwise(changes):
        assert change.before == previous.after
    assert changes[-1].after == FileMemory(memstrata_home).path("memory").read_bytes()
