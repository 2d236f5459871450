"""The session store under real concurrent processes, SIGKILLed writers and racing opens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstrata.store.sqlite import migrations
from memstrata.store.sqlite.store import SessionStore

WORKER = Path(__file__).parent / "workers" / "store_worker.py"
sys.path.insert(0, str(WORKER.parent))
from store_worker import cjk_code  # noqa: E402


def _spawn(home: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, MEMSTRATA_HOME=str(home))
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _collect(procs: list[subprocess.Popen[str]], timeout: float) -> list[str]:
    """Wait for every process; kill the rest if one fails, so none outlives the test."""
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err
            outputs.append(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


def _run_stress(
    home: Path, db: Path, workers: int, per_worker: int, timeout: float
) -> dict[str, float]:
    SessionStore(db).close()  # created up front so every worker races on writes only
    stop = home / "stop"
    searchers = [_spawn(home, "search", str(db), str(stop)) for _ in range(2)]
    writers = [_spawn(home, "append", str(db), str(w), str(per_worker)) for w in range(workers)]
    try:
        results = [json.loads(line) for line in _collect(writers, timeout)]
    finally:
        stop.touch()
        queries = sum(json.loads(line)["queries"] for line in _collect(searchers, 60))
    assert queries > 0

    with SessionStore(db) as store:
        returned = [i for r in results for i in r["ids"]]
        assert len(returned) == len(set(returned)) == workers * per_worker
        with store.read_conn() as conn:
            present = {r[0] for r in conn.execute("SELECT id FROM messages")}
        assert set(returned) == present
        shared = store.get_session("shared")
        assert shared is not None
        assert shared["message_count"] == sum(r["shared"] for r in results)
        assert shared["tool_call_count"] == sum(r["shared_calls"] for r in results)
        for w, r in enumerate(results):
            own = store.get_session(f"own-{w}")
            assert own is not None
            assert own["message_count"] == r["own"]
            assert own["tool_call_count"] == r["own_calls"]
        with store.read_conn() as conn:
            hits = conn.execute(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'token'"
            ).fetchone()[0]
            cjk_hits = conn.execute(
                "SELECT count(*) FROM messages_fts_cjk WHERE messages_fts_cjk MATCH '\"共享 享消\"'"
            ).fetchone()[0]
        assert hits == workers * per_worker
        assert cjk_hits == sum(r["shared"] for r in results)
        report = store.integrity_check()
        assert report["ok"], report
    return {
        "single_rows_per_s": sum(r["single_rows_per_s"] for r in results) / workers,
        "batch_rows_per_s": sum(r["batch_rows_per_s"] for r in results) / workers,
    }


def test_concurrent_writers_and_searchers_lose_nothing(tmp_path: Path) -> None:
    """Four writers (single and batch appends) beside two searchers keep rows and counters exact."""
    figures = _run_stress(tmp_path, tmp_path / "state.db", workers=4, per_worker=2000, timeout=240)
    print(f"\nper-writer rows/s under contention: {figures}")


@pytest.mark.stress
def test_concurrent_writers_long(tmp_path: Path) -> None:
    """Six writers with 6,000 appends each keep every row, counter and index exact."""
    figures = _run_stress(tmp_path, tmp_path / "state.db", workers=6, per_worker=6000, timeout=1200)
    print(f"\nper-writer rows/s under contention: {figures}")


def test_sigkilled_writer_loses_no_returned_append(tmp_path: Path) -> None:
    """A writer killed mid-stream leaves an intact file with every returned append indexed."""
    db = tmp_path / "state.db"
    proc = _spawn(tmp_path, "forever", str(db))
    assert proc.stdout is not None
    returned: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(returned) < 400 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            mid, seq = line.split()
            returned[int(mid)] = int(seq)
    finally:
        proc.send_signal(signal.SIGKILL)
    # Lines printed after the last read are returned appends too.
    rest, _ = proc.communicate(timeout=30)
    for line in rest.splitlines():
        mid, seq = line.split()
        returned[int(mid)] = int(seq)
    assert len(returned) >= 400, "the writer did not get going"

    with SessionStore(db) as store:
        with store.read_conn() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            rows = {
                r["id"]: r["content"]
                for r in conn.execute("SELECT id, content FROM messages WHERE session_id='crash'")
            }
            for mid, seq in returned.items():
                assert mid in rows, f"returned append {mid} is missing"
                found = conn.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                    (f"crashtok{seq}x",),
                ).fetchall()
                assert [r[0] for r in found] == [mid]
                if "鑫" in rows[mid]:
                    code = cjk_code(seq)
                    phrase = " ".join(code[i : i + 2] for i in range(len(code) - 1))
                    found = conn.execute(
                        "SELECT rowid FROM messages_fts_cjk WHERE messages_fts_cjk MATCH ?",
                        (f'"{phrase}"',),
                    ).fetchall()
                    assert [r[0] for r in found] == [mid]
        session = store.get_session("crash")
        assert session is not None
        assert session["message_count"] == len(rows)
        assert store.check_indexes() == []


def test_processes_migrating_a_fresh_file_at_once(tmp_path: Path) -> None:
    """Four processes opening a new database at the same instant apply each migration once."""
    db = tmp_path / "fresh" / "state.db"
    go = tmp_path / "go"
    procs = [_spawn(tmp_path, "open", str(db), str(go)) for _ in range(4)]
    time.sleep(0.5)  # let every interpreter reach its wait loop
    go.touch()
    assert _collect(procs, 120) == ["ok"] * 4
    with SessionStore(db) as store:
        with store.read_conn() as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY id")]
            assert names == [name for name, _ in migrations.MIGRATIONS]
            assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 4
        assert store.integrity_check()["ok"]
