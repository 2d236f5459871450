"""Worker processes for the fault-injection tests (tests/test_faults_*.py).

Run as ``python fault_worker.py MODE ARGS...``. Modes that mount a file system run inside
``unshare -rm`` (a private user and mount namespace: the mount vanishes with the process,
and no root is needed on the host); they print one JSON report on stdout.

* ``full DIR SIZE SLACK_KIB``: mount a SIZE tmpfs on DIR, make a home there with
  acknowledged writes, fill the disk but SLACK_KIB, then keep writing memory entries and
  messages until both fail; check that every acknowledged write is still there, free the
  space and write again.
* ``readonly DIR``: mount a tmpfs on DIR, make a home with acknowledged writes, remount
  it read-only, try every write path (library, tool dispatch, CLI), remount read-write
  and check nothing changed.
* ``denied HOME``: HOME was made by another user (the test ran as root and this worker
  drops to uid 65534 after its imports; or the test made HOME read-only with chmod); try
  every path and report the errors.
* ``hold-memory-lock HOME``: start a memory write and stop between writing the temp file
  and renaming it, holding the memory lock, until SIGKILLed.
* ``hold-sqlite-lock DB N``: append N acknowledged messages, then open a write transaction
  with more rows and hold SQLite's write lock until SIGKILLed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memstrata import FileMemory, SessionStore, fileio
from memstrata.cli import cli
from memstrata.cli import memory as _memory_cmds  # noqa: F401  (imported before a uid drop)
from memstrata.cli import search as _search_cmds  # noqa: F401
from memstrata.cli import sessions as _sessions_cmds  # noqa: F401
from memstrata.cli.common import run_cli
from memstrata.config import Config
from memstrata.errors import MemstrataError
from memstrata.memory.format import parse_entries
from memstrata.memory.tool import MemoryTool
from memstrata.tools.session_search import SessionSearchTool
from memstrata.tools.toolbox import Toolbox

PAD = ("lorem ipsum dolor sit amet " * 4).strip()
# Endless modes stop on their own when the test that started them is gone.
PARENT = os.getppid()
MAX_SECONDS = 120


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)],
        check=True,
    )


def remount(folder: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], check=True)


def outcome(fn: Any) -> dict[str, Any]:
    """Run ``fn``; report its result, or the exception's type and message."""
    try:
        return {"ok": True, "value": fn()}
    except Exception as exc:
        return {
            "ok": False,
            "type": type(exc).__name__,
            "memstrata": isinstance(exc, MemstrataError),
            "error": str(exc),
        }


