"""A pool of threads per process, made on first use: for work off a caller's path that must not cost a
thread per caller.

Why: the drainers' helpers (the read ahead, the settler, an active batch's second copy) and the namespace
pool's reopening of links after an outage each run their work on a pool shared by the whole process, so
that threads stay few whatever the number of shards. A pool belongs to the process that made it: threads
do not cross a ``fork`` (Celery's prefork children), so a child makes its own on first use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class ProcessThreads:
    """One named pool of ``size`` threads per process (see the module docstring)."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None
        self._stopped = False

    def executor(self) -> ThreadPoolExecutor:
        """This process's pool (made now if this process has none yet)."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix=self.name)
                self._pid = os.getpid()
            return self._pool

    def submit(self, work: Callable[[], object]) -> bool:
        """Run ``work`` on this process's pool soon; False (and nothing runs) once ``shutdown`` was called.
        Never waits."""
        with self._lock:
            if self._stopped:
                return False
        try:
            self.executor().submit(work)
        except RuntimeError:  # shut down between our look and the submit
            return False
        return True

    def shutdown(self) -> None:
        """Take no more work and drop what is queued; work already running finishes on its own."""
        with self._lock:
            self._stopped = True
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False, cancel_futures=True)
