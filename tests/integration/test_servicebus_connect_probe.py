"""The connect probe on a real refused connection: a namespace in outage closes its listening socket, so a
TCP connect is refused at once while the SDK would still be waiting out its own retry backoff.

The SDK's backoff is set far longer than anything else here (its first retry after 10 s, the attempt
deadline 30 s): a send that fails before either could only have been ended by the probe, and the error's
type says so (the SDK's own refusal arrives as ``NamespaceOutageError``, the deadline as
``AttemptDeadlineExceeded``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bridge.core.envelope import Envelope
from bridge.core.roles import Role
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import AttemptDeadlineExceeded, EndpointRefusedError, RefusedMidAttemptError
from bridge.servicebus.messages import to_message
from bridge.servicebus.pool import NamespacePool
from bridge.settings import Settings
from tests.integration.servicebus_support import drain

pytestmark = pytest.mark.timeout(120)
QUEUE = "orders"
SLOW_SDK = {
    "retry_total": 1,
    "retry_backoff_factor": 5.0,
    "retry_backoff_max": 30.0,
    "attempt_deadline": 30.0,
}


@pytest.fixture
def ns(namespace_factory: Callable[..., LocalNamespace]) -> LocalNamespace:
    return namespace_factory("primary", auto_create=True)


def _pool(ns: LocalNamespace, **retry: float) -> NamespacePool:
    settings = Settings(
        primary={
            "connection_string": ns.connection_string,
            "management_endpoint": ns.management_endpoint,
            "certificate": ns.certificate,
        },
        retry={**SLOW_SDK, **retry},
    )
    return NamespacePool(settings)


def _wait_for_link(pool: NamespacePool, role: Role, timeout: float = 20, *, limit: bool = False) -> None:
    """Wait until ``role``'s sender of the queue is cached (made in the background), and with ``limit``
    until its batch limit is known too (its link open)."""

    def made() -> bool:
        cached = QUEUE in pool.sender_paths(role)
        return cached and (not limit or pool.batch_limit(role, QUEUE) is not None)

    deadline = time.monotonic() + timeout
    while not made() and time.monotonic() < deadline:
        time.sleep(0.05)


def _send(pool: NamespacePool, tag: str) -> Exception | None:
    env = Envelope(entity=QUEUE, message_id=tag, body=tag.encode(), accepted_at=time.time())
    result = pool.send("primary", QUEUE, [to_message(env)])
    return None if result.accepted == [0] else result.failed[0]


def test_a_refused_connection_ends_the_send_by_the_connect_probe_not_the_sdk_retries(
    ns: LocalNamespace,
) -> None:
    pool = _pool(ns)
    try:
        # Given a sender that worked (its address was seen accepting)
        assert _send(pool, "before") is None
        assert pool.connect_probe.armed("primary")
        # When the namespace refuses connections
        ns.control.outage()
        first = _send(pool, "during-1")
        second = _send(pool, "during-2")
        # Then the probe ended the first send (abandoned mid-retry: its fate is unknown) ...
        assert type(first) is RefusedMidAttemptError, repr(first)
        assert first.timeout and "connect probe" in str(first)
        # ... and the second failed from the probe too (refused before it started, or ended while running)
        assert isinstance(second, EndpointRefusedError), repr(second)
        assert pool.connect_probe.refusals >= 2
        # And once the namespace is back, the pool sends again
        ns.control.restore()
        deadline = time.monotonic() + 20
        while (error := _send(pool, "after")) is not None and time.monotonic() < deadline:
            time.sleep(0.3)
        assert error is None
    finally:
        pool.close()
    got = [m.message_id for m in drain(ns, QUEUE, 4, max_wait=3)]
    assert got[0] == "before" and got[-1] == "after"
    assert set(got) <= {"before", "during-1", "during-2", "after"}  # an abandoned send may land late


def test_an_address_that_never_accepted_is_not_believed(ns: LocalNamespace) -> None:
    # Given a pool whose primary was never seen accepting (down from the start): its refusals prove nothing
    ns.control.outage()
    pool = _pool(ns, retry_backoff_factor=0.5)
    try:
        error = _send(pool, "never")
        # Then the SDK's own path decides (its retry after 1 s, well inside the deadline: not the probe)
        assert not isinstance(error, EndpointRefusedError), repr(error)
        assert error is not None and not isinstance(error, AttemptDeadlineExceeded)
        assert not pool.connect_probe.armed("primary") and pool.connect_probe.refusals == 0
    finally:
        pool.close()


def test_the_backups_sender_is_open_before_a_failover_needs_it(
    namespace_factory: Callable[..., LocalNamespace],
) -> None:
    primary = namespace_factory("primary", auto_create=True)
    secondary = namespace_factory("secondary", auto_create=True)
    settings = Settings(
        primary={"connection_string": primary.connection_string, "certificate": primary.certificate},
        secondary={"connection_string": secondary.connection_string, "certificate": secondary.certificate},
        retry=SLOW_SDK,
    )
    pool = NamespacePool(settings)
    try:
        # Given the backup's sender asked for (passive mode does so with every batch)
        pool.warm("secondary", QUEUE)
        _wait_for_link(pool, "secondary")
        assert pool.sender_paths("secondary") == [QUEUE]
        generation = pool.generation("secondary")
        pool.warm("secondary", QUEUE)  # already open: nothing more
        # When the failover's first send goes there
        env = Envelope(entity=QUEUE, message_id="first", body=b"first", accepted_at=time.time())
        assert pool.send("secondary", QUEUE, [to_message(env)]).accepted == [0]
        # Then it went over the link opened beforehand: same client, no second sender
        assert pool.generation("secondary") == generation
        assert pool.sender_paths("secondary") == [QUEUE]
    finally:
        pool.close()
    assert [m.message_id for m in drain(secondary, QUEUE, 1)] == ["first"]


def test_a_link_reopened_after_an_outage_is_made_in_the_background_and_used_by_the_next_send(
    namespace_factory: Callable[..., LocalNamespace],
) -> None:
    primary = namespace_factory("primary", auto_create=True)
    pool = _pool(primary)
    env = Envelope(entity=QUEUE, message_id="m", body=b"m", accepted_at=time.time())
    try:
        # Given a link lost to an outage: the failed send retired the client
        assert pool.send("primary", QUEUE, [to_message(env)]).accepted == [0]
        primary.control.outage()
        assert pool.send("primary", QUEUE, [to_message(env)]).failed
        assert pool.sender_paths("primary") == []
        # When the namespace is back (past the moment a refusal stands) and the link is asked for, twice
        primary.control.restore()
        time.sleep(pool.connect_probe.policy.refusal_stands)
        pool.reopen("primary", QUEUE)
        pool.reopen("primary", QUEUE)
        # Then it is made in the background without a send, on one new client, its batch limit known (so
        # the next batch can be packed before it is sent)
        _wait_for_link(pool, "primary", limit=True)
        assert pool.sender_paths("primary") == [QUEUE]
        assert (pool.batch_limit("primary", QUEUE) or 0) > 0
        generation = pool.generation("primary")
        # ... and the next send goes over it
        assert pool.send("primary", QUEUE, [to_message(env)]).accepted == [0]
        assert pool.generation("primary") == generation
        assert pool.sender_paths("primary") == [QUEUE]
    finally:
        pool.close()


def test_a_closed_pool_makes_no_link_again(namespace_factory: Callable[..., LocalNamespace]) -> None:
    primary = namespace_factory("primary", auto_create=True)
    pool = _pool(primary)
    # Given a pool that worked, then was closed (a worker process shutting down)
    env = Envelope(entity=QUEUE, message_id="m", body=b"m", accepted_at=time.time())
    assert pool.send("primary", QUEUE, [to_message(env)]).accepted == [0]
    pool.close()
    assert pool.generation("primary") is None
    # When a namespace-back news asks it for a link afterwards
    pool.reopen("primary", QUEUE)
    _wait_for_link(pool, "primary", timeout=3)
    # Then no client was opened: nothing outlives the close
    assert pool.generation("primary") is None
    assert pool.sender_paths("primary") == []
