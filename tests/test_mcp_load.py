"""The MCP load benchmark, run briefly: many clients on two server processes lose nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "mcp_load.py"


@pytest.mark.stress
def test_sixteen_clients_on_two_servers_lose_no_write() -> None:
    """16 MCP clients write and search for a few seconds against two HTTP server
    processes on one home: every acknowledged write is stored, no call fails."""
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--seconds",
            "4",
            "--clients",
            "16",
            "--servers",
            "2",
            "--messages",
            "2000",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = json.loads(proc.stdout)
    assert result["servers"] == 2
    assert result["lost_writes"] == 0
    assert result["errors"] == 0
    assert result["server_tracebacks"] == 0
    assert result["ops"]["memory_add"]["count"] > 0
    assert result["ops"]["session_search"]["count"] > 0
    assert result["acknowledged_writes"] == result["ops"]["memory_add"]["count"]
