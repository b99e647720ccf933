"""AttemptRunner: the hard deadline outside the SDK, with plain blocking callables (no network)."""

from __future__ import annotations

import threading
import time

import pytest

from bridge.errors import AttemptDeadlineExceeded
from bridge.servicebus.deadline import AttemptRunner


def wait_for(condition: object, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met")


def test_result_and_exceptions_come_back_on_the_caller_thread() -> None:
    runner = AttemptRunner()
    assert runner.run(lambda: 41 + 1, 1.0) == 42
    with pytest.raises(KeyError):
        runner.run(lambda: {}["missing"], 1.0)
    assert runner.stuck == 0
    runner.shutdown()


def test_overrun_raises_at_the_deadline_and_the_thread_is_counted_until_it_returns() -> None:
    runner = AttemptRunner()
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(AttemptDeadlineExceeded) as caught:
        runner.run(release.wait, 0.2, namespace="primary", what="send to q")
    took = time.monotonic() - started
    assert 0.2 <= took < 0.5
    assert caught.value.namespace == "primary" and "send to q" in str(caught.value)
    assert runner.stuck == 1
    # The next call runs on a fresh thread, not behind the stuck one
    assert runner.run(lambda: "ok", 1.0) == "ok"
    release.set()
    wait_for(lambda: runner.stuck == 0)
    runner.shutdown()


def test_stuck_threads_are_bounded() -> None:
    runner = AttemptRunner(max_stuck=2)
    release = threading.Event()
    for _ in range(2):
        with pytest.raises(AttemptDeadlineExceeded):
            runner.run(release.wait, 0.05)
    # At the bound, a new attempt is refused at once without starting a thread
    threads = threading.active_count()
    started = time.monotonic()
    with pytest.raises(AttemptDeadlineExceeded, match="still stuck"):
        runner.run(lambda: "never", 5.0)
    assert time.monotonic() - started < 0.05 and threading.active_count() == threads
    # discard() skips closing while at the bound
    closed = threading.Event()
    runner.discard(closed.set, "client")
    time.sleep(0.05)
    assert not closed.is_set()
    release.set()
    wait_for(lambda: runner.stuck == 0)
    assert runner.run(lambda: "again", 1.0) == "again"
    runner.shutdown()


def test_discard_closes_on_a_daemon_thread_and_never_blocks() -> None:
    runner = AttemptRunner()
    hang = threading.Event()
    started = time.monotonic()
    runner.discard(hang.wait, "stuck client")
    assert time.monotonic() - started < 0.05
    assert runner.stuck == 1
    assert any(t.daemon and t.name.endswith("-close") for t in threading.enumerate())
    hang.set()
    wait_for(lambda: runner.stuck == 0)


def test_idle_threads_are_reused_and_bounded() -> None:
    runner = AttemptRunner(max_idle=1)
    names = {runner.run(lambda: threading.current_thread().name, 1.0) for _ in range(5)}
    assert len(names) == 1
    runner.shutdown()


def test_invalid_bounds() -> None:
    with pytest.raises(ValueError):
        AttemptRunner(max_stuck=0)


def test_a_watch_that_returns_an_error_abandons_the_call_and_raises_it() -> None:
    from bridge.errors import RefusedMidAttemptError
    from bridge.servicebus.deadline import Watch

    runner = AttemptRunner()
    release = threading.Event()
    checks: list[float] = []

    def check(left: float) -> BaseException | None:
        checks.append(left)
        return RefusedMidAttemptError("refused") if len(checks) == 2 else None

    # Given a call that would run for the whole 30 s deadline, and a watch that objects on its second look
    with pytest.raises(RefusedMidAttemptError):
        runner.run(release.wait, 30.0, namespace="primary", watch=Watch(check, after=0.01, every=0.01))
    # Then the call was abandoned after two looks (each told how much of the deadline was left)
    assert len(checks) == 2 and all(0 < left <= 30.0 for left in checks)
    assert runner.stuck == 1
    release.set()
    wait_for(lambda: runner.stuck == 0)
    # And a watch that never objects leaves the call its result

    def slow() -> int:
        time.sleep(0.05)
        return 7

    assert runner.run(slow, 5.0, watch=Watch(lambda left: None, 0.01, 0.01)) == 7
    runner.shutdown()
