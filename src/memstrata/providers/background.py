"""The memory manager's background lane: one daemon thread running jobs in FIFO order.

:class:`~memstrata.providers.manager.MemoryManager` sends turn syncs, next-turn prefetches and
mirrored memory writes here, so turn N reaches every provider before turn N+1 and no
slow backend sits on the turn's critical path. :class:`BackgroundQueue` counts the jobs
still queued or running by kind, offers a flush barrier (:meth:`BackgroundQueue.flush`),
and :class:`ShutdownReport` records what a bounded drain had to abandon.

Example::

    lane = BackgroundQueue(("sync", "write"))
    lane.submit("sync", lambda: print("synced"))
    assert lane.flush(timeout=5.0)      # every job queued so far has run
    lane.stop()
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

WORKER_THREAD_NAME = "memstrata-memory"


@dataclass(frozen=True)
class ShutdownReport:
    """What :meth:`MemoryManager.shutdown_all` could not finish.

    ``drained`` is true when the background worker emptied within the drain timeout;
    otherwise the counts say how many queued jobs were abandoned. ``stuck_prefetch``
    names providers whose prefetch thread was still running.
    """

    drained: bool
    abandoned_syncs: int = 0
    abandoned_prefetches: int = 0
    abandoned_writes: int = 0
    stuck_prefetch: tuple[str, ...] = ()
    shutdown_errors: tuple[str, ...] = ()


class _SerialWorker:
    """One daemon thread running submitted jobs in order.

    A daemon thread, unlike ``ThreadPoolExecutor``'s workers, cannot keep the process
    alive at exit when a provider hangs; the owner decides what to wait for.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> Future[None]:
        future: Future[None] = Future()
        self._jobs.put((job, future))
        return future

    def stop(self) -> None:
        """Let the thread end after the jobs already queued (it is a daemon anyway)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                job()
            except BaseException as exc:  # jobs guard themselves; this is the last net
                future.set_exception(exc)
            else:
                future.set_result(None)


class BackgroundQueue:
    """A FIFO of jobs run one at a time on a daemon thread, counted by kind.

    The thread starts with the first job, so an agent that never syncs never owns one.
    After :meth:`stop` the next :meth:`submit` starts a fresh thread; refusing work
    after shutdown is the owner's decision.
    """

    def __init__(self, kinds: Iterable[str], *, thread_name: str = WORKER_THREAD_NAME) -> None:
        self._pending = dict.fromkeys(kinds, 0)
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._worker: _SerialWorker | None = None

    def submit(self, kind: str, job: Callable[[], None]) -> None:
        """Queue ``job`` behind everything queued before; it counts as pending until done.

        ``job`` should guard its own errors; one that raises is still counted as done.
        Raises KeyError for a ``kind`` not named at construction.
        """
        with self._lock:
            if kind not in self._pending:
                raise KeyError(f"unknown job kind {kind!r}; use one of {', '.join(self._pending)}")
            if self._worker is None:
                self._worker = _SerialWorker(self._thread_name)
            self._pending[kind] += 1
            worker = self._worker

        def run() -> None:
            try:
                job()
            finally:
                with self._lock:
                    self._pending[kind] -= 1

        worker.submit(run)

    def pending(self) -> dict[str, int]:
        """Queued and running jobs by kind."""
        with self._lock:
            return dict(self._pending)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job queued so far has run; False if ``timeout`` passed first."""
        with self._lock:
            worker = self._worker
        if worker is None:
            return True
        barrier = worker.submit(lambda: None)
        try:
            barrier.result(timeout)
        except TimeoutError:
            barrier.cancel()
            return False
        return True

    def stop(self) -> None:
        """Let the current thread end after the jobs already queued; do not wait for it.

        Jobs still queued keep running on the (daemon) thread but nobody waits for them;
        call :meth:`flush` first to give them a bounded time.
        """
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
