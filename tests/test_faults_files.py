"""Damaged files: a truncated or corrupted ``state.db``, a truncated memory file.

A damaged session database must be refused with an error that says it is damaged and
what to do (never a bare ``sqlite3`` traceback, never "it is fine"), wherever the damage
sits: the header, a table page, a full-text index page, the tail. A truncated memory
file must never be made worse: every entry still whole in it survives any later write,
and a file memstrata cannot read is refused and left byte for byte as it was.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import record
from memstrata import FileMemory, SessionStore
from memstrata.errors import (
    CuratedMemoryError,
    DriftError,
    StorageError,
    UnreadableFileError,
)
from memstrata.memory.format import parse_entries, serialize
from memstrata.memory.tool import MemoryTool
from memstrata.store.sqlite.salvage import salvage
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox

SESSIONS = 4
PER_SESSION = 30
PAGE = 4096


def _build_db(path: Path) -> list[str]:
    """A store with acknowledged messages; returns their contents in order."""
    contents: list[str] = []
    with SessionStore(path) as store:
        for s in range(SESSIONS):
            store.create_session(f"s{s}", source="cli")
            batch = [
                {"role": "user", "content": f"note {s}-{k} deploy cache " + "lorem " * 60}
                for k in range(PER_SESSION)
            ]
            store.append_messages(f"s{s}", batch)
            contents.extend(m["content"] for m in batch)
    return contents


def _damage(path: Path, how: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    pages = len(data) // PAGE
    if how == "truncate-half":
        del data[len(data) // 2 :]
    elif how == "truncate-header":
        del data[100:]
    elif how == "header":
        data[:100] = rng.randbytes(100)
    elif how == "random-page":
        page = rng.randrange(1, pages)
        data[page * PAGE : (page + 1) * PAGE] = rng.randbytes(PAGE)
    elif how == "zero-page":
        page = rng.randrange(1, pages)
        data[page * PAGE : (page + 1) * PAGE] = bytes(PAGE)
    elif how == "last-page":
        data[-PAGE:] = rng.randbytes(PAGE)
    else:  # pragma: no cover - a typo in the parameter list
        raise AssertionError(how)
    path.write_bytes(bytes(data))


def _exercise(path: Path) -> list[tuple[str, str]]:
    """Open the damaged store and use it; return (operation, outcome) for each step.

    Any exception other than StorageError fails the test: it would reach a user as a
    traceback. A StorageError must say the file is damaged and how to proceed.
    """
    outcomes: list[tuple[str, str]] = []

    def step(name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except StorageError as exc:
            text = str(exc)
            assert "damaged" in text or "malformed" in text, text
            assert "restore a backup" in text and "cp " in text and "salvage" in text, text
            outcomes.append((name, "refused"))
        else:
            outcomes.append((name, "ok"))

    try:
        store = SessionStore(path)
    except StorageError as exc:
        assert "damaged" in str(exc) and "restore a backup" in str(exc), str(exc)
        return [("open", "refused")]
    outcomes.append(("open", "ok"))
    with store:
        step("search", lambda: store.search_messages("deploy cache"))
        step("list", store.list_sessions_rich)
        step("read", lambda: [store.get_messages(f"s{s}") for s in range(SESSIONS)])
        step("append", lambda: store.append_message("s0", "user", content="after damage"))
        step("check", store.check_indexes)
    return outcomes


DAMAGE = ["truncate-half", "truncate-header", "header", "random-page", "zero-page", "last-page"]


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_state_db_is_refused_with_the_fix(tmp_path: Path, how: str) -> None:
    """Wherever state.db is damaged, every call either works or raises StorageError that
    says the file is damaged and to keep a copy and restore a backup."""
    path = tmp_path / "state.db"
    _build_db(path)
    _damage(path, how, random.Random(how))
    before = path.read_bytes()
    outcomes = _exercise(path)
    record(kind="fault", fault=f"damaged state.db ({how})", acked=0, lost=0)
    assert outcomes, how
    if outcomes == [("open", "refused")]:
        # Refused on open: the damaged file was not touched, so a backup copy is exact.
        assert path.read_bytes() == before


@pytest.mark.parametrize("seed", range(6))
def test_a_damaged_page_never_escapes_as_a_sqlite_error(tmp_path: Path, seed: int) -> None:
    """Random pages of a real store overwritten: no sqlite3 exception reaches the caller,
    through the library or through the session_search tool."""
    path = tmp_path / "state.db"
    _build_db(path)
    rng = random.Random(seed)
    _damage(path, rng.choice(["random-page", "zero-page"]), rng)
    _exercise(path)
    record(kind="fault", fault="damaged state.db page, through the session_search tool", lost=0)
    box = Toolbox()
    try:
        store = SessionStore(path)
    except StorageError:
        return
    box.register_tool(SessionSearchTool(store))
    for args in ({"query": "deploy cache"}, {}, {"session_id": "s1"}):
        reply = json.loads(box.dispatch("session_search", args))
        assert isinstance(reply.get("success", True), bool)
        if reply.get("success") is False:
            assert "unexpectedly" not in reply["error"], reply["error"]
    store.close()


def test_damaged_store_through_the_cli_prints_an_error_not_a_traceback(
    tmp_path: Path, memstrata_home: Path
) -> None:
    """`memstrata search` and `sessions list` on a damaged state.db exit 1 with the fix."""
    path = memstrata_home / "state.db"
    _build_db(path)
    _damage(path, "header", random.Random(1))
    for args in (["search", "deploy"], ["sessions", "list"]):
        proc = subprocess.run(
            [sys.executable, "-m", "memstrata", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "MEMSTRATA_HOME": str(memstrata_home)},
        )
        assert proc.returncode == 1, proc
        assert "Traceback" not in proc.stderr + proc.stdout
        assert proc.stderr.startswith("Error: ") and "damaged" in proc.stderr


def test_acknowledged_rows_survive_damage_to_the_index_only(tmp_path: Path) -> None:
    """A damaged full-text index page blocks search with the fix, while every
    acknowledged message stays readable through get_messages."""
    path = tmp_path / "state.db"
    contents = _build_db(path)
    with sqlite3.connect(path) as raw:
        # The root page of the word index's data b-tree: data no message row lives on.
        root = raw.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'messages_fts_data'"
        ).fetchone()[0]
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    start = (root - 1) * PAGE
    data[start : start + PAGE] = random.Random(7).randbytes(PAGE)
    path.write_bytes(bytes(data))
    with SessionStore(path, verify_indexes=False) as store:
        with pytest.raises(StorageError, match="damaged"):
            store.search_messages("deploy")
        kept = [m["content"] for s in range(SESSIONS) for m in store.get_messages(f"s{s}")]
    record(
        kind="fault",
        fault="damaged full-text index page in state.db",
        acked=len(contents),
        lost=len(set(contents) - set(kept)),
    )
    assert kept == contents


def _leaf_pages(path: Path, table: str) -> list[int]:
    with sqlite3.connect(path) as raw:
        try:
            rows = raw.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,)
            ).fetchall()
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table to locate pages")
    return [int(r[0]) for r in rows]


@pytest.mark.parametrize("table", ["messages", "messages_fts_data"])
def test_salvage_copies_every_readable_row_into_a_new_store(tmp_path: Path, table: str) -> None:
    """salvage() of a store with a damaged page recovers every row not on that page into a
    new store whose indexes are rebuilt and searchable; the damaged file is left as it is."""
    path = tmp_path / "state.db"
    contents = _build_db(path)
    victim = _leaf_pages(path, table)[1]
    with sqlite3.connect(path) as raw:
        on_page = raw.execute("SELECT ncell FROM dbstat WHERE pageno = ?", (victim,)).fetchone()[0]
    data = bytearray(path.read_bytes())
    data[(victim - 1) * PAGE : victim * PAGE] = random.Random(victim).randbytes(PAGE)
    path.write_bytes(bytes(data))
    damaged = path.read_bytes()
    copied = salvage(path, tmp_path / "salvaged.db")
    assert path.read_bytes() == damaged
    with SessionStore(tmp_path / "salvaged.db") as store:  # opening runs the index check
        kept = [m["content"] for s in range(SESSIONS) for m in store.get_messages(f"s{s}")]
        hits = store.search_messages("deploy cache", limit=500)
        assert store.integrity_check()["ok"] is True
    assert copied["messages"] == len(kept) and copied["sessions"] == SESSIONS
    assert set(kept) <= set(contents) and kept == sorted(kept, key=contents.index)
    assert len(hits) == len(kept)
    missing = len(contents) - len(kept)
    # Rows stored on the overwritten page are destroyed by the fault itself; any other
    # missing row would be a loss of salvage's.
    destroyed = on_page if table == "messages" else 0
    record(
        kind="fault",
        fault=f"damaged {table} page, then salvage()",
        acked=len(contents),
        destroyed=min(missing, destroyed),
        lost=max(0, missing - destroyed),
    )
    if table == "messages_fts_data":
        assert missing == 0  # an index page holds no message
    else:
        assert 0 < missing <= on_page  # only the rows that were on the damaged page
    with pytest.raises(StorageError, match="already exists"):
        salvage(path, tmp_path / "salvaged.db")


# -- the memory file --------------------------------------------------------------------

ENTRIES = [
    "User prefers concise answers",
    "Deploys go through ops/deploy.sh — never by hand",
    "服务端配置在 config/server.toml",
    "Timezone: UTC+8; works late",
]


def _memory_file(home: Path) -> Path:
    # The exact bytes FileMemory writes for ENTRIES (test_memory checks the format).
    path = home / "memories" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(serialize(ENTRIES), encoding="utf-8")
    return path


TRUNCATIONS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_truncations() -> Iterator[None]:
    yield
    if TRUNCATIONS["tried"]:
        record(
            kind="fault",
            fault="MEMORY.md truncated at a random byte, then written",
            acked=TRUNCATIONS["tried"] * len(ENTRIES),
            lost=TRUNCATIONS["lost"],
            calls=TRUNCATIONS["tried"],
        )


OPS: list[tuple[str, Callable[[FileMemory], object]]] = [
    ("add", lambda m: m.add("memory", "A new fact after truncation")),
    ("replace", lambda m: m.replace("memory", "concise", "User prefers short answers")),
    ("remove", lambda m: m.remove("memory", "Timezone")),
    ("batch", lambda m: m.apply_batch("memory", [{"action": "add", "content": "batched"}])),
]


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cut=st.integers(min_value=0, max_value=400), op=st.sampled_from(OPS))
def test_a_truncated_memory_file_is_never_made_worse(
    memstrata_home: Path, cut: int, op: tuple[str, Callable[[FileMemory], object]]
) -> None:
    """MEMORY.md cut at any byte: loading never raises; a write either succeeds keeping
    every entry still whole in the file, or is refused with the fix and leaves the file
    byte for byte as it was (a DriftError also leaves a .bak copy)."""
    home = memstrata_home / f"cut{cut}-{op[0]}"
    path = _memory_file(home)
    raw = path.read_bytes()
    truncated = raw[: min(cut, len(raw))]
    path.write_bytes(truncated)
    try:
        whole = set(parse_entries(truncated.decode("utf-8"))) & set(ENTRIES)
        decodable = True
    except UnicodeDecodeError:
        whole, decodable = set(), False
    TRUNCATIONS["tried"] += 1
    memory = FileMemory(home)  # load renders a notice for an unreadable file, never raises
    assert (memory.load_errors == {}) == decodable
    try:
        op[1](memory)
    except UnreadableFileError as exc:
        assert not decodable
        assert "not valid UTF-8" in str(exc) and "re-save it as UTF-8" in str(exc)
        assert path.read_bytes() == truncated
    except DriftError as exc:
        assert "edited outside memstrata" in str(exc)
        assert path.read_bytes() == truncated
        backup = exc.details["drift_backup"]
        assert backup is not None and Path(backup).read_bytes() == truncated
    except CuratedMemoryError as exc:  # e.g. the entry to replace was cut away
        assert str(exc)
        assert path.read_bytes() == truncated
    else:
        after = set(parse_entries(path.read_text(encoding="utf-8")))
        survivors = whole - {"Timezone: UTC+8; works late"} if op[0] == "remove" else whole
        if op[0] == "replace":
            survivors = survivors - {"User prefers concise answers"}
        TRUNCATIONS["lost"] += len(survivors - after)
        assert survivors <= after, (survivors - after, truncated)


def test_a_truncated_memory_file_through_the_tool_and_cli(memstrata_home: Path) -> None:
    """A memory file cut inside a multi-byte character is refused as text by the tool and
    by `memstrata memory add`, and is not overwritten."""
    path = _memory_file(memstrata_home)
    raw = path.read_bytes()
    cut = raw.index("服".encode()) + 1
    path.write_bytes(raw[:cut])
    box = Toolbox()
    box.register_tool(MemoryTool(FileMemory(memstrata_home)))
    reply = json.loads(box.dispatch("memory", {"action": "add", "content": "new fact"}))
    assert reply["success"] is False and "not valid UTF-8" in reply["error"]
    proc = subprocess.run(
        [sys.executable, "-m", "memstrata", "memory", "add", "new fact"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "MEMSTRATA_HOME": str(memstrata_home)},
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "not valid UTF-8" in proc.stderr and "re-save it as UTF-8" in proc.stderr
    assert path.read_bytes() == raw[:cut]


@pytest.mark.stress
def test_every_page_of_a_store_damaged_in_turn(tmp_path: Path) -> None:
    """Each page of a real store overwritten in turn (random bytes, then zeros): no
    sqlite3 exception ever reaches the caller."""
    pristine = tmp_path / "pristine.db"
    _build_db(pristine)
    data = pristine.read_bytes()
    path = tmp_path / "state.db"
    tried = 0
    rng = random.Random(0)
    for page in range(1, len(data) // PAGE):
        for filler in (rng.randbytes(PAGE), bytes(PAGE)):
            damaged = bytearray(data)
            damaged[page * PAGE : (page + 1) * PAGE] = filler
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            path.write_bytes(bytes(damaged))
            _exercise(path)
            tried += 1
    record(
        kind="fault", fault="every page of state.db damaged in turn", acked=0, lost=0, calls=tried
    )


def test_salvage_of_a_file_without_a_schema_says_to_restore_a_backup(tmp_path: Path) -> None:
    """A file whose header and schema are gone cannot be salvaged, and says so."""
    path = tmp_path / "state.db"
    _build_db(path)
    _damage(path, "header", random.Random(3))
    with pytest.raises(StorageError, match="Restore a backup"):
        salvage(path, tmp_path / "salvaged.db")


def test_sessions_salvage_command_copies_a_damaged_store(tmp_path: Path) -> None:
    """`memstrata sessions salvage` is the command the damage message names."""
    from click.testing import CliRunner

    from memstrata.cli import cli

    path = tmp_path / "state.db"
    contents = _build_db(path)
    victim = _leaf_pages(path, "messages")[1]
    data = bytearray(path.read_bytes())
    data[(victim - 1) * PAGE : victim * PAGE] = random.Random(victim).randbytes(PAGE)
    path.write_bytes(bytes(data))
    target = tmp_path / "salvaged.db"
    result = CliRunner().invoke(cli, ["sessions", "salvage", str(path), str(target), "--json"])
    assert result.exit_code == 0, result.output
    copied = json.loads(result.output)
    assert copied["sessions"] == SESSIONS
    assert 0 < copied["messages"] < len(contents)
    again = CliRunner().invoke(cli, ["sessions", "salvage", str(path), str(target)])
    # The CLI's entry point turns this library error into a one-line message.
    assert again.exit_code == 1 and "already exists" in str(again.exception)
