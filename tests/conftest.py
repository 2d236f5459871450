"""Shared fixtures: every test gets its own MEMSTRATA_HOME; ``server`` is a fake LLM server.

A module that needs a server configured differently (chunk sizes, embeddings) defines
its own ``server`` fixture, which takes precedence over the one here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.testing import FakeLLMServer


@pytest.fixture(autouse=True)
def memstrata_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point MEMSTRATA_HOME at a fresh folder and clear memstrata/LLM environment."""
    home = tmp_path / "home"
    home.mkdir()
    for var in list(os.environ):
        # A developer's own LLM settings or overrides must never leak into a test.
        if var.startswith(("OPENAI_", "ANTHROPIC_", "MEMSTRATA_")) and not var.startswith(
            "MEMSTRATA_TEST_"
        ):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MEMSTRATA_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeLLMServer]:
    """One fake server for the module (clients are costly to build: TLS setup)."""
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def server(shared_server: FakeLLMServer) -> FakeLLMServer:
    """The module's fake server, reset: no requests, script, rules or counters."""
    shared_server.reset()
    return shared_server
