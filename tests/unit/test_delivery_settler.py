"""The drainer's background bookkeeping (bridge.delivery.settler): order, failures, its bound, its threads.

Real threads and real waits; the work is plain Python functions (the Redis writes they stand for are
exercised by the drainer's integration tests).
"""

from __future__ import annotations

import functools
import threading
import time

import pytest

from bridge.delivery import settler as settler_module
from bridge.delivery.settler import MAX_BEHIND, THREADS, Settler


def _wait(gate: threading.Event) -> None:
    assert gate.wait(10)


def test_work_runs_in_the_order_it_was_handed_over_one_piece_at_a_time() -> None:
    settler, done, running = Settler(), list[int](), list[int]()

    def piece(n: int, pause: float) -> None:
        running.append(n)
        assert len(running) == 1, "two pieces of one settler ran at once"
        time.sleep(pause)
        done.append(n)
        running.remove(n)

    for n in range(MAX_BEHIND * 3):
        settler.submit(functools.partial(piece, n, 0.02 if n % 3 == 0 else 0.0))
    settler.flush()
    assert done == list(range(MAX_BEHIND * 3)) and settler.outstanding == 0


def test_a_failure_is_raised_in_the_drainer_and_later_work_still_runs() -> None:
    settler, done = Settler(), []

    start = threading.Event()

    def fail() -> None:
        _wait(start)
        raise RuntimeError("redis went away")

    settler.submit(fail)
    settler.submit(lambda: done.append("after"))
    start.set()
    with pytest.raises(RuntimeError, match="redis went away"):
        settler.flush()
    settler.flush()  # the failure is reported once
    assert done == ["after"]


def test_check_reports_a_finished_failure_without_waiting_for_the_rest() -> None:
    settler, start, gate = Settler(), threading.Event(), threading.Event()

    def fail() -> None:
        _wait(start)
        raise ValueError("fenced out")

    settler.submit(fail)
    settler.submit(lambda: _wait(gate))
    start.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            settler.check()
        except ValueError:
            break
        time.sleep(0.005)
    else:
        pytest.fail("check never reported the failure")
    assert settler.outstanding == 1  # the piece still waiting was not waited for
    gate.set()
    settler.flush()


def test_the_drainer_waits_once_max_behind_pieces_are_outstanding() -> None:
    settler, gate, returned = Settler(), threading.Event(), threading.Event()
    for _ in range(MAX_BEHIND):
        settler.submit(lambda: _wait(gate))

    def one_more() -> None:
        settler.submit(lambda: None)
        returned.set()

    thread = threading.Thread(target=one_more)
    thread.start()
    assert not returned.wait(0.2), "a piece beyond the bound was taken without waiting"
    gate.set()
    assert returned.wait(5)
    thread.join(5)
    settler.flush()


def _fail(start: threading.Event) -> None:
    _wait(start)
    raise OSError("connection reset")


def _late(done: list[str]) -> None:
    time.sleep(0.05)
    done.append("late")


@pytest.mark.parametrize("quiet", [True, False])
def test_close_waits_for_everything_and_quiet_drops_the_failure(quiet: bool) -> None:
    settler, done, start = Settler(), list[str](), threading.Event()
    settler.submit(lambda: _fail(start))
    settler.submit(lambda: _late(done))
    start.set()
    if quiet:
        settler.close(quiet=True)
    else:
        with pytest.raises(OSError, match="connection reset"):
            settler.close()
    assert done == ["late"] and settler.outstanding == 0


def test_every_settler_of_a_process_shares_a_bounded_set_of_threads() -> None:
    gate, threads, lock = threading.Event(), set[threading.Thread](), threading.Lock()

    def piece() -> None:
        with lock:
            threads.add(threading.current_thread())
        gate.wait()

    settlers = [Settler() for _ in range(THREADS * 2 + 3)]
    for s in settlers:
        s.submit(piece)
    time.sleep(0.2)
    gate.set()
    for s in settlers:
        s.flush()
    assert 1 <= len(threads) <= THREADS and all(t.name.startswith("bridge-settle") for t in threads)
    assert settler_module._THREADS.executor() is settler_module._THREADS.executor()
