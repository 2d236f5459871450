"""Curated memory under real concurrent processes and SIGKILLed writers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memstrata.memory.files import FileMemory
from memstrata.memory.format import parse_entries, roundtrip_mismatch, split_raw

WORKER = Path(__file__).parent / "workers" / "memory_worker.py"
BIG_LIMIT = "1000000"


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MEMSTRATA_HOME"] = str(home)
    env["MEMSTRATA_MEMORY__MEMORY_CHAR_LIMIT"] = BIG_LIMIT
    env["MEMSTRATA_MEMORY__LOCK_TIMEOUT"] = "120"
    return env


Spawn = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def spawn(memstrata_home: Path) -> Iterator[Spawn]:
    """Start worker processes; whatever happens, none outlives the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            env=_env(memstrata_home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()


def _finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return out


def _raw(home: Path) -> str:
    return (home / "memories" / "MEMORY.md").read_text(encoding="utf-8")


def test_eight_processes_adding_lose_nothing(memstrata_home: Path, spawn: Spawn) -> None:
    """Eight processes each adding 100 entries leave all 800 on disk exactly once."""
    workers, per_worker = 8, 100
    procs = [spawn("adds", str(w), str(per_worker)) for w in range(workers)]
    for proc in procs:
        _finish(proc)
    raw = _raw(memstrata_home)
    assert not roundtrip_mismatch(raw)
    entries = split_raw(raw)
    keys = [entry.split(":", 1)[0] for entry in entries]
    expected = {f"w{w}-e{k}" for w in range(workers) for k in range(per_worker)}
    assert len(keys) == len(expected) == len(set(keys))
    assert set(keys) == expected
    # Each worker's own entries stay in the order it added them.
    for w in range(workers):
        mine = [int(k.split("-e")[1]) for k in keys if k.startswith(f"w{w}-")]
        assert mine == sorted(mine)


def test_mixed_replace_remove_across_processes_no_lost_update(
    memstrata_home: Path, spawn: Spawn
) -> None:
    """Counters bumped by replace and temporaries added/removed by 6 processes all survive."""
    workers, iterations, counters = 6, 80, 4
    procs = [
        spawn("counters", str(w), str(iterations), str(counters), str(w * 7 + 1))
        for w in range(workers)
    ]
    expected: set[str] = set()
    for w, proc in enumerate(procs):
        state = json.loads(_finish(proc))
        assert sum(state["counters"]) > 0
        expected.update(f"p{w}-c{j}=[{v}]" for j, v in enumerate(state["counters"]))
        expected.update(state["temps"])
    raw = _raw(memstrata_home)
    assert not roundtrip_mismatch(raw)
    entries = split_raw(raw)
    assert len(entries) == len(set(entries))
    assert set(entries) == expected


def _read_log(path: Path) -> tuple[int | None, int | None]:
    """Last value a crash writer announced and last one it confirmed."""
    about = wrote = None
    for line in path.read_text().splitlines():
        kind, _, value = line.partition(" ")
        if kind == "about":
            about = int(value)
        elif kind == "wrote":
            wrote = int(value)
    return about, wrote


def _stale_temps(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".MEMORY.md.") and n.endswith(".tmp")]


def test_sigkilled_writers_leave_a_completed_state(memstrata_home: Path, spawn: Spawn) -> None:
    """Writers SIGKILLed at random moments leave a file equal to a state some write produced."""
    rng = random.Random(20261202)
    memories = memstrata_home / "memories"
    writers: dict[str, Path] = {}
    completed = rounds = 0
    leftover_temps = 0
    while completed < 200 or rounds < 8:
        rounds += 1
        assert rounds <= 100, f"only {completed} writes completed in {rounds} rounds"
        names = [f"r{rounds}w{i}" for i in range(2)]
        procs = []
        for name in names:
            log = memstrata_home.parent / f"{name}.log"
            writers[name] = log
            procs.append(spawn("crash", name, str(log)))
        deadline = time.monotonic() + 60
        while not all(writers[n].exists() and "ready" in writers[n].read_text() for n in names):
            assert time.monotonic() < deadline, "crash writers never became ready"
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, dead[0].communicate()[1] if dead else ""
            time.sleep(0.01)
        # Each writer dies at its own random moment; they write nonstop, so a kill lands
        # anywhere: waiting for the lock, reading, writing the temp file, renaming.
        ready_at = time.monotonic()
        kill_at = [(rng.uniform(0.02, 0.4), proc) for proc in procs]
        for when, proc in sorted(kill_at, key=lambda pair: pair[0]):
            time.sleep(max(0.0, ready_at + when - time.monotonic()))
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.communicate(timeout=30)
            assert proc.returncode == -signal.SIGKILL
        leftover_temps += len(_stale_temps(memories))

        raw = _raw(memstrata_home)
        assert not roundtrip_mismatch(raw)
        entries = split_raw(raw)
        by_writer: dict[str, list[int]] = {}
        for entry in entries:
            head = entry.split(" ", 1)[0]
            name, _, value = head.partition("=")
            assert name in writers, f"unknown entry {entry[:40]!r}"
            by_writer.setdefault(name, []).append(int(value.strip("[]")))
        completed = 0
        for name, log in writers.items():
            about, wrote = _read_log(log)
            values = by_writer.get(name, [])
            assert len(values) <= 1, f"{name} appears {len(values)} times"
            allowed = {v for v in (about, wrote) if v is not None}
            if wrote is None:
                assert values in ([], [0]) if about == 0 else values == []
            else:
                assert values and values[0] in allowed, (name, values, about, wrote)
            completed += 0 if wrote is None else wrote + 1

    # A stale temp file (left by a killed writer, or planted) is cleaned by the next write.
    (memories / ".MEMORY.md.planted.tmp").write_text("partial")
    survivor = next(iter(writers))
    FileMemory(memory_char_limit=1_000_000).add("memory", f"after the crashes, {survivor} survived")
    assert _stale_temps(memories) == []
    assert parse_entries(_raw(memstrata_home))[-1].startswith("after the crashes")
    print(f"{rounds} rounds, {completed} completed writes, {leftover_temps} temp files seen")


@pytest.mark.parametrize("threads", [4])
def test_threads_of_one_process_share_a_store(memstrata_home: Path, threads: int) -> None:
    """Several threads writing through one FileMemory lose no entry."""
    import threading

    memory = FileMemory(memory_char_limit=1_000_000)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for k in range(50):
                memory.add("memory", f"t{t}-e{k}")
                if k % 5 == 4:
                    memory.replace("memory", f"t{t}-e{k - 1}", f"t{t}-e{k - 1}-edited")
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert errors == []
    entries = memory.entries("memory")
    assert len(entries) == threads * 50
    assert sum(e.endswith("-edited") for e in entries) == threads * 10
