"""Send workers end to end: Redis outbox → Celery worker processes → local Service Bus namespaces.

Every part is a real process (redis-server, two ``bridge emulator``, ``bridge worker``, ``bridge beat``);
messages are read back with the plain SDK.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from bridge.embedded.stack import wait_until
from tests.integration.worker_support import (
    count_in,
    entity_status,
    make_stack,
    producer,
    receive_all,
)

__all__ = ["make_stack"]


def test_healthy_delivery_keeps_properties_and_order_per_key(make_stack: Any) -> None:
    # Given two entities, one with sessions, and a running worker and beat
    stack = make_stack({"orders": {"outbox_shards": 4}, "carts": {"requires_session": True}})
    # (queues are auto-created on first use; a session queue must be declared)
    _create_queue(stack.primary, "carts", requires_session=True)
    stack.start_worker()
    stack.start_beat()
    due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=6)
    # When messages with every property, across partition keys and sessions, are produced
    with producer(stack) as p:
        for i in range(60):
            p.send(
                "orders",
                f"o{i}".encode(),
                partition_key=f"pk{i % 3}",
                correlation_id=f"c{i}",
                subject="subj",
                content_type="text/plain",
                reply_to="r",
                to="t",
                time_to_live=3600,
                application_properties={"i": i, "f": 1.5, "flag": True, "s": "x"},
            )
        for i in range(30):
            p.send("carts", f"s{i}".encode(), session_id=f"sess{i % 2}")
        p.send("orders", b"later", scheduled_enqueue_time_utc=due)
    # Then each arrives once, with its properties, in order per key (the scheduled one too, once it is due:
    # on a loaded machine the 60 may take longer than its 6 s, so it is received with them)
    received = receive_all(stack.primary, "orders", 61, timeout=60)
    orders = [m for m in received if str(m) != "later"]
    later = [m for m in received if str(m) == "later"]
    assert len(orders) == 60
    assert len({m.message_id for m in orders}) == 60
    by_key: dict[str, list[int]] = defaultdict(list)
    for m in orders:
        i = m.application_properties[b"i"]
        assert str(m) == f"o{i}"
        assert m.partition_key == f"pk{i % 3}"
        assert m.correlation_id == f"c{i}"
        assert (m.subject, m.content_type, m.reply_to, m.to) == ("subj", "text/plain", "r", "t")
        # what is left of the TTL, counted from acceptance (docs/durability.md#time-to-live)
        assert dt.timedelta(seconds=3540) < m.time_to_live <= dt.timedelta(seconds=3600)
        assert m.application_properties[b"f"] == 1.5 and m.application_properties[b"flag"] is True
        by_key[m.partition_key].append(i)
    for key, seen in by_key.items():
        assert seen == sorted(seen), f"order broken for {key}: {seen}"
    for session in ("sess0", "sess1"):
        got = receive_all(stack.primary, "carts", 15, session_id=session)
        numbers = [int(str(m)[1:]) for m in got]
        assert len(numbers) == 15 and numbers == sorted(numbers)
    assert [str(m) for m in later] == ["later"]
    assert abs(later[0].scheduled_enqueue_time_utc - due) < dt.timedelta(milliseconds=2)
    assert later[0].enqueued_time_utc >= due - dt.timedelta(milliseconds=2)  # not visible before it was due
    assert count_in(stack.secondary, "orders") == 0


def test_message_too_large_for_the_entity_is_dead_lettered_locally(make_stack: Any) -> None:
    # Given a queue limited to 8 KB on both namespaces (the bridge's own limit is larger)
    stack = make_stack({"small": {"max_message_size": 64 * 1024}})
    for ns in (stack.primary, stack.secondary):
        _create_queue(ns, "small", max_message_size_in_kilobytes=8)
    stack.start_worker()
    stack.start_beat()
    # When one oversized message is produced between good ones
    with producer(stack) as p:
        p.send("small", b"a")
        big_id = p.send("small", b"x" * 20_000)
        p.send("small", b"b")
    # Then the good ones arrive, the big one lands in the local dead-letter stream with a reason
    got = receive_all(stack.primary, "small", 2)
    assert sorted(str(m) for m in got) == ["a", "b"]
    status = wait_until(
        lambda: (s := entity_status(stack, "small"))["dead_letter_depth"] == 1 and s,
        20,
        what="dead-letter depth 1",
    )
    assert status["outbox_depth"] == 0
    dead = stack_deadletters(stack, "small")
    assert len(dead) == 1 and dead[0]["original"]["id"] == big_id
    assert "message_permanent" in dead[0]["reason"] or "size" in dead[0]["reason"].lower()
    assert count_in(stack.secondary, "small") == 0


def test_active_replication_sends_every_message_to_both_with_the_same_id(make_stack: Any) -> None:
    # Both copies come from one packing of each batch: they must be the same message in both namespaces.
    stack = make_stack({"mirror": {"replication": "active"}})
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        ids = [
            p.send(
                "mirror",
                f"m{i}".encode(),
                partition_key=f"pk{i % 3}",
                subject="subj",
                content_type="text/plain",
                time_to_live=3600,
                application_properties={"i": i, "f": 1.5, "flag": True},
            )
            for i in range(40)
        ]
    primary = receive_all(stack.primary, "mirror", 40)
    secondary = receive_all(stack.secondary, "mirror", 40)
    assert sorted(m.message_id for m in primary) == sorted(ids)
    assert sorted(m.message_id for m in secondary) == sorted(ids)

    def seen(messages: list[Any]) -> dict[str, tuple[Any, ...]]:
        return {
            m.message_id: (
                str(m), m.partition_key, m.subject, m.content_type, m.time_to_live,
                dict(m.application_properties),
            )
            for m in messages
        }  # fmt: skip

    assert seen(primary) == seen(secondary)
    for copies in (primary, secondary):  # in order per partition key in each namespace
        by_key: dict[str, list[int]] = defaultdict(list)
        for m in copies:
            by_key[str(m.partition_key)].append(int(m.application_properties[b"i"]))
        assert all(order == sorted(order) for order in by_key.values()) and len(by_key) == 3


def stack_deadletters(stack: Any, entity: str) -> list[dict[str, Any]]:
    """The local dead-letter stream, read with the outbox reader's listing."""
    import redis

    from bridge.outbox.problems import list_problems

    client = redis.Redis.from_url(stack.redis.url)
    try:
        return list_problems(client, entity, "deadletter", count=100)
    finally:
        client.close()


def _create_queue(ns: Any, name: str, **options: Any) -> None:
    from azure.servicebus.management import ServiceBusAdministrationClient

    with ServiceBusAdministrationClient.from_connection_string(
        ns.connection_string, connection_verify=ns.certificate
    ) as admin:
        admin.create_queue(name, **options)
