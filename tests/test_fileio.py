"""The single file-write helper and the lock helper."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memstrata import fileio
from memstrata.errors import (
    AtomicWriteError,
    LockTimeoutError,
    StorageError,
    SymlinkRefusedError,
    UnreadableFileError,
)


def test_atomic_write_creates_0600(tmp_path: Path) -> None:
    """A written file holds the bytes and is private to the user."""
    target = tmp_path / "MEMORY.md"
    fileio.atomic_write(target, "héllo")
    assert target.read_text(encoding="utf-8") == "héllo"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_atomic_write_refuses_a_symlink_unless_asked(tmp_path: Path) -> None:
    """A symlinked target (dangling too) is refused, naming it; follow_symlinks=True
    replaces the real file and keeps the link."""
    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    with pytest.raises(SymlinkRefusedError, match=str(link)):
        fileio.atomic_write(link, "new")
    assert real.read_text() == "old"
    dangling = tmp_path / "dangling.md"
    dangling.symlink_to(tmp_path / "nowhere.md")
    with pytest.raises(SymlinkRefusedError):
        fileio.atomic_write(dangling, "new")
    assert not (tmp_path / "nowhere.md").exists()
    fileio.atomic_write(link, "new", follow_symlinks=True)
    assert link.is_symlink()
    assert real.read_text() == "new"


def test_failed_write_leaves_old_content_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC during fsync keeps the old bytes, removes the temp file and names the fix."""
    folder = tmp_path / "d"
    folder.mkdir()
    target = folder / "f.md"
    target.write_text("old")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", no_space)
    with pytest.raises(AtomicWriteError, match="disk is full"):
        fileio.atomic_write(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(folder) == ["f.md"]


def test_remove_stale_temps(tmp_path: Path) -> None:
    """Temp files left by a dead writer are removed; other files are not."""
    folder = tmp_path / "d"
    folder.mkdir()
    target = folder / "f.md"
    (folder / ".f.md.abc.tmp").write_text("partial")
    (folder / "other.tmp").write_text("keep")
    assert fileio.remove_stale_temps(target) == 1
    assert sorted(os.listdir(folder)) == ["other.tmp"]


def test_read_text_refuses_undecodable(tmp_path: Path) -> None:
    """A file that is not UTF-8 is refused, never read as empty."""
    target = tmp_path / "f.md"
    target.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(UnreadableFileError, match="not valid UTF-8"):
        fileio.read_text(target)


def test_read_text_strips_bom_and_missing_is_none(tmp_path: Path) -> None:
    """A BOM is dropped; a missing file reads as None."""
    target = tmp_path / "f.md"
    assert fileio.read_text(target) is None
    target.write_bytes("\ufeffentry".encode())
    assert fileio.read_text(target) == "entry"


def test_lock_file_is_0600_and_kept(tmp_path: Path) -> None:
    """The lock file is private and stays after release (unlinking it races)."""
    lock = tmp_path / "f.md.lock"
    with fileio.file_lock(lock):
        pass
    assert lock.exists()
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_lock_refuses_symlink(tmp_path: Path) -> None:
    """A lock path that is a symlink is refused."""
    (tmp_path / "elsewhere").write_text("")
    lock = tmp_path / "f.md.lock"
    lock.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="symlink"), fileio.file_lock(lock):
        pass


def _hold_lock_in_subprocess(lock: Path) -> subprocess.Popen[str]:
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from memstrata.fileio import file_lock\n"
        "with file_lock(Path(sys.argv[1])):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_times_out_while_another_process_holds_it(tmp_path: Path) -> None:
    """A lock held by a live process makes a waiter time out with a clear error."""
    lock = tmp_path / "f.md.lock"
    holder = _hold_lock_in_subprocess(lock)
    try:
        with (
            pytest.raises(LockTimeoutError, match="Timed out"),
            fileio.file_lock(lock, timeout=0.2),
        ):
            pass
    finally:
        holder.kill()
        holder.communicate()


def test_lock_of_a_killed_process_is_released(tmp_path: Path) -> None:
    """A lock whose holder was SIGKILLed is free at once: no stale lock to clean."""
    lock = tmp_path / "f.md.lock"
    holder = _hold_lock_in_subprocess(lock)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    with fileio.file_lock(lock, timeout=5):
        pass


@pytest.mark.parametrize(("durability", "folder_syncs"), [("normal", 0), ("full", 1)])
def test_memory_folder_fsync_follows_durability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, folder_syncs: int
) -> None:
    """A memory write fsyncs its folder only under store.durability = "full"."""
    from memstrata.config import Config
    from memstrata.memory.files import FileMemory

    monkeypatch.setenv("MEMSTRATA_STORE__DURABILITY", durability)
    memory = FileMemory(tmp_path, config=Config.load(tmp_path))
    calls: list[Path] = []
    monkeypatch.setattr(fileio, "_fsync_dir", calls.append)
    memory.add("memory", "The deploy script lives in ops/deploy.sh")
    assert len(calls) == folder_syncs
    assert memory.entries("memory") == ["The deploy script lives in ops/deploy.sh"]
