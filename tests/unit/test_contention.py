"""The race harness itself (tests/contention.py): it must report a failing or stuck contender."""

from __future__ import annotations

import threading

import pytest

from tests.contention import Contender, race


class FakeClient:
    """Stands in for a Redis client: the harness only opens and closes it."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_results_come_back_in_contender_order_and_clients_are_closed() -> None:
    clients: list[FakeClient] = []

    def connect() -> FakeClient:
        clients.append(FakeClient())
        return clients[-1]

    arrived: list[int] = []
    lock = threading.Lock()

    def body(c: Contender[FakeClient]) -> int:
        with lock:
            arrived.append(c.index)
        c.together()
        # Given the barrier, nobody gets here before all four have arrived
        assert len(arrived) == 4
        return c.index * 10

    assert race(4, connect, body) == [0, 10, 20, 30]
    assert len(clients) == 4 and all(client.closed for client in clients)


@pytest.mark.timeout(20)
def test_a_failing_contender_fails_the_race_without_hanging_the_others() -> None:
    def body(c: Contender[FakeClient]) -> None:
        if c.index == 2:
            raise ValueError("contender 2 broke")
        c.together()  # the others wait here for a contender that will never come

    # The harness's own limit is far beyond the test's: only breaking the barrier lets this finish in time.
    with pytest.raises(ValueError, match="contender 2 broke"):
        race(5, FakeClient, body, timeout=600)


def test_a_stuck_contender_fails_the_race() -> None:
    release = threading.Event()

    def body(c: Contender[FakeClient]) -> None:
        if c.index == 0:
            release.wait(5)

    try:
        with pytest.raises(AssertionError, match="contender-0"):
            race(2, FakeClient, body, timeout=0.2)
    finally:
        release.set()
