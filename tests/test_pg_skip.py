"""PostgreSQL tests skip with one clear line when no server answers, unless required."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent
DEAD_DSN = "postgresql://127.0.0.1:1/nothing"


def run_pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a one-test module marked ``postgres`` under this folder's conftest."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(TESTS / "helpers.py", tmp_path / "helpers.py")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = -ra --strict-markers -p no:cacheprovider\n"
        "markers =\n    postgres: needs a server\n",
        encoding="utf-8",
    )
    (tmp_path / "test_needs_pg.py").write_text(
        "import pytest\n\n\n@pytest.mark.postgres\ndef test_server() -> None:\n"
        "    import psycopg\n    from conftest import PG_DSN\n\n"
        "    psycopg.connect(PG_DSN, connect_timeout=2).close()\n",
        encoding="utf-8",
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_TEST_PG")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_unreachable_server_skips_with_its_reason(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, MEMSTRATA_TEST_PG_DSN=DEAD_DSN)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    lines = [line for line in done.stdout.splitlines() if line.startswith("PostgreSQL tests")]
    assert len(lines) == 1 and DEAD_DSN in lines[0] and "MEMSTRATA_TEST_PG_DSN" in lines[0]


def test_required_server_fails_instead_of_skipping(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, MEMSTRATA_TEST_PG_DSN=DEAD_DSN, MEMSTRATA_TEST_PG_REQUIRED="1")
    assert done.returncode == 1
    assert "1 failed" in done.stdout


def test_ci_requires_the_server() -> None:
    script = (TESTS.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "export MEMSTRATA_TEST_PG_REQUIRED=1" in script


def test_no_test_prints_into_the_progress_output() -> None:
    """Figures go to record_property or the hardening log: a print with capture
    disabled lands in the middle of pytest's dots."""
    offenders = [
        path.name
        for path in TESTS.glob("test_*.py")
        if "capsys.disabled(" in path.read_text(encoding="utf-8") and path.name != "test_pg_skip.py"
    ]
    assert offenders == []
