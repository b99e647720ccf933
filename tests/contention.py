"""Race tests' harness: run N contenders at the same moment, each with its own client.

Separate workers hold separate connections, so each contender gets its own client from ``connect``, and a
shared barrier (``Contender.together``) lines them up so the race is real. A contender that raises fails
the test with its own exception (the barrier is broken so the others stop waiting rather than hang), and
a contender still running after ``timeout`` fails it as well; the clients are closed either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Closeable(Protocol):
    """A client the harness closes after the race."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)
T = TypeVar("T")


@dataclass(frozen=True)
class Contender(Generic[C]):
    """One contender's view: its position, its own client, and the start line it shares."""

    index: int
    client: C
    barrier: threading.Barrier

    def together(self) -> None:
        """Wait until every contender has reached this point (use it once per round)."""
        self.barrier.wait()


def race(
    contenders: int,
    connect: Callable[[], C],
    body: Callable[[Contender[C]], T],
    *,
    timeout: float = 60.0,
) -> list[T]:
    """Run ``body`` in ``contenders`` threads at once; the return values in contender order."""
    clients = [connect() for _ in range(contenders)]
    barrier = threading.Barrier(contenders, timeout=timeout)
    results: dict[int, T] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        try:
            value = body(Contender(index, clients[index], barrier))
        except BaseException as exc:
            barrier.abort()
            with lock:
                errors.append(exc)
        else:
            with lock:
                results[index] = value

    threads = [
        threading.Thread(target=run, args=(i,), name=f"contender-{i}", daemon=True) for i in range(contenders)
    ]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        for client in clients:
            client.close()
    # The first real failure, not the BrokenBarrierError it caused in the contenders that were waiting.
    if errors:
        raise min(errors, key=lambda e: isinstance(e, threading.BrokenBarrierError))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"still running after {timeout:g}s: {', '.join(stuck)}"
    return [results[i] for i in range(contenders)]
