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
from bridge.outbox import keys as outbox_keys
from bridge.servicebus.admin import NamespaceAdmin
from bridge.settings import Settings
from bridge.state.paired import PairedStore
from bridge.state.resume import ResumeSignals
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
            # No scout and no door watch: nothing but the news and the hold's own time decides a held key
            # again (the scout's early try of a backing-off shard would hide what these tests look at).
            "retry": {
                "attempt_deadline": 3,
                "retry_total": 0,
                "outbox_backoff_factor": 0.5,
                "outbox_backoff_max": 1,
                "outbox_scout_interval": None,
                "outbox_door_watch": None,
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


def _pending(stack: LocalStack) -> int:
    client = redis.Redis.from_url(stack.redis.url)
    try:
        return int(client.xpending(outbox_keys.outbox("orders", 0), outbox_keys.SENDERS_GROUP)["pending"])
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
            wait_until(lambda: _pending(stack) == HELD, 20, what="the held entries read")
            wait_until(lambda: drains.pool.idle_since(("orders", 0)) is not None, 20, what="the key held")
            # And the primary is back (what the ping records, not announced yet) but busy for a while
            client = redis.Redis.from_url(stack.redis.url)
            try:
                PairedStore(client).apply("orders", [MarkAvailable(time.time(), "test: primary back")])
                stack.primary.control.busy(entity="orders")
                keyed = [{"body": f"k#{i}", "partition_key": "k"} for i in range(10)]
                # When key "k"'s first messages are refused (server busy) and stay pending for a retry
                first = p.send_batch("orders", keyed[:5])
                wait_until(lambda: _attempts(stack) > 0, 20, what="k's first batch retried")
                # And the primary accepts again, and k's next messages are written
                stack.primary.control.restore(entity="orders")
                later = p.send_batch("orders", keyed[5:])
                # Then k's ten messages reach the primary in the order they were written, while the held
                # key still waits: its older entries were claimed past the held ones, not left behind them
                got = receive_all(stack.primary, "orders", 10, timeout=30)
                # And when the ping's news comes, the held key is decided again at once, long before its
                # hold (a ping interval) ends, and its messages follow, in their order too
                ResumeSignals(client).seen_back("primary", "orders", "test: a ping was accepted")
                got += receive_all(stack.primary, "orders", HELD, timeout=30)
            finally:
                client.close()
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


NEWS_HELD = 200
"""Held entries per entity in the news test (each claim of them shows in every entry's delivery count)."""


def _deliveries(client: redis.Redis, entity: str) -> list[int]:
    """How many times each pending entry of the entity's shard was read or claimed (``XPENDING``)."""
    pending = client.xpending_range(
        outbox_keys.outbox(entity, 0), outbox_keys.SENDERS_GROUP, "-", "+", 10_000
    )
    return sorted({int(p["times_delivered"]) for p in pending}) if len(pending) == NEWS_HELD else [0]


def test_news_of_a_namespace_back_claims_only_the_held_entries_that_wait_for_it(make_stack: Any) -> None:
    stack = make_stack({name: {"replication": "paired", "outbox_shards": 1} for name in ("orders", "other")})
    create_entities(stack.primary, queues=["orders", "other"])
    create_backlog_queues(stack, count=2)
    ctx = DeliveryContext.build(_settings(stack))
    client = redis.Redis.from_url(stack.redis.url)
    news = ResumeSignals(client)
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        # Given two failed-over entities, each with a key whose entries wait for the primary (they cannot
        # be aliased), read once and held
        unaliasable = {"partition_key": "held", "application_properties": {"x-ms-path": "elsewhere"}}
        with producer(stack) as p:
            for entity in ("orders", "other"):
                mark_failed_over(stack, entity)
                p.send_batch(entity, [{"body": f"{entity}#{i}", **unaliasable} for i in range(NEWS_HELD)])
        for entity in ("orders", "other"):
            wait_until(lambda e=entity: _deliveries(client, e) == [1], 20, what=f"{entity}'s entries read")
            wait_until(lambda e=entity: drains.pool.idle_since((e, 0)) is not None, 20, what=f"{entity} held")
        # When the primary is seen back for the other entity five times, and the secondary for this one
        for n in range(2, 7):
            news.seen_back("secondary", "orders", "test: a backlog send was accepted")
            news.seen_back("primary", "other", "test: a ping was accepted")
            # Then each news about the other entity decides its held key again: its entries claimed once
            wait_until(lambda n=n: max(_deliveries(client, "other")) >= n, 20, what=f"other's claim {n - 1}")
            assert _deliveries(client, "other") == [n]
            # ... and none of it claims this entity's entries, which wait for its own primary only
            assert _deliveries(client, "orders") == [1]
        # When its own primary is seen back, its entries are claimed once (still failed over: held again)
        news.seen_back("primary", "orders", "test: a ping was accepted")
        wait_until(lambda: max(_deliveries(client, "orders")) >= 2, 20, what="orders claimed")
        assert (_deliveries(client, "orders"), _deliveries(client, "other")) == ([2], [6])
    finally:
        drains.stop()
        client.close()
        ctx.close()
