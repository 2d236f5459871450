"""Locks held by a process that died: the memory file lock and SQLite's write lock.

A worker takes the lock for real and is SIGKILLed while holding it: in the middle of a
memory write (temp file written, not yet renamed) or inside an open SQLite write
transaction. While it lives, a second writer gets a clear timeout that says what to do;
once it is dead, the next writer proceeds at once, the dead writer's unacknowledged
change is gone, and every acknowledged write is intact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import record
from memstrata import FileMemory, SessionStore, fileio
from memstrata.config import Config
from memstrata.errors import DatabaseBusyError, LockTimeoutError

WORKER = Path(__file__).parent / "workers" / "fault_worker.py"


def _start(*args: str, ready: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != ready:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"worker did not get ready ({line!r}): {err}")
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_memory_lock_of_a_killed_writer_is_free_and_loses_nothing(memstrata_home: Path) -> None:
    """A writer SIGKILLed between its temp file and the rename, lock held: a waiter times
    out with the fix while it lives; after its death the next write goes through at once,
    its temp file is cleaned up and its unacknowledged entry never appears."""
    memory = FileMemory(memstrata_home, lock_timeout=0.3)
    acked = ["Acknowledged fact one", "Acknowledged fact two"]
    for entry in acked:
        memory.add("memory", entry)
    holder = _start("hold-memory-lock", str(memstrata_home), ready="stalled")
    try:
        folder = memory.path("memory").parent
        temps = [n for n in os.listdir(folder) if n.endswith(fileio.TEMP_SUFFIX)]
        assert len(temps) == 1  # the dead writer's half-done work
        with pytest.raises(LockTimeoutError, match=r"Another memstrata process is writing; retry"):
            memory.add("memory", "Blocked while the holder lives")
    finally:
        _kill(holder)
    # With lock_timeout 0.3 s, a stale lock would make this raise LockTimeoutError.
    memory.add("memory", "Written after the holder died")
    record(
        kind="fault",
        fault="memory lock held by a SIGKILLed writer",
        acked=len(acked),
        lost=len(set(acked) - set(memory.entries("memory"))),
    )
    assert memory.entries("memory") == [*acked, "Written after the holder died"]
    assert [n for n in os.listdir(folder) if n.endswith(fileio.TEMP_SUFFIX)] == []
    assert "never acknowledged" not in memory.path("memory").read_text(encoding="utf-8")


def test_sqlite_write_lock_of_a_killed_writer_is_free_and_loses_nothing(
    memstrata_home: Path,
) -> None:
    """A process SIGKILLed inside an open write transaction: a writer waiting on it gets
    DatabaseBusyError naming store.busy_timeout_ms; after its death writes proceed, its
    uncommitted rows are gone and every acknowledged message is intact and searchable."""
    (memstrata_home / "config.toml").write_text("[store]\nbusy_timeout_ms = 100\n")
    db = memstrata_home / "state.db"
    holder = _start("hold-sqlite-lock", str(db), "40", ready="holding")
    config = Config.load(memstrata_home)
    try:
        store = SessionStore(db, config=config)
        with pytest.raises(DatabaseBusyError, match=r"store\.busy_timeout_ms"):
            store.append_message("s1", "user", content="blocked while the holder lives")
    finally:
        _kill(holder)
    # With busy_timeout_ms 100, a lock left behind would make this raise DatabaseBusyError.
    store.append_message("s1", "user", content="written after the holder died")
    contents = [m["content"] for m in store.get_messages("s1")]
    record(
        kind="fault",
        fault="SQLite write lock held by a SIGKILLed process",
        acked=40,
        lost=len({f"acked message {k}" for k in range(40)} - set(contents)),
    )
    assert contents == [*(f"acked message {k}" for k in range(40)), "written after the holder died"]
    assert store.check_indexes() == []
    assert len(store.search_messages("acked", limit=100)) == 40
    assert store.search_messages("uncommitted") == []
    assert store.integrity_check()["ok"] is True
    store.close()


@pytest.mark.stress
@pytest.mark.parametrize("round_", range(10))
def test_killed_lock_holders_many_rounds(memstrata_home: Path, round_: int) -> None:
    """Both dead-holder scenarios again, each round in a fresh home."""
    for name, scenario in (
        ("memory", test_memory_lock_of_a_killed_writer_is_free_and_loses_nothing),
        ("sqlite", test_sqlite_write_lock_of_a_killed_writer_is_free_and_loses_nothing),
    ):
        home = memstrata_home / f"{name}-{round_}"
        home.mkdir()
        scenario(home)
