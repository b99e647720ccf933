"""Order per key through a paired failover and restore, counted by the order checker.

Real processes: redis-server, two local namespaces, three ``bridge worker`` processes and ``bridge beat``.
Faults are the namespaces' fault control: the primary's outage, one backlog queue's outage in the middle.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.order_checker import check_namespaces
from tests.integration.paired_support import (
    cost,
    create_backlog_queues,
    create_entities,
    paired_state,
)
from tests.integration.worker_support import count_in, make_stack, outbox_depth, producer

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(240)

SETTINGS = {
    "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "3",
    "BRIDGE_PAIRED__FAILOVER_INTERVAL": "0",
    "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
    "BRIDGE_PAIRED__SYPHON_RETRY_INTERVAL": "0.5",
    "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
    "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "3",
    "BRIDGE_PAIRED__SYPHON_LEASE_TTL": "3",
    "BRIDGE_PAIRED__BACKLOG_READMIT_AFTER": "3",
    "BRIDGE_WORKERS__LEASE_TTL": "3",
}


class Traffic:
    """A producer thread sending round-robin over ``sessions`` until stopped; what it sent, per session."""

    def __init__(self, stack: LocalStack, sessions: int, pause: float = 0.01) -> None:
        self.stack = stack
        self.sent: dict[str, list[str]] = {f"s{k}": [] for k in range(sessions)}
        self.pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with producer(self.stack) as p:
            n = 0
            while not self._stop.is_set():
                for session, ids in self.sent.items():
                    ids.append(p.send("orders", f"{session}#{n}".encode(), session_id=session))
                n += 1
                time.sleep(self.pause)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    @property
    def total(self) -> int:
        """Messages sent so far."""
        return sum(len(ids) for ids in self.sent.values())


def test_paired_failover_and_restore_keep_every_session_in_order(make_stack: Any) -> None:
    entities = {"orders": {"replication": "paired", "requires_session": True, "outbox_shards": 3}}
    stack = make_stack(entities, settings=SETTINGS)
    create_entities(stack.primary, sessions=["orders"])
    queues = create_backlog_queues(stack, count=3)
    for name in ("worker-a", "worker-b", "worker-c"):
        stack.start_worker(name, concurrency=2)
    stack.start_beat()
    with Traffic(stack, sessions=20) as traffic:
        # Given continuous traffic of 20 sessions through three workers
        wait_until(lambda: traffic.total >= 100, 30, what="traffic flowing")
        # When the primary goes down: failover engages and the sessions go to the three backlog queues
        stack.primary.control.outage()
        wait_until(lambda: paired_state(stack, "orders").failed_over, 30, what="failover engaged")
        wait_until(lambda: cost(stack, "orders").backlog_sends >= 200, 30, what="backlog sends")
        # And one backlog queue fails in the middle of the outage, then comes back
        stack.secondary.control.outage(entity=queues[1])
        time.sleep(2)
        stack.secondary.control.restore(entity=queues[1])
        wait_until(lambda: cost(stack, "orders").backlog_sends >= 400, 30, what="more backlog sends")
        # When the primary comes back, under traffic
        stack.primary.control.restore()
        wait_until(
            lambda: not paired_state(stack, "orders").failed_over, 30, what="the ping restoring orders"
        )
        time.sleep(2)
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 60, what="an empty outbox")
    wait_until(lambda: sum(count_in(stack.secondary, q) for q in queues) == 0, 60, what="empty backlog")
    # Then every session's messages reached the primary in the order they were sent, none missing
    report = check_namespaces(traffic.sent, {"primary": stack.primary}, "orders", sessions=True, timeout=60)
    assert report.out_of_sequence == 0 and not report.missing, report
    assert cost(stack, "orders").syphon_sends > 0


def test_a_message_that_cannot_be_aliased_holds_back_only_its_own_session(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "paired"}}, settings=SETTINGS)
    create_entities(stack.primary, queues=["orders"])
    queues = create_backlog_queues(stack, count=3)
    stack.start_worker()
    stack.start_beat()
    stack.primary.control.outage()
    with producer(stack) as p:
        # Given failover engaged
        p.send("orders", b"trigger", partition_key="other")
        wait_until(lambda: paired_state(stack, "orders").failed_over, 30, what="failover engaged")
        # When one batch of a session holds a message that cannot be aliased (it already has x-ms-path),
        # and another session's messages follow it
        batch = [
            {"body": b"m1", "partition_key": "k"},
            {"body": b"m2", "partition_key": "k", "application_properties": {"x-ms-path": "elsewhere"}},
            {"body": b"m3", "partition_key": "k"},
            {"body": b"m4", "partition_key": "k"},
            {"body": b"n1", "partition_key": "n"},
        ]
        ids = p.send_batch("orders", batch)
        # Then m1 and the other session reach the backlog; m2 waits for the primary and m3, m4 wait behind
        # it, never sent anywhere while they wait
        wait_until(lambda: cost(stack, "orders").backlog_sends >= 3, 30, what="the sendable messages")
        time.sleep(3)
        assert cost(stack, "orders").backlog_sends == 3  # trigger, m1, n1: nothing re-sent on retries
        assert sum(count_in(stack.secondary, q) for q in queues) == 3
        assert outbox_depth(stack, "orders") == 3
    # When the primary comes back
    stack.primary.control.restore()
    # Then the session's four messages arrive in their order, and n1 too
    sent = {"k": ids[:4], "n": ids[4:]}
    report = check_namespaces(sent, {"primary": stack.primary}, "orders", timeout=60)
    assert report.out_of_sequence == 0 and not report.missing, report
