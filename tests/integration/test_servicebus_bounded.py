"""NamespacePool resources stay bounded however many attempts fail while a namespace is down.

A days-long outage means hundreds of thousands of failed attempts per worker process. Each one opens and
retires SDK clients, so anything kept per attempt (a client, a thread, a socket, an error object) would
grow without bound. These tests count what is alive after many failed attempts (counts and bytes, never
durations): an outage (connection refused), a killed namespace process, and a blackhole (every attempt
overruns the deadline until the stuck-thread bound refuses them).
"""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from azure.servicebus import ServiceBusClient

from bridge.core.envelope import Envelope
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import AttemptDeadlineExceeded, NamespaceRefusedError
from bridge.servicebus.clients import RoleClient
from bridge.servicebus.deadline import DEFAULT_MAX_IDLE, DEFAULT_MAX_STUCK
from bridge.servicebus.messages import to_message
from bridge.servicebus.pool import NamespacePool
from tests.integration.servicebus_support import settings_for

pytestmark = pytest.mark.timeout(180)
QUEUE = "orders"
WARM_UP = 30
ATTEMPTS = 300
HEAP_GROWTH_LIMIT = 100_000
"""Bytes the Python heap may grow over ``ATTEMPTS`` failed attempts: 330 bytes each would exceed it."""


@dataclass(frozen=True)
class Resources:
    """What a process holds on behalf of the pool."""

    threads: int
    fds: int
    sdk_clients: int
    role_clients: int


def resources() -> Resources:
    gc.collect()
    objects = gc.get_objects()
    return Resources(
        threads=threading.active_count(),
        fds=len(os.listdir("/proc/self/fd")),
        sdk_clients=sum(isinstance(o, ServiceBusClient) for o in objects),
        role_clients=sum(isinstance(o, RoleClient) for o in objects),
    )


def fast_pool(ns: LocalNamespace, attempt_deadline: float) -> NamespacePool:
    """A pool without SDK retries, so each failed attempt is quick and the loop does many."""
    settings = settings_for(ns, attempt_deadline=attempt_deadline)
    retry = settings.retry.model_copy(update={"retry_total": 0})
    return NamespacePool(settings.model_copy(update={"retry": retry}))


def fail_once(pool: NamespacePool) -> BaseException:
    env = Envelope(entity=QUEUE, message_id="m", body=b"x" * 256, accepted_at=time.time())
    result = pool.send("primary", QUEUE, [to_message(env)])
    assert result.failed, "the namespace is down: the send must fail"
    return result.failed[0]


@pytest.mark.parametrize(
    "take_down",
    [
        pytest.param(lambda ns: ns.control.outage(), id="outage"),
        pytest.param(lambda ns: ns.kill(), id="killed"),
    ],
)
def test_failed_attempts_against_a_down_namespace_keep_nothing(
    namespace_factory: Callable[..., LocalNamespace], take_down: Callable[[LocalNamespace], None]
) -> None:
    ns = namespace_factory("primary", auto_create=True)
    pool = fast_pool(ns, attempt_deadline=2.0)
    tracemalloc.start()
    try:
        # Given a namespace that is down, and a pool warmed up on it (lazy imports, first client)
        take_down(ns)
        for _ in range(WARM_UP):
            fail_once(pool)
        before = resources()
        heap_before = tracemalloc.get_traced_memory()[0]
        # When hundreds more attempts fail, each retiring its client and opening a fresh one
        errors = {type(fail_once(pool)) for _ in range(ATTEMPTS)}
        after = resources()
        heap_growth = tracemalloc.get_traced_memory()[0] - heap_before
        print(f"{before} -> {after}; heap +{heap_growth} bytes over {ATTEMPTS} attempts")
        # Then every attempt was an outage of the whole address (it refused the connection), and nothing
        # accumulated: one live client at most, no new threads or sockets, and the Python heap did not grow
        assert errors == {NamespaceRefusedError}
        assert after.sdk_clients <= 1 and after.role_clients <= 1
        assert after.threads <= before.threads
        assert after.fds <= before.fds
        assert heap_growth < HEAP_GROWTH_LIMIT
    finally:
        tracemalloc.stop()
        pool.close()


def test_blackholed_attempts_keep_at_most_the_stuck_bound(
    namespace_factory: Callable[..., LocalNamespace],
) -> None:
    ns = namespace_factory("primary", auto_create=True)
    before = resources()
    pool = fast_pool(ns, attempt_deadline=0.3)
    try:
        # Given a blackholed namespace: every attempt overruns the deadline and its client is discarded
        ns.control.blackhole()
        # When attempts keep failing long after the stuck-thread bound is reached
        errors = {type(fail_once(pool)) for _ in range(4 * DEFAULT_MAX_STUCK)}
        after = resources()
        print(f"{before} -> {after}; stuck threads {pool.stuck_threads}")
        # Then threads, sockets and SDK clients are bounded by the stuck bound, not by the attempts
        assert errors == {AttemptDeadlineExceeded}
        assert pool.stuck_threads <= DEFAULT_MAX_STUCK
        assert after.threads <= before.threads + DEFAULT_MAX_STUCK + DEFAULT_MAX_IDLE
        assert after.sdk_clients <= DEFAULT_MAX_STUCK + 1
        assert after.fds <= before.fds + 2 * DEFAULT_MAX_STUCK
    finally:
        ns.control.restore()
        pool.close()
