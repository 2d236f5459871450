"""benchmarks/prefix_ab.py on a small real store: both sides answer, the report is written,
and a base whose answers differ stops the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from memstrata.store.sqlite.store import SessionStore

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "prefix_ab.py"


def _store(path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import corpus
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    with SessionStore(path) as store:
        for s in corpus.generate(3000):
            store.create_session(s.id, source=s.source)
            store.append_messages(s.id, s.messages)


def _run(db: Path, base: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--db", str(db), "--base-src", str(base)]
    cmd += ["--rounds", "1", "--repeats", "1", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def test_prefix_ab_compares_answers_then_times(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    out = tmp_path / "ab.md"
    done = _run(db, ROOT / "src", out)
    assert done.returncode == 0, done.stderr
    report = out.read_text()
    assert "identical ids, scores and snippets" in report
    assert report.count("| base |") == 1 and report.count("| this |") == 1
    assert report.count("\n- `") == 40  # one line per query of the prefix class

    # A base whose search ranks differently: the run stops before timing anything.
    other = tmp_path / "other"
    src = other / "memstrata"
    shutil.copytree(ROOT / "src" / "memstrata", src)
    rank = src / "store" / "rank.py"
    text = rank.read_text()
    assert "cands.sort(key=lambda c: (-c.score, -c.id))" in text
    rank.write_text(text.replace("(-c.score, -c.id))", "(c.score, c.id))"))  # worst first
    out.unlink()
    stopped = _run(db, other, out)
    assert stopped.returncode == 1 and "results differ" in stopped.stderr
    assert not out.exists()
