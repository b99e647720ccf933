"""Send workers under namespace faults: outage, both down, blackhole, busy/stall, a killed worker.

Faults are real: the local namespaces' fault control (refused connections, throttling, never-settled
transfers, a TCP blackhole) and ``kill -9`` of worker processes.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import redis

from bridge.embedded.stack import wait_until
from bridge.outbox.keys import outbox
from tests.integration.operations_support import start_serve
from tests.integration.worker_support import (
    count_in,
    entity_status,
    make_stack,
    producer,
    receive_all,
)

__all__ = ["make_stack"]


def test_passive_failover_swaps_roles_for_every_worker_and_never_swaps_back_by_itself(
    make_stack: Any,
) -> None:
    stack = make_stack({"orders": {"replication": "passive"}})
    worker_a = stack.start_worker("worker-a")
    stack.start_beat()
    with producer(stack) as p:
        # Given a healthy stream to the primary
        first = [p.send("orders", f"a{i}".encode()) for i in range(20)]
        assert sorted(m.message_id for m in receive_all(stack.primary, "orders", 20)) == sorted(first)
        # When the primary goes down mid-stream
        stack.primary.control.outage()
        second = [p.send("orders", f"b{i}".encode()) for i in range(20)]
        # Then every later message lands in the secondary and the roles swapped
        assert sorted(m.message_id for m in receive_all(stack.secondary, "orders", 20)) == sorted(second)
        status = entity_status(stack, "orders")
        assert status["active"] == "secondary"
        assert status["namespaces"]["primary"]["available"] is False
        assert status["namespaces"]["primary"]["last_error"]
        # When the primary is restored and a different worker process takes over
        stack.primary.control.restore()
        worker_a.kill()
        stack.start_worker("worker-b")
        third = [p.send("orders", f"c{i}".encode()) for i in range(10)]
        # Then it sends to the new active (secondary): no swap back while the secondary is healthy
        assert sorted(m.message_id for m in receive_all(stack.secondary, "orders", 10)) == sorted(third)
        assert count_in(stack.primary, "orders") == 0
        assert entity_status(stack, "orders")["active"] == "secondary"
        # When the new active fails, the roles swap back
        stack.secondary.control.outage()
        fourth = [p.send("orders", f"d{i}".encode()) for i in range(10)]
        assert sorted(m.message_id for m in receive_all(stack.primary, "orders", 10)) == sorted(fourth)
        assert entity_status(stack, "orders")["active"] == "primary"


def test_both_namespaces_down_producers_still_get_202_and_nothing_is_lost(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "passive"}})
    stack.start_worker()
    stack.start_beat()
    base_url = start_serve(stack)
    # Given both namespaces down
    stack.primary.control.outage()
    stack.secondary.control.outage()
    # When producers post over HTTP
    ids = []
    with httpx.Client(base_url=base_url, timeout=10) as http:
        for i in range(30):
            answer = http.post("/v1/entities/orders/messages", json={"body": f"m{i}"})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["message_id"])
    # Then the outbox holds them while the workers keep retrying: both namespaces were tried and failed
    wait_until(
        lambda: not any(ns["available"] for ns in entity_status(stack, "orders")["namespaces"].values()),
        30,
        what="a worker trying both namespaces",
    )
    status = entity_status(stack, "orders")
    assert status["outbox_depth"] == 30
    assert status["namespaces"]["primary"]["last_error"] and status["namespaces"]["secondary"]["last_error"]
    assert status["active"] == "primary"  # both failed: roles unchanged
    # When the namespaces come back, everything is delivered
    stack.primary.control.restore()
    stack.secondary.control.restore()
    got = receive_all(stack.primary, "orders", 30, timeout=60)
    assert sorted(m.message_id for m in got) == sorted(ids)
    wait_until(lambda: entity_status(stack, "orders")["outbox_depth"] == 0, 20, what="empty outbox")


def test_blackholed_active_namespace_costs_one_deadline_then_fails_over(make_stack: Any) -> None:
    stack = make_stack(
        {"orders": {"replication": "passive"}}, settings={"BRIDGE_RETRY__ATTEMPT_DEADLINE": "2"}
    )
    worker = stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        p.send("orders", b"warm")
        assert len(receive_all(stack.primary, "orders", 1)) == 1
        # When the primary accepts TCP and never answers
        stack.primary.control.blackhole()
        started = time.monotonic()
        ids = [p.send("orders", f"m{i}".encode()) for i in range(10)]
        got = receive_all(stack.secondary, "orders", 10, timeout=30)
        elapsed = time.monotonic() - started
    # Then the messages reach the secondary after about one deadline (2 s), not a hang
    assert sorted(m.message_id for m in got) == sorted(ids)
    assert elapsed < 2 + 8, f"failover took {elapsed:.1f}s"
    assert worker.running
    # And after the blackhole ends the worker keeps delivering (to the new active namespace)
    stack.primary.control.restore()
    with producer(stack) as p:
        later = p.send("orders", b"after")
    assert [m.message_id for m in receive_all(stack.secondary, "orders", 1)] == [later]


def _primary_error(stack: Any) -> str:
    return str(entity_status(stack, "orders")["namespaces"]["primary"]["last_error"] or "").lower()


def test_busy_is_retried_on_the_same_namespace_without_failover(make_stack: Any) -> None:
    # Escalation is switched off here, so only the error class decides: busy is transient.
    stack = make_stack(
        {"orders": {"replication": "passive"}},
        settings={
            "BRIDGE_RETRY__TRANSIENT_FAILURES_TO_OUTAGE": "1000",
            "BRIDGE_RETRY__TRANSIENT_SECONDS_TO_OUTAGE": "1000",
        },
    )
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a primary that answers "server busy"
        stack.primary.control.busy(probability=1.0)
        ids = [p.send("orders", f"m{i}".encode()) for i in range(5)]
        # (the first attempt may take a while on a loaded machine: the worker is still starting)
        wait_until(lambda: "busy" in _primary_error(stack), 60, interval=1, what="an attempt answered busy")
        time.sleep(3)  # several more retries, all answered busy
        # Then nothing failed over: the entries wait in the outbox and are retried
        assert count_in(stack.secondary, "orders") == 0
        status = entity_status(stack, "orders")
        assert status["active"] == "primary" and status["outbox_depth"] == 5
        assert "busy" in (status["namespaces"]["primary"]["last_error"] or "").lower()
        # When the primary stops throttling, the retries deliver there
        stack.primary.control.restore()
        assert sorted(m.message_id for m in receive_all(stack.primary, "orders", 5)) == sorted(ids)
    assert count_in(stack.secondary, "orders") == 0


def test_stall_is_retried_then_escalated_to_an_outage_and_fails_over(make_stack: Any) -> None:
    # Default escalation: three transient failures in a row count as an outage.
    stack = make_stack(
        {"orders": {"replication": "passive"}}, settings={"BRIDGE_RETRY__TRANSIENT_FAILURES_TO_OUTAGE": "3"}
    )
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a primary that accepts transfers and never settles them
        stack.primary.control.stall()
        ids = [p.send("orders", f"s{i}".encode()) for i in range(5)]
        # Then the send times out (transient), is retried, and after the third timeout fails over
        got = receive_all(stack.secondary, "orders", 5, timeout=40)
    assert sorted(m.message_id for m in got) == sorted(ids)
    status = entity_status(stack, "orders")
    assert status["active"] == "secondary"
    assert "timed out" in (status["namespaces"]["primary"]["last_error"] or "").lower()


def test_killed_worker_mid_batch_its_entries_are_reclaimed_and_delivered(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "none"}})
    # Given a primary that holds every transfer for 3 s, and a worker sending into it
    stack.primary.control.stall(delay=3.0)
    worker = stack.start_worker("doomed")
    stack.start_beat()
    with producer(stack) as p:
        ids = [p.send("orders", f"m{i}".encode()) for i in range(30)]
    wait_until(
        lambda: entity_status(stack, "orders")["outbox_depth"] == 30 and _pending(stack) > 0,
        20,
        what="a batch in flight",
    )
    # When the worker is killed in the middle of the batch
    worker.kill()
    stack.primary.control.restore()
    stack.start_worker("replacement")
    # Then every message is delivered; a duplicate, if any, carries the same MessageId
    got = receive_all(stack.primary, "orders", 30, timeout=60)
    assert set(m.message_id for m in got) == set(ids)
    wait_until(lambda: entity_status(stack, "orders")["outbox_depth"] == 0, 20, what="empty outbox")


def test_killed_worker_after_service_bus_accepted_and_before_the_ack_costs_a_duplicate_not_a_loss(
    make_stack: Any,
) -> None:
    # The SDK waits up to half the attempt deadline for a settlement: longer than the 2 s stall below.
    stack = make_stack({"orders": {"replication": "none"}}, settings={"BRIDGE_RETRY__ATTEMPT_DEADLINE": "10"})
    worker = stack.start_worker("doomed")
    client = redis.Redis.from_url(stack.redis.url)
    try:
        with producer(stack) as p:
            warm = p.send("orders", b"warm")  # the worker's client is connected before the stall
            assert [m.message_id for m in receive_all(stack.primary, "orders", 1)] == [warm]
            # Given a primary that stores transfers only after 2 s, and a batch the worker read and sends
            stack.primary.control.stall(delay=2.0)
            ids = p.send_batch("orders", [f"m{i}".encode() for i in range(30)])
        wait_until(lambda: _pending(stack) == 30, 20, what="the batch read by the worker")
        # When Redis stops taking writes right after the read (the worker's acknowledgement cannot land) ...
        client.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        # ... Service Bus accepts the batch ...
        wait_until(lambda: count_in(stack.primary, "orders") == 30, 20, what="the batch accepted")
        # ... and the worker is killed while its outbox entries are still unacknowledged
        assert client.xlen(outbox("orders", 0)) == 30 and _pending(stack) == 30
        worker.kill()
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
        client.close()
    stack.primary.control.restore()
    stack.start_worker("replacement")
    # Then the next lease holder sends the batch again: every message twice, with the same MessageId
    got = receive_all(stack.primary, "orders", 60, timeout=60)
    assert Counter(m.message_id for m in got) == dict.fromkeys(ids, 2)
    wait_until(lambda: entity_status(stack, "orders")["outbox_depth"] == 0, 20, what="empty outbox")


def _pending(stack: Any) -> int:
    import redis

    from bridge.outbox import keys

    client = redis.Redis.from_url(stack.redis.url)
    try:
        total = 0
        for shard in range(8):
            try:
                total += int(client.xpending(keys.outbox("orders", shard), keys.SENDERS_GROUP)["pending"])
            except redis.ResponseError:
                continue
        return total
    finally:
        client.close()