def run_cli_inprocess(home: Path, *args: str) -> dict[str, Any]:
    """Run the CLI in this process (it may have dropped privileges), as a user would."""
    os.environ["MEMSTRATA_HOME"] = str(home)
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["memstrata", *args]
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_cli(cli)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # what a user would see as a traceback
        code = "traceback"
        err.write(f"Traceback (most recent call last):\n{type(exc).__name__}: {exc}\n")
    finally:
        sys.argv = old_argv
    return {"args": list(args), "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def seed_home(home: Path, entries: int, messages: int) -> tuple[list[str], list[str]]:
    """Acknowledged writes: memory entries and messages whose calls returned."""
    memory = FileMemory(home, memory_char_limit=100_000)
    acked_entries = []
    for k in range(entries):
        text = f"seed entry {k}: {PAD}"
        memory.add("memory", text)
        acked_entries.append(text)
    acked_messages = []
    with SessionStore(home / "state.db") as store:
        store.create_session("s1", source="cli")
        for k in range(messages):
            text = f"seed message {k} {PAD}"
            store.append_message("s1", "user", content=text)
            acked_messages.append(text)
    return acked_entries, acked_messages


def on_disk(home: Path) -> tuple[list[str], list[str] | None, list[str]]:
    """Entries in MEMORY.md, message contents in state.db, and leftover temp files.

    The contents are None when the store cannot be opened at all (a disk so full that
    SQLite cannot create the -shm file even to read); the caller checks them later.
    """
    raw = fileio.read_text(home / "memories" / "MEMORY.md")
    try:
        with SessionStore(home / "state.db", readonly=True) as store:
            contents: list[str] | None = [str(m["content"]) for m in store.get_messages("s1")]
    except MemstrataError:
        contents = None
    temps = [n for n in os.listdir(home / "memories") if n.endswith(fileio.TEMP_SUFFIX)]
    return parse_entries(raw), contents, temps


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the disk is full; return the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as ballast:
        chunk = b"\0" * 65536
        while True:
            try:
                written += ballast.write(chunk) or 0
            except OSError:
                break
        for size in (4096, 512, 1):  # squeeze out the last blocks
            with contextlib.suppress(OSError):
                while True:
                    written += ballast.write(b"\0" * size) or 0
    return written


def run_full(folder: Path, size: str, slack_kib: int) -> dict[str, Any]:
    mount_tmpfs(folder, size)
    home = folder / "home"
    acked_entries, acked_messages = seed_home(home, entries=5, messages=20)
    ballast = folder / "ballast"
    fill(ballast)
    # Leave a little room, so the failing writes fail part-way, not on the first byte.
    os.truncate(ballast, max(0, ballast.stat().st_size - slack_kib * 1024))
    memory = FileMemory(home, memory_char_limit=100_000)
    errors: dict[str, dict[str, Any]] = {}
    opened = outcome(lambda: SessionStore(home / "state.db"))
    if not opened["ok"]:
        # So full that SQLite cannot even create its -wal/-shm files.
        errors["store"] = opened
        store: SessionStore | None = None
    else:
        store = opened.pop("value")
    for k in range(2000):
        if "memory" not in errors:
            text = f"late entry {k}: {PAD}"
            result = outcome(lambda text=text: memory.add("memory", text).changed)
            if result["ok"]:
                acked_entries.append(text)
            else:
                errors["memory"] = result
        if "store" not in errors:
            text = f"late message {k} {PAD}"
            assert store is not None
            result = outcome(lambda text=text: store.append_message("s1", "user", content=text))
            if result["ok"]:
                acked_messages.append(text)
            else:
                errors["store"] = result
        if len(errors) == 2:
            break
    tool_reply = json.loads(
        toolbox(home).dispatch("memory", {"action": "add", "content": "a fact for the tool"})
    )
    cli_run = run_cli_inprocess(home, "memory", "add", "a fact from the cli")
    if store is not None:
        store.close()
    entries, contents, temps = on_disk(home)
    report: dict[str, Any] = {
        "errors": errors,
        "tool": tool_reply,
        "cli": cli_run,
        "acked_entries": acked_entries,
        "acked_messages": acked_messages,
        "entries_while_full": entries,
        "messages_while_full": contents,
        "temps_while_full": temps,
    }
    ballast.unlink()
    memory.add("memory", "after space was freed")
    with SessionStore(home / "state.db") as again:
        again.append_message("s1", "user", content="after space was freed")
    entries, contents, temps = on_disk(home)
    report.update(entries_after=entries, messages_after=contents, temps_after=temps)
    return report


def run_readonly(folder: Path) -> dict[str, Any]:
    mount_tmpfs(folder, "16m")
    home = folder / "home"
    acked_entries, acked_messages = seed_home(home, entries=3, messages=5)
    before = {p.name: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}
    remount(folder, "ro")
    memory = FileMemory(home)
    attempts = {
        "load_errors": outcome(lambda: memory.load_errors),
        "entries": outcome(lambda: memory.entries("memory")),
        "add": outcome(lambda: memory.add("memory", "new fact")),
        "replace": outcome(lambda: memory.replace("memory", "seed entry 0", "changed")),
        "remove": outcome(lambda: memory.remove("memory", "seed entry 1")),
        "store_open": outcome(lambda: SessionStore(home / "state.db").close()),
        "store_readonly_search": outcome(
            lambda: len(SessionStore(home / "state.db", readonly=True).search_messages("seed"))
        ),
    }
    os.environ["MEMSTRATA_HOME"] = str(home)
    box = toolbox(home)
    tool = {
        "memory_add": json.loads(box.dispatch("memory", {"action": "add", "content": "x y"})),
        "memory_read": json.loads(box.dispatch("memory", {"action": "read"})),
        "search": json.loads(box.dispatch("session_search", {"query": "seed"})),
    }
    cli_runs = [
        run_cli_inprocess(home, "memory", "add", "a fact from the cli"),
        run_cli_inprocess(home, "memory", "list"),
        run_cli_inprocess(home, "search", "seed"),
    ]
    remount(folder, "rw")
    after = {p.name: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}
    entries, contents, _ = on_disk(home)
    return {
        "attempts": attempts,
        "tool": tool,
        "cli": cli_runs,
        "unchanged": {k: after.get(k) == v for k, v in before.items()},
        "acked_entries": acked_entries,
        "acked_messages": acked_messages,
        "entries_after": entries,
        "messages_after": contents,
    }


def drop_privileges() -> None:
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)


