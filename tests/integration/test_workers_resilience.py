"""What could drop a message on the bridge's own side: a poison outbox entry, a Redis crash under the
workers, a Redis-door entry that fails validation. None may."""

from __future__ import annotations

import time
from typing import Any

import redis

from bridge.embedded.stack import wait_until
from bridge.outbox import keys
from tests.integration.worker_support import entity_status, make_stack, producer, receive_all

__all__ = ["make_stack"]


def test_a_corrupt_outbox_entry_is_quarantined_and_does_not_block_its_shard(make_stack: Any) -> None:
    stack = make_stack({"orders": {"outbox_shards": 1}})
    stack.start_worker()
    client = redis.Redis.from_url(stack.redis.url)
    try:
        with producer(stack) as p:
            first = p.send("orders", b"before")
            # Given an entry no decoder understands, written straight into the shard between good ones
            client.xadd(keys.outbox("orders", 0), {b"v": b"999", b"garbage": b"\xff"})
            client.hincrby(keys.stats("orders"), "messages", 1)
            second = p.send("orders", b"after")
        stack.start_beat()
        # Then the good ones are delivered and the bad one waits in quarantine with its reason
        got = receive_all(stack.primary, "orders", 2)
        assert sorted(m.message_id for m in got) == sorted([first, second])
        status = wait_until(
            lambda: (s := entity_status(stack, "orders"))["quarantine_depth"] == 1 and s,
            20,
            what="quarantine depth 1",
        )
        assert status["outbox_depth"] == 0
        entry = client.xrange(keys.quarantine("orders"))[0][1]
        assert entry[b"code"] == b"corrupt_entry" and entry[b"reason"]
    finally:
        client.close()


def test_redis_killed_under_running_workers_loses_no_acknowledged_message(make_stack: Any) -> None:
    stack = make_stack({"orders": {}})
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        ids = [p.send("orders", f"m{i}".encode()) for i in range(20)]
    # When Redis dies (kill -9) right after acknowledging, and comes back from its AOF
    stack.redis.kill()
    time.sleep(1)
    stack.redis.start()
    with producer(stack) as p:
        ids += [p.send("orders", f"n{i}".encode()) for i in range(20)]
    # Then every acknowledged message is delivered (a duplicate would carry the same MessageId)
    got = receive_all(stack.primary, "orders", 40, timeout=60)
    assert set(m.message_id for m in got) == set(ids)


def test_redis_door_entries_are_validated_by_the_workers(make_stack: Any) -> None:
    stack = make_stack({"orders": {}})
    stack.start_worker()
    stack.start_beat()
    client = redis.Redis.from_url(stack.redis.url)
    try:
        # Given another language's producer writing the documented Redis-door layout
        client.xadd(keys.ingress("orders"), {b"body": b"from-redis", b"message_id": b"door-1"})
        client.xadd(keys.ingress("orders"), {b"body": b"bad", b"time_to_live": b"-5"})
        # Then the valid one is delivered and the invalid one is quarantined with the reason
        got = receive_all(stack.primary, "orders", 1)
        assert [(str(m), m.message_id) for m in got] == [("from-redis", "door-1")]
        wait_until(lambda: client.xlen(keys.quarantine("orders")) == 1, 20, what="quarantined door entry")
        fields = client.xrange(keys.quarantine("orders"))[0][1]
        assert fields[b"source"] == b"redis-door" and b"time_to_live" in fields[b"field"]
    finally:
        client.close()
