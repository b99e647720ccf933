"""A hard per-attempt deadline for SDK calls, enforced outside the SDK.

Why: azure-servicebus hangs forever when an endpoint accepts TCP and then says nothing (its SASL
negotiation runs with the socket timeout set to None; ``docs/servicebus-sdk.md`` "Hazard"), whatever
``timeout=`` the call was given. Python cannot interrupt a thread blocked in ``recv``, so the bridge runs
each SDK call on a worker thread and waits for it at most the deadline. On overrun the caller gets
``AttemptDeadlineExceeded`` at once and the pool discards the stuck client: its ``close()`` runs in a
background daemon thread (``AttemptRunner.discard``), never on the caller's thread, because close can hang
on the same dead socket. Closing the client usually unblocks the stuck attempt thread, which then exits.

Bound on leaked threads: a thread abandoned by an overrun, and a background close that has not finished,
each count as *stuck* until they return. At ``max_stuck`` stuck threads (default 8) the runner refuses new
attempts immediately with ``AttemptDeadlineExceeded`` ("too many stuck attempts") instead of starting
another thread that would probably hang too, and ``discard`` skips the close (the client object is
dropped; its socket goes with the process). So a worker process never holds more than ``max_stuck``
leaked threads, plus its idle attempt threads (at most ``max_idle``). All threads are daemons: a stuck
one never blocks interpreter exit.

Threads do not survive ``fork``: a runner belongs to the process that created it (the pool re-creates its
runner in a forked child).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from bridge.errors import AttemptDeadlineExceeded

T = TypeVar("T")
logger = logging.getLogger(__name__)

DEFAULT_MAX_STUCK = 8
DEFAULT_MAX_IDLE = 4


@dataclass(frozen=True)
class Watch:
    """A check to run while a call has not returned: first after ``after`` s, then every ``every`` s; an
    error it returns ends the attempt (``bridge.servicebus.connect_probe``). It is given the seconds left
    until the deadline and must not take longer."""

    check: Callable[[float], BaseException | None]
    after: float
    every: float


class _Job(Generic[T]):
    """One call handed to a worker thread; the lock settles the race between finishing and abandoning."""

    def __init__(self, call: Callable[[], T]) -> None:
        self.call = call
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False
        self.result: T | None = None
        self.error: BaseException | None = None

    def execute(self) -> bool:
        """Run the call; True when the caller had already given up on it."""
        try:
            self.result = self.call()
        except BaseException as exc:  # handed to the caller's thread, which decides
            self.error = exc
        with self.lock:
            self.done.set()
            return self.abandoned

    def abandon(self) -> bool:
        """Give up on the call; False when it finished in the meantime (its result is then valid)."""
        with self.lock:
            if self.done.is_set():
                return False
            self.abandoned = True
            return True


class _Worker:
    """A daemon thread running jobs one at a time; it exits after a job its caller abandoned."""

    def __init__(self, runner: AttemptRunner, name: str) -> None:
        self._runner = runner
        self.jobs: queue.SimpleQueue[_Job[object] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if job.execute():
                self._runner._stuck_returned()
                return
            if not self._runner._idle(self):
                return


class AttemptRunner:
    """Run SDK calls with a hard deadline; see the module docstring for threads and their bound."""

    def __init__(
        self,
        max_stuck: int = DEFAULT_MAX_STUCK,
        max_idle: int = DEFAULT_MAX_IDLE,
        name: str = "servicebus-attempt",
    ) -> None:
        if max_stuck < 1 or max_idle < 0:
            raise ValueError("max_stuck must be at least 1 and max_idle not negative")
        self.max_stuck = max_stuck
        self.max_idle = max_idle
        self._name = name
        self._lock = threading.Lock()
        self._idle_workers: list[_Worker] = []
        self._stuck = 0
        self._started = 0

    @property
    def stuck(self) -> int:
        """Threads that overran their deadline (or background closes) and have not returned yet."""
        with self._lock:
            return self._stuck

    def run(
        self,
        call: Callable[[], T],
        deadline: float,
        namespace: str | None = None,
        what: str = "",
        watch: Watch | None = None,
    ) -> T:
        """``call()``'s result, or ``AttemptDeadlineExceeded`` when it has not returned after ``deadline`` s.

        Exceptions of ``call`` are re-raised here, on the caller's thread, unchanged. With ``watch``, its
        check runs on the caller's thread while the call has not returned (first after ``watch.after``
        seconds, then every ``watch.every``); an error it returns abandons the call, as an overrun does,
        and is raised instead.
        """
        label = " ".join(part for part in (namespace, what) if part) or "attempt"
        worker = self._take_worker(label, namespace)
        job: _Job[T] = _Job(call)
        worker.jobs.put(job)  # type: ignore[arg-type]  # the queue is shared by jobs of every result type
        error = self._wait(job, deadline, watch)
        if error is not None and job.abandon():
            with self._lock:
                self._stuck += 1
            if isinstance(error, AttemptDeadlineExceeded):
                logger.warning("%s overran its %.3gs deadline; its thread is abandoned", label, deadline)
                raise AttemptDeadlineExceeded(
                    f"{label}: no answer within the {deadline:g}s attempt deadline", namespace=namespace
                )
            logger.info("%s abandoned: %s", label, error)
            raise error
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]  # set by execute() when error is None

    @staticmethod
    def _wait(job: _Job[T], deadline: float, watch: Watch | None) -> BaseException | None:
        """Wait for ``job``; None when it returned, else the error that ends the wait (the watch's, or an
        overrun)."""
        start = time.monotonic()
        end = start + deadline
        check_at = end if watch is None else start + watch.after
        while True:
            now = time.monotonic()
            if job.done.wait(max(0.0, min(end, check_at) - now)):
                return None
            now = time.monotonic()
            if now >= end:
                return AttemptDeadlineExceeded("overrun")
            assert watch is not None  # check_at < end only with a watch
            error = watch.check(end - now)
            if error is not None:
                return error
            check_at = time.monotonic() + watch.every

    def discard(self, close: Callable[[], object], what: str) -> None:
        """Run ``close`` (of a stuck or faulted client) on a background daemon thread, never blocking."""
        with self._lock:
            if self._stuck >= self.max_stuck:
                logger.warning(
                    "not closing %s: %d stuck threads already (bound %d)", what, self._stuck, self.max_stuck
                )
                return
            self._stuck += 1

        def closer() -> None:
            try:
                close()
            except Exception as exc:  # a client that failed is expected to fail closing too
                logger.debug("closing %s failed: %s", what, type(exc).__name__)
            finally:
                self._stuck_returned()

        threading.Thread(target=closer, name=f"{self._name}-close", daemon=True).start()

    def shutdown(self) -> None:
        """Stop the idle threads; later ``run`` calls start new ones."""
        with self._lock:
            idle, self._idle_workers = self._idle_workers, []
        for worker in idle:
            worker.jobs.put(None)

    def _take_worker(self, label: str, namespace: str | None) -> _Worker:
        with self._lock:
            stuck = self._stuck
            if stuck < self.max_stuck:
                if self._idle_workers:
                    return self._idle_workers.pop()
                self._started += 1
                name = f"{self._name}-{self._started}"
        if stuck >= self.max_stuck:
            raise AttemptDeadlineExceeded(
                f"{label}: refused, {stuck} earlier attempts are still stuck (bound {self.max_stuck})",
                namespace=namespace,
            )
        return _Worker(self, name)

    def _idle(self, worker: _Worker) -> bool:
        """A worker finished a job; keep it for reuse unless enough are idle (False: it should exit)."""
        with self._lock:
            if len(self._idle_workers) >= self.max_idle:
                return False
            self._idle_workers.append(worker)
            return True

    def _stuck_returned(self) -> None:
        with self._lock:
            self._stuck = max(0, self._stuck - 1)