def run_denied(home: Path) -> dict[str, Any]:
    os.environ["MEMSTRATA_HOME"] = str(home)
    if os.geteuid() == 0:
        drop_privileges()
    memory = FileMemory(home)
    attempts = {
        "load_errors": outcome(lambda: memory.load_errors),
        "snapshot": outcome(memory.snapshot),
        "add": outcome(lambda: memory.add("memory", "new fact")),
        "remove": outcome(lambda: memory.remove("memory", "seed entry 1")),
        "store_open": outcome(lambda: SessionStore(home / "state.db").close()),
    }
    box = toolbox(home)
    tool = {
        "memory_add": json.loads(box.dispatch("memory", {"action": "add", "content": "x y"})),
        "search": json.loads(box.dispatch("session_search", {"query": "seed"})),
    }
    cli_runs = [
        run_cli_inprocess(home, "memory", "add", "a fact from the cli"),
        run_cli_inprocess(home, "memory", "list"),
        run_cli_inprocess(home, "search", "seed"),
    ]
    return {"uid": os.geteuid(), "attempts": attempts, "tool": tool, "cli": cli_runs}


def toolbox(home: Path) -> Toolbox:
    """The memory and session_search tools over ``home``, as an agent registers them."""
    config = Config.load(home)
    box = Toolbox()
    box.register_tool(MemoryTool(config=config))
    box.register_tool(SessionSearchTool(config=config))
    return box


def abandoned() -> bool:
    return os.getppid() != PARENT


def hold_memory_lock(home: Path) -> None:
    memory = FileMemory(home)

    def stall(src: object, dst: object) -> None:
        # The temp file is written and fsynced; the rename has not happened yet.
        print("stalled", flush=True)
        started = time.monotonic()
        while not abandoned() and time.monotonic() - started < MAX_SECONDS:
            time.sleep(0.05)
        raise SystemExit("abandoned")

    os.replace = stall  # type: ignore[assignment]  # fileio calls os.replace
    memory.add("memory", "in-flight entry that was never acknowledged")


def hold_sqlite_lock(db: Path, count: int) -> None:
    store = SessionStore(db)
    store.create_session("s1", source="cli")
    for k in range(count):
        store.append_message("s1", "user", content=f"acked message {k}")
    with store.write() as conn:
        # Rows written inside a transaction that never commits.
        for k in range(50):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s1', 'user', ?, 0)",
                (f"uncommitted message {k}",),
            )
        print("holding", flush=True)
        started = time.monotonic()
        while not abandoned() and time.monotonic() - started < MAX_SECONDS:
            time.sleep(0.05)


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "full":
        print(json.dumps(run_full(Path(args[0]), args[1], int(args[2]))))
    elif mode == "readonly":
        print(json.dumps(run_readonly(Path(args[0]))))
    elif mode == "denied":
        print(json.dumps(run_denied(Path(args[0]))))
    elif mode == "seed":
        print(json.dumps(seed_home(Path(args[0]), entries=3, messages=5)))
    elif mode == "hold-memory-lock":
        hold_memory_lock(Path(args[0]))
    elif mode == "hold-sqlite-lock":
        hold_sqlite_lock(Path(args[0]), int(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
