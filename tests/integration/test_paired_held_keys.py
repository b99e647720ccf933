"""Held keys in paired mode never let another key's newer messages pass its older ones.

Real parts: the stack's Redis and local namespaces, a drain service in this process (no worker, no beat,
so no ping or syphon changes the paired state behind the test), the primary's fault control.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bridge.core.paired import MarkAvailable
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import READ_COUNT
from bridge.delivery.service import DrainService
from bridge.embedded.stack import LocalStack, wait_until
from bridge.servicebus.admin import NamespaceAdmin
from bridge.settings import Settings
from bridge.state.paired import PairedStore
from bridge.state.retry import RetryStore
from tests.integration.paired_support import (
    BACKLOG_LOCK,
    backlog_paths,
    create_backlog_queues,
    create_entities,
    mark_failed_over,
    namespace_settings,
    paired_state,
)
from tests.integration.worker_support import count_in, make_stack, outbox_depth, producer, receive_all

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(180)

HELD = READ_COUNT + 50
"""More held entries than one claim reads: the older entries of another key lie beyond the first claim."""


def _settings(stack: LocalStack, backlog_queues: int = 2) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": stack.redis.url,
            "primary": namespace_settings(stack.primary),
            "secondary": namespace_settings(stack.secondary),
            "entities": stack.entities,
            "retry": {
                "attempt_deadline": 3,
                "retry_total": 0,
                "outbox_backoff_factor": 0.5,
                "outbox_backoff_max": 1,
            },
            # A held key waits a minute (one ping interval); the failover never engages by itself.
            "paired": {
                "backlog_queue_count": backlog_queues,
                "failover_interval": 3600,
                "ping_primary_interval": 60,
                "enable_syphon": False,
            },
            "workers": {"lease_ttl": 5},
        }
    )


@pytest.fixture
def service(make_stack: Any) -> Iterator[tuple[LocalStack, DeliveryContext]]:
    stack = make_stack({"orders": {"replication": "paired", "outbox_shards": 1}})
    create_entities(stack.primary, queues=["orders"])
    create_backlog_queues(stack, count=2)
    ctx = DeliveryContext.build(_settings(stack))
    try:
        yield stack, ctx
    finally:
        ctx.close()


def _attempts(stack: LocalStack) -> int:
    client = redis.Redis.from_url(stack.redis.url)
    try:
        return RetryStore(client).attempts("orders", 0)
    finally:
        client.close()


def test_a_retried_key_is_claimed_again_before_its_newer_messages_behind_many_held_entries(
    service: tuple[LocalStack, DeliveryContext],
) -> None:
    stack, ctx = service
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        with producer(stack) as p:
            # Given failover engaged and more held entries of key "held" than one claim reads: none of them
            # can be aliased (they carry x-ms-path), so the key waits for the primary a whole ping interval
            mark_failed_over(stack, "orders")
            unaliasable = {"partition_key": "held", "application_properties": {"x-ms-path": "elsewhere"}}
            messages = [{"body": f"held#{i}", **unaliasable} for i in range(HELD)]
            held = [m for i in range(0, HELD, 1000) for m in p.send_batch("orders", messages[i : i + 1000])]
            wait_until(lambda: paired_state(stack, "orders").failed_over, 10, what="failover engaged")
            time.sleep(1.0)  # the drainer has read them all and holds the key
            # And the primary is back (what the ping would record) but busy for a while
            client = redis.Redis.from_url(stack.redis.url)
            try:
                PairedStore(client).apply("orders", [MarkAvailable(time.time(), "test: primary back")])
            finally:
                client.close()
            stack.primary.control.busy(entity="orders")
            # When key "k"'s first messages are refused (server busy) and stay pending for a retry
            first = p.send_batch("orders", [{"body": f"k#{i}", "partition_key": "k"} for i in range(5)])
            wait_until(lambda: _attempts(stack) > 0, 20, what="k's first batch retried")
            # And the primary accepts again, and k's next messages are written
            stack.primary.control.restore(entity="orders")
            later = p.send_batch("orders", [{"body": f"k#{i}", "partition_key": "k"} for i in range(5, 10)])
            # Then k's ten messages reach the primary in the order they were written; the primary seen back
            # (k's send accepted after the refusals) makes the held key due at once, long before its hold
            # (a ping interval) ends, so its messages follow, in their order too
            got = receive_all(stack.primary, "orders", 10 + HELD, timeout=30)
    finally:
        drains.stop()
    order = [m.message_id for m in got]
    keys = {m.message_id: m.partition_key for m in got}
    assert [i for i in order if keys[i] == "k"] == first + later, [str(m)[:20] for m in got]
    assert [i for i in order if keys[i] == "held"] == held
    assert len(order) == 10 + HELD  # each once
    # And all were acknowledged, none through a backlog queue (the held key cannot be aliased)
    assert outbox_depth(stack, "orders") == 0
    assert [count_in(stack.secondary, path) for path in backlog_paths(stack, count=2)] == [0, 0]


def test_a_message_a_backlog_queue_refuses_for_good_holds_back_the_later_messages_of_its_key(
    make_stack: Any,
) -> None:
    stack = make_stack({"orders": {"replication": "paired", "outbox_shards": 1}})
    create_entities(stack.primary, queues=["orders"])
    # A backlog queue that takes messages of at most 64 KB: a 100 KB message is refused there for good
    # (it waits in the outbox for the primary, which takes it)
    (path,) = backlog_paths(stack, count=1)
    with NamespaceAdmin(namespace_settings(stack.secondary)) as admin:
        admin.create_queue(path, lock_duration=BACKLOG_LOCK, max_message_size_in_kilobytes=64)
    ctx = DeliveryContext.build(_settings(stack, backlog_queues=1))
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        with producer(stack) as p:
            # Given failover engaged
            mark_failed_over(stack, "orders")
            wait_until(lambda: paired_state(stack, "orders").failed_over, 10, what="failover engaged")
            # When one send carries a key's message the backlog queue refuses, later messages of the same key,
            # and another key's message
            batch = [
                {"body": "k#0", "partition_key": "k"},
                {"body": b"k#1" + b"x" * 100_000, "partition_key": "k"},
                {"body": "k#2", "partition_key": "k"},
                {"body": "k#3", "partition_key": "k"},
                {"body": "n#0", "partition_key": "n"},
            ]
            ids = p.send_batch("orders", batch)
            got = receive_all(stack.secondary, path, 2, timeout=20)
            # Then only k#0 and the other key's message reach the backlog queue: k#2 and k#3 are never sent
            # past k#1, which waits for the primary; all three stay in the outbox
            assert sorted(m.message_id for m in got) == sorted([ids[0], ids[4]]), [str(m)[:20] for m in got]
            assert outbox_depth(stack, "orders") == 3
    finally:
        drains.stop()
        ctx.close()
