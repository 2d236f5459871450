"""Real storage faults: a full disk, a read-only home and a home owned by another user.

Each scenario runs in a worker process (tests/workers/fault_worker.py). The full and
read-only disks are real tmpfs mounts made inside ``unshare -rm`` (a private user and mount
namespace: no root on the host, and the mount disappears with the worker). Every scenario
checks that the error names the fix, reaches the model and the CLI as text (never a
traceback), and that every write acknowledged before the fault is still there afterwards.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import record

WORKER = Path(__file__).parent / "workers" / "fault_worker.py"


@functools.cache
def _can_mount() -> str | None:
    """None when ``unshare -rm`` can mount a tmpfs here, else why not."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare/mount are not installed"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k t $d"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"user namespaces with mounts are unavailable: {probe.stderr.strip()}"
    return None


def _run(*args: str, namespace: bool, timeout: float = 60) -> dict[str, Any]:
    prefix = ["unshare", "-rm"] if namespace else []
    proc = subprocess.run(
        [*prefix, sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    # The worker's own stderr may hold logged warnings; what a user sees from the CLI is
    # captured per run in the report and checked there.
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def _needs_mount() -> None:
    reason = _can_mount()
    if reason is not None:
        pytest.skip(reason)


def _assert_cli_said(run: dict[str, Any], *phrases: str) -> None:
    assert run["code"] == 1, run
    assert run["stderr"].startswith("Error: "), run
    assert "Traceback" not in run["stderr"] + run["stdout"]
    for phrase in phrases:
        assert phrase in run["stderr"], (phrase, run["stderr"])


def _lost(report: dict[str, Any], acked: str, *seen: str) -> int:
    # A None reading (store unreadable while the disk was full) is checked after.
    return sum(
        len(set(report[acked]) - set(report[key])) for key in seen if report[key] is not None
    )


def _full_disk(tmp_path: Path, size: str, slack_kib: int) -> dict[str, Any]:
    report = _run("full", str(tmp_path / "mnt"), size, str(slack_kib), namespace=True)
    record(
        kind="fault",
        fault=f"full disk (tmpfs {size}, {slack_kib} KiB left)",
        acked=len(report["acked_entries"]) + len(report["acked_messages"]),
        lost=_lost(report, "acked_entries", "entries_while_full", "entries_after")
        + _lost(report, "acked_messages", "messages_while_full", "messages_after"),
    )
    return report


def test_full_disk_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    """On a full tmpfs, memory and store writes fail with "disk is full", lose nothing
    acknowledged, leave no temp file, and work again once space is freed."""
    _needs_mount()
    report = _full_disk(tmp_path, "3m", 48)
    memory_error, store_error = report["errors"]["memory"], report["errors"]["store"]
    assert memory_error["type"] == "AtomicWriteError"
    assert "disk is full: free some space" in memory_error["error"]
    assert store_error["type"] == "StorageError"
    assert "rolled back" in store_error["error"]
    assert "every earlier write is kept" in store_error["error"]
    assert "disk is full: free some disk space" in store_error["error"]
    # The model and the user get the same advice as text.
    assert report["tool"]["success"] is False
    assert "disk is full" in report["tool"]["error"]
    _assert_cli_said(report["cli"], "disk is full")
    # Nothing acknowledged was lost, nothing half-written is visible.
    assert report["entries_while_full"] == report["acked_entries"]
    assert report["messages_while_full"] in (None, report["acked_messages"])
    assert report["temps_while_full"] == []
    # With space back, writing resumes on the same files.
    assert report["entries_after"] == [*report["acked_entries"], "after space was freed"]
    assert report["messages_after"] == [*report["acked_messages"], "after space was freed"]
    assert report["temps_after"] == []


def test_read_only_home_refuses_writes_and_still_reads(tmp_path: Path) -> None:
    """On a read-only file system every write says to move MEMSTRATA_HOME, reads still
    work (memory, a readonly store), and not one byte of the home changes."""
    _needs_mount()
    report = _run("readonly", str(tmp_path / "mnt"), namespace=True)
    record(
        kind="fault",
        fault="read-only home (tmpfs remounted ro)",
        acked=len(report["acked_entries"]) + len(report["acked_messages"]),
        lost=_lost(report, "acked_entries", "entries_after")
        + _lost(report, "acked_messages", "messages_after"),
    )
    attempts = report["attempts"]
    assert attempts["load_errors"] == {"ok": True, "value": {}}
    assert attempts["entries"]["value"] == report["acked_entries"]
    for write in ("add", "replace", "remove"):
        assert attempts[write]["memstrata"], attempts[write]
        assert "read-only file system: point MEMSTRATA_HOME elsewhere" in attempts[write]["error"]
    opened = attempts["store_open"]
    assert opened["memstrata"] and "read-only file system" in opened["error"]
    assert "MEMSTRATA_HOME at a writable folder" in opened["error"]
    assert "damaged" not in opened["error"]  # a healthy file must not be "repaired"
    assert attempts["store_readonly_search"] == {"ok": True, "value": 5}
    assert report["tool"]["memory_add"]["success"] is False
    assert "read-only file system" in report["tool"]["memory_add"]["error"]
    assert report["tool"]["memory_read"]["entries"] == report["acked_entries"]
    assert report["tool"]["search"]["success"] is False
    assert "read-only file system" in report["tool"]["search"]["error"]
    add, listing, search = report["cli"]
    _assert_cli_said(add, "read-only file system")
    assert listing["code"] == 0 and "seed entry 2" in listing["stdout"]
    # `memstrata search` only reads: it falls back to a read-only store and answers.
    assert search["code"] == 0 and "seed" in search["stdout"], search
    assert all(report["unchanged"].values()), report["unchanged"]
    assert report["entries_after"] == report["acked_entries"]
    assert report["messages_after"] == report["acked_messages"]


@pytest.fixture
def foreign_home(tmp_path: Path) -> Iterator[Path]:
    """A home with acknowledged writes that the worker will not be allowed to write."""
    if os.geteuid() == 0:
        # The worker drops to uid 65534; pytest's tmp folders are 0700, so the home goes
        # in a fresh folder that uid may traverse. It stays root's (0700 memories).
        base = Path(tempfile.mkdtemp(prefix="memstrata-foreign-"))
        base.chmod(0o755)
    else:
        base = tmp_path / "foreign"
        base.mkdir()
    home = base / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    _run("seed", str(home), namespace=False)
    if os.geteuid() != 0:
        # Not root: take write permission away instead (read stays allowed).
        for path in [*home.rglob("*"), home]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield home
    finally:
        for path in [home, *home.rglob("*")]:
            path.chmod(0o700 if path.is_dir() else 0o600)
        if base != tmp_path / "foreign":
            shutil.rmtree(base)


def test_permission_denied_names_the_owner_and_the_fix(foreign_home: Path) -> None:
    """A home this user may not write gives errors that say whose it is and to chown it
    back; memory is never overwritten and the database is never called damaged."""
    home = foreign_home
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    report = _run("denied", str(home), namespace=False)
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    record(
        kind="fault",
        fault="permission denied (home of another user)",
        acked=8,  # seed_home: 3 entries and 5 messages
        lost=sum(after.get(p) != v for p, v in before.items()),
    )
    attempts = report["attempts"]
    fix = "chown -R <you>" if report["uid"] != os.geteuid() else "writable"
    for write in ("add", "remove"):
        assert attempts[write]["memstrata"], attempts[write]
        assert "Permission denied" in attempts[write]["error"]
        assert fix in attempts[write]["error"] or "writable" in attempts[write]["error"]
    opened = attempts["store_open"]
    assert opened["memstrata"], opened
    assert "damaged" not in opened["error"] and "move it aside" not in opened["error"]
    assert "Permission denied" in opened["error"] or "writable" in opened["error"]
    assert report["tool"]["memory_add"]["success"] is False
    assert report["tool"]["search"]["success"] is False
    for run in report["cli"]:
        assert "Traceback" not in run["stderr"] + run["stdout"], run
        if run["code"] != 0:
            assert run["stderr"].startswith("Error: ")
    add = report["cli"][0]
    _assert_cli_said(add, "Permission denied")
    assert {p: v for p, v in after.items() if p in before} == before


@pytest.mark.stress
@pytest.mark.parametrize(
    ("size", "slack_kib"),
    [("2m", 0), ("2m", 16), ("3m", 4), ("4m", 64), ("6m", 200), ("8m", 1)],
)
def test_full_disk_at_many_fill_levels(tmp_path: Path, size: str, slack_kib: int) -> None:
    """The full-disk scenario at several disk sizes and amounts of space left."""
    _needs_mount()
    report = _full_disk(tmp_path, size, slack_kib)
    for error in report["errors"].values():
        assert "disk is full" in error["error"], error
    assert report["entries_after"][: len(report["acked_entries"])] == report["acked_entries"]
    assert report["messages_after"][: len(report["acked_messages"])] == report["acked_messages"]
    assert report["temps_after"] == []


def test_a_new_session_store_is_private_to_its_user(tmp_path: Path) -> None:
    """state.db and its -wal/-shm files are created 0600 even in a world-readable folder
    and under a permissive umask: transcripts can hold secrets."""
    from memstrata import SessionStore  # the worker imports it too; here it runs in-process

    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    old_umask = os.umask(0o022)
    try:
        with SessionStore(folder / "state.db") as store:
            store.create_session("s1", source="cli")
            store.append_message("s1", "user", content="my token is hunter2")
            modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    finally:
        os.umask(old_umask)
    assert modes == {"state.db": 0o600, "state.db-wal": 0o600, "state.db-shm": 0o600}
