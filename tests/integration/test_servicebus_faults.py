"""NamespacePool under real faults of a local namespace: each fault maps to its bridge error class, in time.

Each test gets its own namespace process (faults are namespace-wide); the pool runs with the default SDK
retry settings and a 2 s attempt deadline. Durations are printed (``-s``) for the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bridge.core.envelope import Envelope
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import (
    AttemptDeadlineExceeded,
    NamespaceOutageError,
    NamespaceTimeoutError,
    TransientNamespaceError,
)
from bridge.servicebus.messages import to_message
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.sending import SendResult
from tests.integration.servicebus_support import TEST_DEADLINE, drain, pool_for

pytestmark = pytest.mark.timeout(120)
QUEUE = "orders"


@pytest.fixture
def ns(namespace_factory: Callable[..., LocalNamespace]) -> LocalNamespace:
    return namespace_factory("primary", auto_create=True)


def send_one(pool: NamespacePool, tag: str) -> tuple[SendResult, float]:
    env = Envelope(entity=QUEUE, message_id=tag, body=tag.encode(), accepted_at=time.time())
    started = time.monotonic()
    result = pool.send("primary", QUEUE, [to_message(env)])
    return result, time.monotonic() - started


def test_outage_is_reported_fast_as_outage(ns: LocalNamespace) -> None:
    with pool_for(ns) as pool:
        assert send_one(pool, "before")[0].accepted == [0]
        # Given an outage that closes the open connection and refuses new ones
        ns.control.outage()
        # When sending on the open sender, then on a fresh connection
        first, first_took = send_one(pool, "during-1")
        second, second_took = send_one(pool, "during-2")
        print(f"outage detected in {first_took:.3f}s (open sender), {second_took:.3f}s (reconnect)")
        # Then both fail as outages well inside the attempt deadline (the connect probe may end them before
        # the SDK's own retry does: test_servicebus_connect_probe.py)
        for result, took in ((first, first_took), (second, second_took)):
            assert isinstance(result.failed[0], NamespaceOutageError), repr(result.failed[0])
            assert took < TEST_DEADLINE
        # And after restore (and the probe's last refusal has lapsed) the pool sends again
        ns.control.restore()
        time.sleep(pool.connect_probe.policy.refusal_stands)
        assert send_one(pool, "after")[0].accepted == [0]
    got = [m.message_id for m in drain(ns, QUEUE, 4)]
    # A send the probe abandoned can still be delivered by the SDK's own retry once the namespace is back
    assert got[0] == "before" and "after" in got and set(got) <= {"before", "during-1", "during-2", "after"}


def test_killed_namespace_is_an_outage_and_restart_reopens(ns: LocalNamespace) -> None:
    with pool_for(ns) as pool:
        assert send_one(pool, "before")[0].accepted == [0]
        generation = pool.generation("primary")
        # Given the namespace process is killed
        ns.kill()
        result, took = send_one(pool, "dead")
        print(f"killed namespace detected in {took:.3f}s")
        assert isinstance(result.failed[0], NamespaceOutageError) and took < TEST_DEADLINE
        # When it restarts on the same port and data
        ns.start()
        # Then the pool reopens a fresh client and sends again
        assert send_one(pool, "after")[0].accepted == [0]
        assert pool.generation("primary") not in (None, generation)
    assert [m.message_id for m in drain(ns, QUEUE, 2)] == ["before", "after"]


def test_server_busy_is_transient(ns: LocalNamespace) -> None:
    with pool_for(ns) as pool:
        ns.control.busy()
        result, took = send_one(pool, "busy")
        error = result.failed[0]
        assert type(error) is TransientNamespaceError
        assert "ServiceBusServerBusyError" in str(error)
        generation = pool.generation("primary")
        ns.control.restore()
        # A transient error keeps the client
        assert send_one(pool, "after")[0].accepted == [0]
        assert pool.generation("primary") == generation
        print(f"busy reported in {took:.3f}s")


def test_stalled_settlement_is_a_transient_timeout(ns: LocalNamespace) -> None:
    with pool_for(ns) as pool:
        assert send_one(pool, "open")[0].accepted == [0]
        # Given the entity never settles transfers
        ns.control.stall(entity=QUEUE)
        result, took = send_one(pool, "stalled")
        print(f"stall reported in {took:.3f}s")
        # Then the SDK's own timeout answers first: transient, flagged as a timeout
        assert type(result.failed[0]) is NamespaceTimeoutError
        assert took < TEST_DEADLINE


def test_blackhole_costs_one_deadline_and_the_pool_recovers(ns: LocalNamespace) -> None:
    with pool_for(ns) as pool:
        assert send_one(pool, "before")[0].accepted == [0]
        # Given a blackhole: TCP accepted, not one byte answered (the SDK would hang forever)
        ns.control.blackhole()
        timings = []
        for attempt in range(2):  # the open sender, then a fresh connection stuck in SASL
            result, took = send_one(pool, f"hole-{attempt}")
            timings.append(took)
            assert isinstance(result.failed[0], AttemptDeadlineExceeded)
            assert took < TEST_DEADLINE + 1
        print(f"blackhole deadline hit after {timings[0]:.3f}s and {timings[1]:.3f}s")
        assert pool.stuck_threads <= 4  # two attempts and their background closes at most
        # When the endpoint is restored, the pool works again with a new client
        ns.control.restore()
        result, took = send_one(pool, "after")
        assert result.accepted == [0], result.failed
        print(f"first send after restore took {took:.3f}s")
        deadline = time.monotonic() + 10
        while pool.stuck_threads and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.stuck_threads == 0
    assert [m.message_id for m in drain(ns, QUEUE, 2)] == ["before", "after"]


def test_stuck_attempts_are_bounded(ns: LocalNamespace) -> None:
    # Given a pool that tolerates only two stuck threads, and a blackholed namespace
    with pool_for(ns, attempt_deadline=0.5, max_stuck_threads=2) as pool:
        ns.control.blackhole()
        send_one(pool, "hole")
        # When the bound is reached, further attempts are refused at once instead of starting a thread
        results = [send_one(pool, f"hole-{i}") for i in range(3)]
        refused = [took for result, took in results if "still stuck" in str(result.failed[0])]
        assert refused and all(took < 0.2 for took in refused)
        assert pool.stuck_threads <= 2
        ns.control.restore()
        deadline = time.monotonic() + 10
        while pool.stuck_threads and time.monotonic() < deadline:
            time.sleep(0.1)
        # Then the pool sends again (a cold open may miss the 0.5 s deadline on a loaded machine: retried)
        after = send_one(pool, "after")[0]
        while after.accepted != [0] and time.monotonic() < deadline:
            after = send_one(pool, "after")[0]
        assert after.accepted == [0], after.failed


def test_pool_used_in_a_forked_child_starts_afresh(ns: LocalNamespace) -> None:
    import multiprocessing

    with pool_for(ns) as pool:
        assert send_one(pool, "parent")[0].accepted == [0]
        parent_generation = pool.generation("primary")

        def child(results: multiprocessing.Queue[object]) -> None:  # type: ignore[type-arg]
            # The parent's client is not reused (its sockets belong to the parent): a fresh one sends
            result, _ = send_one(pool, "child")
            results.put((result.accepted, pool.generation("primary")))

        context = multiprocessing.get_context("fork")
        results: multiprocessing.Queue[object] = context.Queue()  # type: ignore[type-arg]
        process = context.Process(target=child, args=(results,))
        process.start()
        accepted, child_generation = results.get(timeout=30)  # type: ignore[misc]
        process.join(10)
        assert accepted == [0] and child_generation != parent_generation
        # The parent's client still works after the child exited
        assert send_one(pool, "parent-again")[0].accepted == [0]
        assert pool.generation("primary") == parent_generation
    assert sorted(m.message_id for m in drain(ns, QUEUE, 3)) == ["child", "parent", "parent-again"]
