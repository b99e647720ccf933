"""Writing a drainer's settled batches behind it, so the next batch is read and sent meanwhile.

Once Service Bus accepted every message of a batch, what is left is bookkeeping in Redis: the batch's
journal events, then the acknowledgement (``XACK`` + ``XDEL``). Each is a write that waits for Redis (and
its fsync with ``appendfsync always``); done in line they made every message at a steady rate wait for the
previous message's bookkeeping. The ``Settler`` runs that work behind the drainer, in the order it was
handed over, while the drainer goes back to reading.

What does not change: an entry is acknowledged only after a namespace accepted it, the journal is written
before the acknowledgement, and a drainer never claims pending entries while acknowledgements are still on
their way (it ``flush``es first: otherwise it would send them again). A failed write is raised in the
drainer at its next ``check`` (a lost lease stops it; a Redis failure makes it take the shard over again,
which resends what was not acknowledged: a duplicate with the same MessageId, never a loss). Batches that
need more than acknowledgements (a dead-letter, a retry, a state change) are settled in line after a
``flush``. At most ``MAX_BEHIND`` batches wait, so a slow Redis slows the drainer instead of piling up.

The work outlives the drainer's turn: a turn that ends with acknowledgements on their way does not wait
for them (at a steady rate a turn ends after nearly every batch, and that wait delayed the next batch's
turn); the next turn's ``check`` reports their failure, a claim ``flush``es them, and the tenure's end
(``close``) waits for them before the lease is released. Each settler's work runs in order on one of
``THREADS`` threads shared by every drainer of the process (one piece at a time per settler): a thread per
settler would grow with the shards, and a thread started and stopped per turn cost a shard at a low rate
more than the write it moves aside.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from bridge.process_threads import ProcessThreads

MAX_BEHIND = 4
"""Batches whose bookkeeping may be outstanding before the drainer waits for the oldest."""
THREADS = 8
"""Settling threads per process, shared by every drainer (as many as ``workers.drain_threads``)."""


_THREADS = ProcessThreads(THREADS, "bridge-settle")


class Settler:
    """One tenure's background bookkeeping, in order (see the module docstring)."""

    def __init__(self) -> None:
        self._pending: deque[Future[None]] = deque()
        """What the drainer handed over and has not seen finish, oldest first."""
        self._lock = threading.Lock()
        self._queue: deque[tuple[Callable[[], None], Future[None]]] = deque()
        self._running = False

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` after everything submitted before it; raises an earlier failure first."""
        self.check()
        while len(self._pending) >= MAX_BEHIND:
            self._pending.popleft().result()
        future: Future[None] = Future()
        with self._lock:
            self._queue.append((work, future))
            start, self._running = not self._running, True
        self._pending.append(future)
        if start:
            _THREADS.executor().submit(self._run)

    def _run(self) -> None:
        """Run the queued work in order until none is left (one such loop per settler at a time)."""
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                work, future = self._queue.popleft()
            future.set_running_or_notify_cancel()
            try:
                work()
            except BaseException as exc:  # raised in the drainer by ``check``/``flush``
                future.set_exception(exc)
            else:
                future.set_result(None)

    @property
    def outstanding(self) -> int:
        """Pieces of work handed over and not yet seen finished by the drainer."""
        return len(self._pending)

    def check(self) -> None:
        """Raise the error of the first finished piece of work that failed (and forget the finished)."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()

    def flush(self) -> None:
        """Wait until everything submitted is written; raise the first failure."""
        while self._pending:
            self._pending.popleft().result()

    def close(self, *, quiet: bool = False) -> None:
        """Wait until everything submitted is written (the tenure ends): ``flush``, or with ``quiet`` drop
        any failure (another error is on its way: what was not acknowledged stays pending and is sent
        again by the next holder)."""
        first: BaseException | None = None
        while self._pending:
            error = self._pending.popleft().exception()
            first = first or error
        if first is not None and not quiet:
            raise first
