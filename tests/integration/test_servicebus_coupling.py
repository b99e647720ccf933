"""Close/fault coupling of the two namespace clients with two real namespace processes.

When the primary's client faults and the secondary's is not closed within 5 s, the pool closes the
secondary's too; both reopen cleanly on next use.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bridge.core.coupling import COUPLING_GRACE
from bridge.core.envelope import Envelope
from bridge.core.roles import Role
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import NamespaceOutageError
from bridge.servicebus.messages import to_message
from bridge.servicebus.pool import NamespacePool
from tests.integration.servicebus_support import drain, pool_for

pytestmark = pytest.mark.timeout(120)
QUEUE = "orders"


def send(pool: NamespacePool, role: Role, tag: str) -> None:
    env = Envelope(entity=QUEUE, message_id=tag, body=b"x", accepted_at=time.time())
    result = pool.send(role, QUEUE, [to_message(env)])
    if result.failed:
        raise result.failed[0]


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s")


def test_primary_fault_closes_the_secondary_within_grace_and_both_reopen(
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
) -> None:
    primary, secondary = namespace_pair
    with pool_for(primary, secondary) as pool:
        # Given both roles have open clients
        send(pool, "primary", "p-1")
        send(pool, "secondary", "s-1")
        primary_gen, secondary_gen = pool.generation("primary"), pool.generation("secondary")
        assert secondary.control.status()["connections"] >= 1
        # When the primary faults (outage)
        primary.control.outage()
        with pytest.raises(NamespaceOutageError):
            send(pool, "primary", "p-lost")
        faulted_at = time.monotonic()
        assert pool.generation("primary") is None
        # Then the secondary client stays usable until the grace ends, and is closed by then
        assert pool.generation("secondary") == secondary_gen
        wait_until(lambda: pool.generation("secondary") is None, COUPLING_GRACE + 1)
        elapsed = time.monotonic() - faulted_at
        print(f"secondary client closed {elapsed:.3f}s after the primary fault")
        assert COUPLING_GRACE - 0.5 <= elapsed <= COUPLING_GRACE + 1
        wait_until(lambda: secondary.control.status()["connections"] == 0, 5)
        # And both reopen cleanly on next use
        primary.control.restore()
        send(pool, "secondary", "s-2")
        send(pool, "primary", "p-2")
        assert pool.generation("primary") not in (None, primary_gen)
        assert pool.generation("secondary") not in (None, secondary_gen)
    assert [m.message_id for m in drain(primary, QUEUE, 2)] == ["p-1", "p-2"]
    assert [m.message_id for m in drain(secondary, QUEUE, 2)] == ["s-1", "s-2"]


def test_partner_opened_after_the_fault_is_left_alone(
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
) -> None:
    primary, secondary = namespace_pair
    with pool_for(primary, secondary, coupling_grace=0.5) as pool:
        # Given only the primary is open when it faults
        send(pool, "primary", "p-1")
        primary.kill()
        with pytest.raises(NamespaceOutageError):
            send(pool, "primary", "p-lost")
        # When the secondary opens afterwards (a failover) and the grace passes
        send(pool, "secondary", "s-1")
        generation = pool.generation("secondary")
        time.sleep(1.0)
        # Then that clean client is kept
        assert pool.generation("secondary") == generation
        send(pool, "secondary", "s-2")
    assert [m.message_id for m in drain(secondary, QUEUE, 2)] == ["s-1", "s-2"]
