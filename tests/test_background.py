"""The background lane: FIFO order, pending counts, flush barrier, stop and restart."""

from __future__ import annotations

import threading

import pytest

from memstrata.providers.background import WORKER_THREAD_NAME, BackgroundQueue


def test_jobs_run_in_submission_order_on_one_daemon_thread() -> None:
    """Jobs run one after another, in order, on a single named daemon thread."""
    lane = BackgroundQueue(("sync", "write"))
    seen: list[tuple[int, str, bool]] = []
    for i in range(50):
        kind = "sync" if i % 2 else "write"

        def job(i: int = i) -> None:
            thread = threading.current_thread()
            seen.append((i, thread.name, thread.daemon))

        lane.submit(kind, job)
    assert lane.flush(10)
    assert [i for i, _, _ in seen] == list(range(50))
    assert {(name, daemon) for _, name, daemon in seen} == {(WORKER_THREAD_NAME, True)}
    lane.stop()


def test_no_thread_starts_until_the_first_job() -> None:
    """A lane that never gets a job owns no thread, and flushing it returns at once."""
    before = {t.ident for t in threading.enumerate()}
    lane = BackgroundQueue(("sync",), thread_name="lane-idle-check")
    assert lane.flush(0.01)
    lane.stop()
    assert not [t for t in threading.enumerate() if t.ident not in before]


def test_pending_counts_queued_and_running_jobs_by_kind() -> None:
    """Pending counts a running job and the ones queued behind it until each finishes."""
    lane = BackgroundQueue(("sync", "prefetch", "write"))
    started, release = threading.Event(), threading.Event()

    def blocker() -> None:
        started.set()
        release.wait(10)

    lane.submit("sync", blocker)
    assert started.wait(10)
    lane.submit("prefetch", lambda: None)
    lane.submit("write", lambda: None)
    lane.submit("write", lambda: None)
    assert lane.pending() == {"sync": 1, "prefetch": 1, "write": 2}
    release.set()
    assert lane.flush(10)
    assert lane.pending() == {"sync": 0, "prefetch": 0, "write": 0}
    lane.stop()


def test_flush_times_out_behind_a_stuck_job_and_later_succeeds() -> None:
    """A flush behind a hung job returns False after its timeout; once it ends, True."""
    lane = BackgroundQueue(("sync",))
    release = threading.Event()

    def stuck() -> None:
        release.wait(10)

    lane.submit("sync", stuck)
    assert lane.flush(0.05) is False
    release.set()
    assert lane.flush(10) is True
    lane.stop()


def test_a_raising_job_is_counted_done_and_the_lane_keeps_going() -> None:
    """A job that raises leaves no pending count behind and does not stop later jobs."""
    lane = BackgroundQueue(("sync",))
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("provider down")

    lane.submit("sync", boom)
    lane.submit("sync", lambda: ran.append("after"))
    assert lane.flush(10)
    assert ran == ["after"]
    assert lane.pending() == {"sync": 0}
    lane.stop()


def test_submit_after_stop_starts_a_fresh_thread() -> None:
    """Stop lets the worker thread end; the next job runs on a new one."""
    lane = BackgroundQueue(("sync",))
    threads: list[threading.Thread] = []
    lane.submit("sync", lambda: threads.append(threading.current_thread()))
    assert lane.flush(10)
    lane.stop()
    threads[0].join(10)
    assert not threads[0].is_alive()
    lane.submit("sync", lambda: threads.append(threading.current_thread()))
    assert lane.flush(10)
    lane.stop()
    assert len(threads) == 2
    assert threads[1] is not threads[0]


def test_unknown_kind_is_refused() -> None:
    """A job kind not named at construction raises KeyError naming the valid kinds."""
    lane = BackgroundQueue(("sync", "write"))
    with pytest.raises(KeyError, match="sync, write"):
        lane.submit("prefetch", lambda: None)
    assert lane.pending() == {"sync": 0, "write": 0}
