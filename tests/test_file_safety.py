"""Files and paths: a private home whatever the umask, and no symlink ever followed for
memory files, exports or imports.

The permission checks run the real console script (and one script using the library)
in processes whose umask is 0, the worst case: every folder created must still be 0700
and every file 0600.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import record, subprocess_env

BIN = Path(sys.executable).parent


def run_umask0(home: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (a console script of this venv, or python) under umask 0."""
    exe = str(BIN / argv[0]) if argv[0] in ("memstrata", "python") else argv[0]
    return subprocess.run(
        [exe, *argv[1:]],
        env=subprocess_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        preexec_fn=lambda: os.umask(0),
    )


def memstrata(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_umask0(home, "memstrata", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def modes(root: Path) -> dict[str, str]:
    """Every folder and file under ``root`` (itself included) -> its octal mode."""
    found = {".": f"{stat.S_IMODE(root.lstat().st_mode):04o}"}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = f"{stat.S_IMODE(path.lstat().st_mode):04o}"
    return found


LIBRARY_WORK = textwrap.dedent(
    """
    from pathlib import Path
    import os
    from memstrata import SessionStore
    from memstrata.providers.facts.store import FactStore

    home = Path(os.environ["MEMSTRATA_HOME"])
    with SessionStore() as store:
        store.create_session("s1")
        store.append_message("s1", role="user", content="my api key is in the vault")
        facts = FactStore(home / "facts.db")
        facts.add("The user deploys on Fridays")
        # While both are open their -wal/-shm files exist: print every mode now.
        for path in sorted(home.rglob("*")):
            print(f"{path.relative_to(home)} {path.stat().st_mode & 0o777:04o}")
        facts.close()
    """
)


def test_the_home_and_everything_in_it_are_private_under_umask_0(tmp_path: Path) -> None:
    """A home created by `memory add` (with missing parents), then config, the MCP token,
    sessions, facts and the memory history: every folder 0700, every file 0600."""
    home = tmp_path / "nested" / "deeper" / "home"
    assert memstrata(home, "memory", "add", "Deploys use ops/deploy.sh").returncode == 0
    assert memstrata(home, "memory", "add", "-t", "user", "Prefers short answers").returncode == 0
    assert memstrata(home, "config", "set", "search.limit", "4").returncode == 0
    assert memstrata(home, "mcp", "token").returncode == 0
    script = tmp_path / "work.py"
    script.write_text(LIBRARY_WORK)
    done = run_umask0(home, "python", str(script))
    assert done.returncode == 0, done.stderr
    while_open = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    for name in ("facts.db-wal", "facts.db-shm", "state.db-wal", "state.db-shm"):
        assert while_open.get(name) == "0600", while_open

    found = modes(home)
    for name in ("memories/MEMORY.md", "memory_history.db", "facts.db", "state.db", "mcp_token"):
        assert name in found, sorted(found)
    wrong = {
        name: mode
        for name, mode in found.items()
        if mode != ("0700" if (home / name).is_dir() else "0600")
    }
    assert not wrong, wrong
    record(
        kind="attack",
        category="Files under a home created with umask 0, checked 0700/0600",
        tried=len(found),
        stopped=len(found) - len(wrong),
    )
    # The parents created on the way are this user's private folders too.
    assert stat.S_IMODE((tmp_path / "nested").stat().st_mode) == 0o700


def test_exports_are_private_under_umask_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert memstrata(home, "memory", "add", "A fact").returncode == 0
    script = tmp_path / "work.py"
    script.write_text(LIBRARY_WORK)
    assert run_umask0(home, "python", str(script)).returncode == 0

    out = tmp_path / "sessions.jsonl"
    done = memstrata(home, "sessions", "export", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # --overwrite of a world-readable file leaves it private too.
    out.chmod(0o644)
    assert memstrata(home, "sessions", "export", "-o", str(out), "--overwrite").returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600

    backup = tmp_path / "backup" / "today"
    done = memstrata(home, "export", "--out", str(backup))
    assert done.returncode == 0, done.stderr
    found = modes(backup)
    wrong = {
        name: mode
        for name, mode in found.items()
        if mode != ("0700" if (backup / name).is_dir() else "0600")
    }
    assert not wrong, wrong


def test_export_never_writes_through_a_link(tmp_path: Path) -> None:
    """A dangling or live link in the export folder is refused, with or without
    --overwrite, naming the link; nothing is written where it points."""
    home = tmp_path / "home"
    assert memstrata(home, "memory", "add", "A fact").returncode == 0
    out = tmp_path / "out"
    (out / "memories").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.md"
    link = out / "memories" / "MEMORY.md"
    link.symlink_to(elsewhere)
    for extra in ((), ("--overwrite",)):
        done = memstrata(home, "export", "--out", str(out), *extra)
        assert done.returncode == 1, done.stdout
        assert "symlink" in done.stderr and str(link) in done.stderr
        assert not elsewhere.exists()

    victim = tmp_path / "victim.jsonl"
    victim.write_text("keep\n")
    jsonl_link = tmp_path / "export.jsonl"
    jsonl_link.symlink_to(victim)
    done = memstrata(home, "sessions", "export", "-o", str(jsonl_link), "--overwrite")
    assert done.returncode == 1
    assert "symlink" in done.stderr and str(jsonl_link) in done.stderr
    assert victim.read_text() == "keep\n"
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "created-through-link.jsonl")
    done = memstrata(home, "sessions", "export", "-o", str(dangling))
    assert done.returncode == 1
    assert not (tmp_path / "created-through-link.jsonl").exists()
    record(
        kind="attack", category="Exports through a symlink (live or dangling)", tried=4, stopped=4
    )


def test_memory_file_links_are_refused_by_the_cli(tmp_path: Path) -> None:
    """`memory add` with MEMORY.md linked to another file: refused, naming the link; the
    other file is neither rewritten nor chmodded, and `memory show` does not print it."""
    home = tmp_path / "home"
    (home / "memories").mkdir(parents=True)
    other = tmp_path / "notes.txt"
    other.write_text("ssh-rsa AAAA private material")
    other.chmod(0o644)
    link = home / "memories" / "MEMORY.md"
    link.symlink_to(other)
    done = memstrata(home, "memory", "add", "A fact")
    assert done.returncode == 1
    assert "symlink" in done.stderr and str(link) in done.stderr
    assert other.read_text() == "ssh-rsa AAAA private material"
    assert stat.S_IMODE(other.stat().st_mode) == 0o644
    shown = memstrata(home, "memory", "show")
    assert "private material" not in shown.stdout
    record(kind="attack", category="MEMORY.md as a symlink to another file", tried=2, stopped=2)


def test_import_never_reads_through_a_link(tmp_path: Path) -> None:
    """An export whose USER.md links to a local file: that file is not imported into
    memory (so never into the system prompt); the report names the link."""
    home = tmp_path / "home"
    source_home = tmp_path / "source"
    assert memstrata(source_home, "memory", "add", "Imported fact").returncode == 0
    export = tmp_path / "export"
    assert memstrata(source_home, "export", "--out", str(export)).returncode == 0
    secret = tmp_path / "secret.txt"
    secret.write_text("The database password is swordfish-local")
    user_md = export / "memories" / "USER.md"
    user_md.unlink()
    user_md.symlink_to(secret)

    done = memstrata(home, "import", str(export))
    assert str(user_md) in done.stdout + done.stderr
    assert "symlink" in done.stdout + done.stderr
    imported_user = home / "memories" / "USER.md"
    assert not imported_user.exists() or "swordfish" not in imported_user.read_text()
    assert "Imported fact" in (home / "memories" / "MEMORY.md").read_text()

    # A linked sessions.jsonl is refused the same way.
    jsonl = export / "sessions.jsonl"
    jsonl.rename(tmp_path / "real.jsonl")
    jsonl.symlink_to(tmp_path / "real.jsonl")
    done = memstrata(tmp_path / "home2", "import", str(export))
    assert done.returncode != 0 or "symlink" in done.stdout
    assert str(jsonl) in done.stdout + done.stderr
    record(kind="attack", category="Imports carrying a symlink", tried=2, stopped=2)
