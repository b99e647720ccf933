"""The failover gap of ``bench.workers`` (its step 4): a steady producer, then an outage or a blackhole of
the primary; how long until the secondary accepted the first message, and how many had to wait for it."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from bench.queue_counts import queue_counter, wait_count

FAILOVER_ENTITY = "bench-failover"
BODY = b"x" * 1024


def failover_gap(
    stack: Any,
    producer: Any,
    rate: float,
    before: float,
    after: float,
    fault: str = "outage",
    body: bytes = BODY,
) -> dict[str, float]:
    """Steady produce, ``fault`` (outage or blackhole) of the primary, then: gap to the secondary's first
    accept, delayed messages."""
    # The worker must be delivering to the primary before the fault (on a loaded machine it can still be
    # starting): a few messages through, then out of the way.
    producer.send_batch(FAILOVER_ENTITY, [b"warm"] * 10)
    wait_count(queue_counter(stack.primary), FAILOVER_ENTITY, 10, 120)
    _receive_all(stack.primary.connection_string, FAILOVER_ENTITY, 5)
    stop = threading.Event()
    produced = [0]

    def produce() -> None:
        step = 10 / rate  # 10 messages per call
        next_at = time.monotonic()
        while not stop.is_set():
            now = time.time()
            producer.send_batch(
                FAILOVER_ENTITY, [{"body": body, "application_properties": {"t": now}} for _ in range(10)]
            )
            produced[0] += 10
            next_at += step
            time.sleep(max(0.0, next_at - time.monotonic()))

    thread = threading.Thread(target=produce)
    thread.start()
    time.sleep(before)
    outage_at = time.time()
    getattr(stack.primary.control, fault)()
    applied_at = time.time()  # the namespace switched the fault on before it answered
    time.sleep(after)
    stop.set()
    thread.join()
    noticed = _unavailable_since(stack, FAILOVER_ENTITY)
    _wait_outbox_empty(stack, FAILOVER_ENTITY, 120)  # a worker that lags is not cut off mid-backlog
    secondary = _receive_all(stack.secondary.connection_string, FAILOVER_ENTITY, 30)
    stack.primary.control.restore()
    primary = _receive_all(stack.primary.connection_string, FAILOVER_ENTITY, 10)

    def latency(m: Any) -> float:
        return float(m.enqueued_time_utc.timestamp() - float(m.application_properties[b"t"]))

    first = min(m.enqueued_time_utc.timestamp() for m in secondary) if secondary else float("nan")
    healthy = [latency(m) for m in primary if float(m.application_properties[b"t"]) < outage_at - 0.5]
    waited = [m for m in secondary if float(m.application_properties[b"t"]) < first]
    return {
        "gap": first - outage_at,
        "gap_applied": first - applied_at,
        "control": applied_at - outage_at,
        "noticed": noticed - applied_at,
        "delayed": len(waited),
        "max_delay": max((latency(m) for m in waited), default=0.0),
        "healthy_p50": statistics.median(healthy) if healthy else float("nan"),
        "produced": produced[0],
        "received": len(primary) + len(secondary),
        "unique": len({m.message_id for m in primary} | {m.message_id for m in secondary}),
    }


DEADLINE = 10.0
"""``retry.attempt_deadline``'s default: what a blackholed primary costs the first send."""


def failovers(stack: Any, producer: Any, args: Any) -> dict[str, dict[str, float]]:
    """The failover gap of each fault asked for; the entity's roles are put back between them."""
    import redis

    from bridge.state import keys

    faults = ["outage", "blackhole"] if args.failover_fault == "both" else [args.failover_fault]
    out: dict[str, dict[str, float]] = {}
    for fault in faults:
        after = 6.0 if fault == "outage" else DEADLINE + 6.0
        out[fault] = failover_gap(stack, producer, args.failover_rate, 5.0, after, fault)
        client = redis.Redis.from_url(stack.redis.url)
        client.delete(keys.role(FAILOVER_ENTITY))  # the primary is active again for the next fault
        client.close()
    return out


def _unavailable_since(stack: Any, entity: str) -> float:
    """When the workers recorded the primary unavailable for ``entity`` (its health record's ``since``:
    written right after the failed send returned), NaN when they did not."""
    import redis

    from bridge.core.roles import NamespaceHealth
    from bridge.state import keys

    client = redis.Redis.from_url(stack.redis.url)
    try:
        health = NamespaceHealth.from_fields(client.hgetall(keys.health(entity, "primary")))
    finally:
        client.close()
    return float("nan") if health.available or health.since is None else health.since


def _wait_outbox_empty(stack: Any, entity: str, timeout: float) -> None:
    """Wait until every outbox shard of ``entity`` is empty (an entry is deleted once a namespace took it)."""
    import redis

    from bridge.outbox import keys

    client = redis.Redis.from_url(stack.redis.url)
    shards = int(stack.entities[entity].get("outbox_shards", 1))
    deadline = time.monotonic() + timeout
    try:
        while (
            sum(int(client.xlen(keys.outbox(entity, s))) for s in range(shards))
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
    finally:
        client.close()


def _receive_all(conn: str, queue: str, quiet: float) -> list[Any]:
    """Receive-and-delete everything in ``queue``: until a receive comes back empty, at most ``quiet`` s."""
    got: list[Any] = []
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with (
        ServiceBusClient.from_connection_string(conn, retry_total=1) as client,
        client.get_queue_receiver(queue, receive_mode=mode) as receiver,
    ):
        deadline = time.monotonic() + quiet
        while time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=250, max_wait_time=1)
            if not batch and got:
                break
            got.extend(batch)
    return got
