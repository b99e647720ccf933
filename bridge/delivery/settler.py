"""Writing a drainer's settled batches behind it, so the next batch is read and sent meanwhile.

Once Service Bus accepted every message of a batch, what is left is bookkeeping in Redis: the batch's
journal events, then the acknowledgement (``XACK`` + ``XDEL``). Each is a write that waits for Redis (and
its fsync with ``appendfsync always``); done in line they made every message at a steady rate wait for the
previous message's bookkeeping. The ``Settler`` runs that work on one thread per drainer turn, in the
order it was handed over, while the drainer goes back to reading.

What does not change: an entry is acknowledged only after a namespace accepted it, the journal is written
before the acknowledgement, and a drainer never claims pending entries while acknowledgements are still on
their way (it ``flush``es first: otherwise it would send them again). A failed write is raised in the
drainer at its next ``check`` (a lost lease stops it; a Redis failure makes it take the shard over again,
which resends what was not acknowledged: a duplicate with the same MessageId, never a loss). Batches that
need more than acknowledgements (a dead-letter, a retry, a state change) are settled in line after a
``flush``. At most ``MAX_BEHIND`` batches wait, so a slow Redis slows the drainer instead of piling up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

MAX_BEHIND = 4
"""Batches whose bookkeeping may be outstanding before the drainer waits for the oldest."""


class Settler:
    """One tenure's background bookkeeping, in order (see the module docstring)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` after everything submitted before it; raises an earlier failure first."""
        self.check()
        while len(self._pending) >= MAX_BEHIND:
            self._pending.popleft().result()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bridge-settle")
        self._pending.append(self._executor.submit(work))

    def check(self) -> None:
        """Raise the error of the first finished piece of work that failed (and forget the finished)."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()

    def flush(self) -> None:
        """Wait until everything submitted is written; raise the first failure."""
        while self._pending:
            self._pending.popleft().result()

    def close(self, *, quiet: bool = False) -> None:
        """``flush`` and stop the thread; with ``quiet`` a failure is dropped (another error is on its way:
        what was not acknowledged stays pending and is sent again by the next holder)."""
        try:
            if quiet:
                for future in self._pending:
                    future.exception()
                self._pending.clear()
            else:
                self.flush()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
