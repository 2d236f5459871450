"""Naming a session: tables show the shortest unique id prefix, every command takes a
unique prefix or an exact title, and ``--json`` keeps full ids."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from click.testing import CliRunner

from memstrata.cli import cli
from memstrata.errors import AmbiguousSessionError, SessionNotFoundError
from memstrata.store.sqlite.store import SessionStore

LONG_A = "20261203_195647_c1a2b3d4e5f6"
LONG_B = "20261203_195647_c9f8e7d6c5b4"
IMPORTED = "chatgpt-c-n0a1b2c3d4e5f60718293a4b5c6d7e8f"


def fill(store: Any) -> None:
    for sid, title, text in [
        (LONG_A, "Kyoto trip", "we booked the ryokan in Kyoto"),
        (LONG_B, None, "nginx deadlock under load"),
        (IMPORTED, "京都旅行", "寺院の拝観時間"),
    ]:
        store.create_session(sid, started_at=1.0)
        store.append_message(sid, "user", text, timestamp=2.0)
        if title:
            store.set_session_title(sid, title)


def test_short_ids_are_the_shortest_unique_prefixes(store: Any) -> None:
    fill(store)
    short = store.short_ids([LONG_A, LONG_B, IMPORTED])
    assert short == {
        LONG_A: "20261203_195647_c1",
        LONG_B: "20261203_195647_c9",
        IMPORTED: "chatgpt-",
    }
    for sid, prefix in short.items():
        assert store.resolve_session(prefix) == sid
        # One character fewer is ambiguous (or below the floor of eight).
        if len(prefix) > 8:
            with pytest.raises(AmbiguousSessionError):
                store.resolve_session(prefix[:-1])


def test_an_id_that_is_a_prefix_of_another_is_shown_whole(store: Any) -> None:
    for sid in ("abcdefgh", "abcdefghijk"):
        store.create_session(sid, started_at=1.0)
    assert store.short_ids(["abcdefgh", "abcdefghijk"]) == {
        "abcdefgh": "abcdefgh",
        "abcdefghijk": "abcdefghi",
    }
    assert store.resolve_session("abcdefgh") == "abcdefgh"


def test_resolve_takes_a_title_a_prefix_or_a_cut_cell(store: Any) -> None:
    fill(store)
    assert store.resolve_session("Kyoto trip") == LONG_A
    assert store.resolve_session("京都旅行") == IMPORTED
    assert store.resolve_session("20261203_195647_c1…") == LONG_A
    assert store.resolve_session("chatgpt-c-n...") == IMPORTED
    with pytest.raises(AmbiguousSessionError):
        store.resolve_session("20261203_195647_c…")
    with pytest.raises(SessionNotFoundError, match="id, id prefix or title 'Osaka trip'"):
        store.resolve_session("Osaka trip")


@pytest.fixture
def filled(memstrata_home: Path) -> Path:
    with SessionStore() as store:
        fill(store)
    return memstrata_home


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_piped_tables_and_json_keep_full_ids(filled: Path) -> None:
    """A script keeps what it reads; a short prefix may turn ambiguous later."""
    code, out = invoke("sessions", "list")
    assert code == 0, out
    first_column = [line.split("\t")[0] for line in out.splitlines()[1:]]
    assert sorted(first_column) == sorted([LONG_A, LONG_B, IMPORTED])
    code, out = invoke("sessions", "list", "--json")
    assert sorted(r["id"] for r in json.loads(out)) == sorted([LONG_A, LONG_B, IMPORTED])


@pytest.mark.parametrize("ref", ["20261203_195647_c1", "Kyoto trip"])
@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "show", "{ref}"],
        ["sessions", "rename", "{ref}", "Kyoto trip 2027"],
        ["sessions", "export", "{ref}"],
        ["search", "--session", "{ref}", "--no-summary"],
        ["export", "--session", "{ref}", "--out", "{out}"],
        ["forget", "{ref}", "--dry-run"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_every_session_taking_command_accepts_a_prefix_or_a_title(
    filled: Path, tmp_path: Path, command: list[str], ref: str
) -> None:
    args = [a.format(ref=ref, out=tmp_path / "out") for a in command]
    code, out = invoke(*args)
    assert code == 0, out
    assert "ryokan" in out or LONG_A in out or (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command", [["sessions", "list"], ["search"], ["sessions", "search", "Kyoto"]], ids=" ".join
)
def test_an_80_column_terminal_shows_short_ids_never_cut(filled: Path, command: list[str]) -> None:
    """In a real terminal the table shows the shortest unique prefixes and squeezes the
    other columns; every id shown resolves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTRATA_", "OPENAI_"))}
    env.update(MEMSTRATA_HOME=str(filled), TERM="xterm", COLUMNS="80", NO_COLOR="1")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "memstrata", *command],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 80),
    )
    child.expect(pexpect.EOF)
    out = str(child.before)
    assert "20261203_195647_c1" in out and LONG_A not in out
    if command != ["sessions", "search", "Kyoto"]:
        assert "20261203_195647_c9" in out and "chatgpt-" in out and IMPORTED not in out
    assert "2026…" not in out and "20261203_195647_c…" not in out
