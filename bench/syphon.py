"""Syphon throughput against a raw SDK receive-and-send loop, and the time from a primary's restore to an
empty backlog, measured in the same run.

    python -m bench.syphon [--messages 3000] [--restore-messages 10000] [--batch 100]

Starts a private Redis and two local namespaces (each its own process), then:

1. baseline: the plain azure-servicebus SDK moves ``--messages`` messages from a queue of the secondary
   to a queue of the primary: PEEK_LOCK ``receive_messages(100)``, one ``send_messages`` of the batch,
   ``complete_message`` each (msgs/s);
2. syphon: the same number of aliased messages in one backlog queue, moved by ``run_syphon`` (the beat
   task's body, in this process: leases, restore, batched send, settle, cost counters) (msgs/s);
3. restore: ``--restore-messages`` spread over 10 backlog queues, the entity failed over, the primary
   down; a real ``bridge worker`` and ``bridge beat`` (ping every 1 s); the primary comes back and the
   clock runs until every backlog queue is empty (ping detection + syphon), reported in seconds and
   msgs/s.

Prints 2/1 (target >= 0.7) and the restore time.

4. restore order (``--order-messages``, 0 skips it): what ``paired.restore_order = "ordered"`` costs after
   a restore, against ``"fast"`` measured the same way in the same run. For each setting a fresh stack, a
   real ``bridge worker`` and ``bridge beat``: the primary goes down, ``--order-messages`` messages of 20
   keys go to three backlog queues through the real send path, the primary comes back, and as soon as the
   ping has marked the entity available again 200 new messages are produced. Reported: how long the new
   messages took to reach the primary (median and maximum, from their write to their enqueue time on the
   primary) and when the backlog was empty. In ordered mode the new messages wait until the syphon has
   moved what went to the backlog before them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.core.envelope import Envelope
from bridge.core.paired import EngageFailover, StartTimer, backlog_queue_paths
from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.paired.syphon_run import run_syphon
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import BacklogMessage, to_backlog_message
from bridge.servicebus.pool import NamespacePool
from bridge.settings import NamespaceSettings, Settings

BODY = b"x" * 512
PROPERTIES: dict[str, str | int] = {"tenant": "t-1", "n": 1}


def namespace(ns: object) -> dict[str, str]:
    return {
        "connection_string": ns.connection_string,  # type: ignore[attr-defined]
        "management_endpoint": ns.management_endpoint,  # type: ignore[attr-defined]
        "certificate": ns.certificate,  # type: ignore[attr-defined]
    }


def settings_for(stack: LocalStack, batch: int, queues: int) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": stack.redis.url,
            "primary": namespace(stack.primary),
            "secondary": namespace(stack.secondary),
            "entities": {"orders": {"replication": "paired"}},
            "paired": {
                "backlog_queue_count": queues,
                "syphon_batch_size": batch,
                "syphon_receive_wait": 1,
                "syphon_run_budget": 600,
                "syphon_lease_ttl": 30,
            },
        }
    )


def create_queues(ns_settings: NamespaceSettings, names: list[str]) -> None:
    with NamespaceAdmin(ns_settings) as admin:
        for name in names:
            if admin.get_queue(name) is None:
                admin.create_queue(name)


def fill(pool: NamespacePool, queue: str, count: int, aliased: bool, offset: int = 0) -> None:
    messages = []
    for i in range(count):
        envelope = Envelope(
            entity="orders",
            message_id=f"m-{offset + i}",
            body=BODY,
            accepted_at=time.time(),
            application_properties=dict(PROPERTIES),
            time_to_live=3600.0,
        )
        if aliased:
            backlog = to_backlog_message(envelope)
            assert isinstance(backlog, BacklogMessage)
            messages.append(backlog.message)
        else:
            messages.append(
                ServiceBusMessage(
                    BODY,
                    message_id=envelope.message_id,
                    application_properties=dict(PROPERTIES),
                    time_to_live=timedelta(hours=1),
                )
            )
    for start in range(0, count, 500):
        result = pool.send("secondary", queue, messages[start : start + 500])
        assert result.ok, result.failed


WARM_UP = 100
"""Messages moved before the clock starts, by both contenders: links attached, clients authenticated."""


def raw_loop(stack: LocalStack, count: int, batch: int) -> float:
    """The baseline: plain SDK receive, batch send, complete each."""
    with (
        ServiceBusClient.from_connection_string(stack.secondary.connection_string) as source,
        ServiceBusClient.from_connection_string(stack.primary.connection_string) as target,
        source.get_queue_receiver("raw-src") as receiver,
        target.get_queue_sender("raw-dst") as sender,
    ):

        def move() -> int:
            received = receiver.receive_messages(max_message_count=batch, max_wait_time=1)
            if received:
                sender.send_messages(
                    [
                        ServiceBusMessage(
                            b"".join(m.body),
                            message_id=m.message_id,
                            application_properties=m.application_properties,
                            time_to_live=m.time_to_live,
                        )
                        for m in received
                    ]
                )
            for message in received:
                receiver.complete_message(message)
            return len(received)

        warmed = 0
        while warmed < WARM_UP:
            warmed += move()
        moved = warmed - WARM_UP
        started = time.perf_counter()
        while moved < count:
            moved += move()
        return moved / (time.perf_counter() - started)


def syphon_loop(stack: LocalStack, queue: str, count: int, batch: int) -> float:
    """The syphon: ``run_syphon`` until the backlog queue is empty (after a warm-up batch)."""
    ctx = DeliveryContext.build(settings_for(stack, batch, queues=1))
    try:
        warmed = 0
        while warmed < WARM_UP:
            warmed += sum(q.sent for q in run_syphon(ctx, budget=0.5).queues)
        fill(ctx.pool, queue, count, aliased=True, offset=WARM_UP)
        return syphon_rate(ctx, count)
    finally:
        ctx.close()


def syphon_rate(ctx: DeliveryContext, count: int) -> float:
    """Syphon at least ``count`` messages with back-to-back 2 s runs; msgs/s up to the last move."""
    moved, started = 0, ctx.clock()
    finished = started
    while moved < count:
        # A run keeps long-polling its queue until its budget ends; the rate counts up to the last move.
        report = run_syphon(ctx, budget=2.0)
        moved += sum(q.sent for q in report.queues)
        finished = max([finished, *(q.last_moved_at or 0.0 for q in report.queues)])
    return moved / (finished - started)


def active_messages(admin: NamespaceAdmin, queues: tuple[str, ...]) -> int:
    return sum(admin.queue_runtime_properties(q).active_message_count for q in queues)


def restore_time(stack: LocalStack, count: int, batch: int) -> float:
    """Seconds from the primary's restore until ten backlog queues holding ``count`` messages are empty."""
    settings = settings_for(stack, batch, queues=10)
    assert settings.primary is not None and settings.secondary is not None
    queues = backlog_queue_paths(settings.primary.namespace_name, 10)
    create_queues(settings.secondary, list(queues))
    ctx = DeliveryContext.build(settings)
    try:
        for index, queue in enumerate(queues):
            fill(ctx.pool, queue, count // 10, aliased=True, offset=index * count)
        now = time.time()
        ctx.paired.apply("orders", [StartTimer(now), EngageFailover(now, "bench: primary down")])
    finally:
        ctx.close()
    stack.primary.control.outage()
    env = {
        "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "10",
        "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
        "BRIDGE_PAIRED__SYPHON_BATCH_SIZE": str(batch),
        "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
        "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "30",
        "BRIDGE_PAIRED__SYPHON_RETRY_INTERVAL": "1",
    }
    stack.start_worker("bench-worker", concurrency=2, **env)
    stack.start_beat("bench-beat", **env)
    time.sleep(3)  # the worker and beat are up, pinging a primary that is down
    with NamespaceAdmin(settings.secondary) as admin:
        assert active_messages(admin, queues) == count
        stack.primary.control.restore()
        started = time.perf_counter()
        while active_messages(admin, queues) > 0:
            time.sleep(0.2)
        return time.perf_counter() - started


def _order_env(order: str) -> dict[str, str]:
    return {
        "BRIDGE_PAIRED__RESTORE_ORDER": order,
        "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "3",
        "BRIDGE_PAIRED__FAILOVER_INTERVAL": "0",
        "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
        "BRIDGE_PAIRED__SYPHON_RETRY_INTERVAL": "0.5",
        "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
        "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "10",
        "BRIDGE_RETRY__RETRY_TOTAL": "0",
        "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
        "BRIDGE_RETRY__OUTBOX_BACKOFF_MAX": "1",
        "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
    }


def restore_order_delay(base: Path, order: str, backlog: int) -> tuple[float, float, float]:
    """(median, max) seconds new messages took after a restore, and seconds until the backlog was empty."""
    from bridge.producer import Producer
    from bridge.state.cost import CostStore

    stack = LocalStack(
        base / order, entities={"orders": {"replication": "paired"}}, settings=_order_env(order)
    )
    stack.start()
    try:
        settings = settings_for(stack, 100, queues=3)
        assert settings.primary is not None and settings.secondary is not None
        queues = backlog_queue_paths(settings.primary.namespace_name, 3)
        create_queues(settings.secondary, list(queues))
        create_queues(settings.primary, ["orders"])
        stack.start_worker("bench-worker", concurrency=2)
        stack.start_beat("bench-beat")
        ctx = DeliveryContext.build(settings)
        try:
            stack.primary.control.outage()
            with Producer(
                settings=Settings(redis_url=stack.redis.url, entities={"orders": {"replication": "paired"}})
            ) as p:
                for start in range(0, backlog, 500):
                    count = min(500, backlog - start)
                    chunk = [{"body": BODY, "partition_key": f"k{(start + i) % 20}"} for i in range(count)]
                    p.send_batch("orders", chunk)
                while CostStore(ctx.redis).get("orders").backlog_sends < backlog:
                    time.sleep(0.2)
                stack.primary.control.restore()
                restored = time.time()
                while ctx.paired.get("orders").failed_over:  # the ping found the primary back
                    time.sleep(0.05)
                fresh_at: dict[str, float] = {}
                for i in range(200):
                    fresh_at[p.send("orders", BODY, partition_key=f"k{i % 20}")] = time.time()
            waits: list[float] = []
            emptied = 0.0
            deadline = time.time() + 300
            with (
                ServiceBusClient.from_connection_string(stack.primary.connection_string) as client,
                client.get_queue_receiver("orders", receive_mode="receiveanddelete") as receiver,
            ):
                while len(waits) < len(fresh_at) and time.time() < deadline:
                    for message in receiver.receive_messages(max_message_count=500, max_wait_time=1):
                        sent = fresh_at.get(str(message.message_id))
                        if sent is not None and message.enqueued_time_utc is not None:
                            waits.append(message.enqueued_time_utc.timestamp() - sent)
            with NamespaceAdmin(settings.secondary) as admin:
                while active_messages(admin, queues) > 0 and time.time() < deadline:
                    time.sleep(0.2)
                emptied = time.time() - restored
        finally:
            ctx.close()
        waits.sort()
        return waits[len(waits) // 2], waits[-1], emptied
    finally:
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--restore-messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--order-messages", type=int, default=3000)
    args = parser.parse_args()
    if args.order_messages:
        with tempfile.TemporaryDirectory(prefix="bench-order-") as tmp:
            results = {
                order: restore_order_delay(Path(tmp), order, args.order_messages)
                for order in ("fast", "ordered")
            }
        for order, (median, worst, emptied) in results.items():
            print(
                f"restore_order={order:7}: new messages after a restore took {median:6.2f} s median, "
                f"{worst:6.2f} s max; backlog of {args.order_messages} empty after {emptied:5.1f} s"
            )
        extra = results["ordered"][0] - results["fast"][0]
        print(
            f"extra median delay of ordered restore  : {extra:6.2f} s "
            f"(ratio {results['ordered'][0] / max(results['fast'][0], 1e-3):.1f} x fast)"
        )
    with tempfile.TemporaryDirectory(prefix="bench-syphon-") as tmp:
        stack = LocalStack(Path(tmp), entities={"orders": {"replication": "paired"}}).start()
        try:
            settings = settings_for(stack, args.batch, queues=1)
            assert settings.primary is not None and settings.secondary is not None
            (backlog,) = backlog_queue_paths(settings.primary.namespace_name, 1)
            create_queues(settings.secondary, ["raw-src", backlog])
            create_queues(settings.primary, ["raw-dst", "orders"])
            pool = NamespacePool(settings)
            try:
                fill(pool, "raw-src", args.messages + WARM_UP, aliased=False)
                fill(pool, backlog, WARM_UP, aliased=True)
            finally:
                pool.close()
            raw = raw_loop(stack, args.messages, args.batch)
            syphon = syphon_loop(stack, backlog, args.messages, args.batch)
            print(f"raw SDK receive/send/complete loop : {raw:8.0f} msgs/s")
            print(f"syphon (run_syphon, one queue)     : {syphon:8.0f} msgs/s")
            print(f"ratio syphon / raw                 : {syphon / raw:8.2f}   (target >= 0.7)")
            seconds = restore_time(stack, args.restore_messages, args.batch)
            rate = args.restore_messages / seconds
            print(
                f"restore -> 10 backlog queues empty : {seconds:8.1f} s for {args.restore_messages} "
                f"messages ({rate:.0f} msgs/s incl. ping detection, 1 s ping interval)"
            )
            print(f"ratio restore rate / raw           : {args.restore_messages / seconds / raw:8.2f}")
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
