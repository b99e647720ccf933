"""A pool of threads shared by every drainer of one process, made on first use.

Why: the drainers' helpers (the read ahead, the settler) each run their work on a thread of a pool shared
by the whole process, so that threads stay few whatever the number of shards. A pool belongs to the
process that made it: threads do not cross a ``fork`` (Celery's prefork children), so a child makes its own
on first use.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


class ProcessThreads:
    """One named pool of ``size`` threads per process (see the module docstring)."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None

    def executor(self) -> ThreadPoolExecutor:
        """This process's pool (made now if this process has none yet)."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix=self.name)
                self._pid = os.getpid()
            return self._pool
