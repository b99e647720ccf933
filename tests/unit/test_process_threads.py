"""The drainers' shared thread pools (bridge.process_threads): one per process, a new one after a
fork (Celery's prefork children), whose threads did not cross it."""

from __future__ import annotations

import os
import threading
import time

from bridge.process_threads import ProcessThreads


def test_one_pool_per_process_and_at_most_its_size_of_threads() -> None:
    threads = ProcessThreads(2, "test-shared")
    pool = threads.executor()
    assert threads.executor() is pool
    gate, seen = threading.Event(), set[int]()

    def work() -> None:
        seen.add(threading.get_ident())
        assert gate.wait(10)

    futures = [pool.submit(work) for _ in range(6)]
    gate.set()
    for future in futures:
        future.result(10)
    assert 1 <= len(seen) <= 2


def test_a_forked_child_makes_its_own_pool_that_runs_work() -> None:
    threads = ProcessThreads(2, "test-fork")
    parent_pool = threads.executor()
    assert parent_pool.submit(lambda: 1).result(10) == 1
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool thread did not cross the fork
        code = 1
        try:
            pool = threads.executor()
            code = 0 if pool is not parent_pool and pool.submit(lambda: 2).result(10) == 2 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert threads.executor() is parent_pool


def test_after_shutdown_queued_work_is_dropped_and_nothing_new_runs() -> None:
    threads = ProcessThreads(1, "test-shutdown")
    gate, ran = threading.Event(), list[str]()

    def blocker() -> None:
        assert gate.wait(10)
        ran.append("running")

    # Given one thread busy and one piece of work queued behind it
    assert threads.submit(blocker)
    assert threads.submit(lambda: ran.append("queued"))
    # When the pool is shut down, then the work still running finishes, the queued one never runs
    threads.shutdown()
    assert threads.submit(lambda: ran.append("after")) is False
    gate.set()
    time.sleep(0.2)
    assert ran == ["running"]
