"""The receiving end behind the real send path: active, passive with a failover in the middle,
paired with backlog, ping and syphon — every message handed once, pings never handed.

One stack for the module (its tests run in order and each restores what it broke): a private redis-server,
two local namespaces, a ``bridge worker`` and a ``bridge beat``, and per test a ``bridge receive`` process for
the test's own entity (``act``: active, ``pas``: passive, ``par``: paired). Messages enter through the
Python ``Producer``; outages are the namespaces' fault control.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from bridge.core.paired import PING_CONTENT_TYPE
from bridge.embedded.stack import BridgeProcess, LocalStack, wait_until
from bridge.servicebus.admin import NamespaceAdmin
from tests.integration.paired_support import (
    PAIRED_SETTINGS,
    cost,
    create_backlog_queues,
    mark_failed_over,
    paired_state,
)
from tests.integration.receiver_support import FAST_RECEIVER, HANDLERS, counts, namespace, per_id, recorded
from tests.integration.worker_support import FAST_SETTINGS, TEARDOWN_GRACE, count_in, producer

pytestmark = pytest.mark.timeout(150)

ENTITIES = {
    "act": {"replication": "active"},
    "pas": {"replication": "passive"},
    "par": {"replication": "paired"},
}
LOCK = timedelta(seconds=5)
"""Lock duration of the tests' queues: a copy whose completion an outage broke comes back within seconds."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Redis, both namespaces, a worker and a beat, shared by the module's tests."""
    settings = {**FAST_SETTINGS, **PAIRED_SETTINGS, **FAST_RECEIVER, "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1"}
    local = LocalStack(tmp_path_factory.mktemp("receiver-stack"), entities=ENTITIES, settings=settings)
    try:
        local.start()
        create_backlog_queues(local)
        for ns in (local.primary, local.secondary):
            with NamespaceAdmin(namespace(ns)) as admin:
                for entity in ENTITIES:
                    admin.create_queue(entity, lock_duration=LOCK)
        local.start_worker()
        local.start_beat()
        yield local
    finally:
        local.stop(timeout=TEARDOWN_GRACE)


def receiver(stack: LocalStack, entity: str) -> BridgeProcess:
    """A ``bridge receive`` process for ``entity`` with the recording handler."""
    return stack.start_bridge(f"receive-{entity}", "receive", entity, "--handler", f"{HANDLERS}:record")


def settled(stack: LocalStack, entity: str, handled: int) -> Any:
    """The entity's counters once ``handled`` messages were handled."""
    got = counts(stack.redis.url, entity)
    return got if got.handled >= handled else None


def test_active_replication_through_the_workers_hands_each_message_once(stack: LocalStack) -> None:
    proc = receiver(stack, "act")
    try:
        # Given 300 messages sent by the workers to both namespaces
        with producer(stack) as p:
            ids = p.send_batch("act", [f"a-{i}".encode() for i in range(300)])
        # Then the receiver hands each once and completes the second copy unhandled
        wait_until(
            lambda: counts(stack.redis.url, "act").duplicates_suppressed >= 300,
            90,
            what=f"both copies of every message settled: {proc.log_tail()}",
        )
    finally:
        proc.stop()
    calls = per_id(recorded(stack.redis.url, "act"))
    assert set(calls) == set(ids) and max(calls.values()) == 1
    got = counts(stack.redis.url, "act")
    assert (got.received_primary, got.received_secondary, got.handled) == (300, 300, 300)


def test_passive_with_a_failover_in_the_middle_hands_each_message_once(stack: LocalStack) -> None:
    proc = receiver(stack, "pas")
    ids: list[str] = []
    try:
        with producer(stack) as p:
            # Given messages flowing to the primary
            ids += p.send_batch("pas", [f"before-{i}".encode() for i in range(100)])
            wait_until(lambda: settled(stack, "pas", 50), 60, what=f"first handled: {proc.log_tail()}")
            # When the primary goes down in the middle of the stream, the workers fail over to the secondary
            stack.primary.control.outage()
            try:
                ids += p.send_batch("pas", [f"during-{i}".encode() for i in range(100)])
                wait_until(
                    lambda: count_in(stack.secondary, "pas") > 0 or settled(stack, "pas", 150),
                    60,
                    what="messages on the secondary",
                )
            finally:
                stack.primary.control.restore()
            ids += p.send_batch("pas", [f"after-{i}".encode() for i in range(50)])
        # Then every message is handed exactly once, whichever namespace it ended in
        wait_until(lambda: settled(stack, "pas", 250), 90, what=f"all handled: {proc.log_tail()}")
        wait_until(
            lambda: count_in(stack.primary, "pas") + count_in(stack.secondary, "pas") == 0,
            30,
            what="both namespaces drained",
        )
    finally:
        proc.stop()
    calls = per_id(recorded(stack.redis.url, "pas"))
    assert set(calls) == set(ids) and max(calls.values()) == 1
    got = counts(stack.redis.url, "pas")
    assert got.handled == 250 and got.received_secondary > 0 and got.received_primary > 0


def test_paired_with_backlog_and_syphon_hands_each_once_and_never_a_ping(stack: LocalStack) -> None:
    proc = receiver(stack, "par")
    ids: list[str] = []
    try:
        with producer(stack) as p:
            ids += p.send_batch("par", [f"up-{i}".encode() for i in range(5)])
            wait_until(lambda: settled(stack, "par", 5), 60, what=f"first handled: {proc.log_tail()}")
            # Given a primary outage long enough for failover: messages go to the backlog queues
            stack.primary.control.outage()
            try:
                ids += p.send_batch("par", [f"down-{i}".encode() for i in range(10)])
                wait_until(lambda: cost(stack, "par").backlog_sends >= 10, 60, what="backlog sends")
            finally:
                stack.primary.control.restore()
            # When the primary is back, a ping makes the entity available and the syphon empties the backlog
            wait_until(lambda: not paired_state(stack, "par").failed_over, 30, what="ping accepted")
            ids += p.send_batch("par", [f"back-{i}".encode() for i in range(5)])
            wait_until(lambda: settled(stack, "par", 20), 60, what=f"all handled: {proc.log_tail()}")
        # And pings reach the receiver while it is connected (TTL 1 s): engage failover on a healthy primary
        mark_failed_over(stack, "par")
        wait_until(lambda: counts(stack.redis.url, "par").pings_dropped >= 1, 30, what="a ping dropped")
        wait_until(lambda: not paired_state(stack, "par").failed_over, 30, what="available again")
    finally:
        proc.stop()
    # Then every message was handed once, no ping ever reached the handler, and the backlog is empty
    entries = recorded(stack.redis.url, "par")
    calls = per_id(entries)
    assert set(calls) == set(ids) and max(calls.values()) == 1
    assert all(entry["content_type"] != PING_CONTENT_TYPE for entry in entries)
    assert cost(stack, "par").syphon_sends >= 10
    got = counts(stack.redis.url, "par")
    assert got.handled == 20 and got.pings_dropped >= 1
