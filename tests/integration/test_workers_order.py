"""Order per key end to end, counted by the order checker: the Redis door under backpressure,
a change of ``outbox_shards`` under traffic, entities the settings do not name, and active replication
with ``success_policy = "all"`` remembering where every entry landed (its send counters never behind the
outbox).

Real processes: redis-server, two local namespaces, ``bridge worker`` and ``bridge beat``; faults are the
namespaces' fault control and ``kill -9``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import redis

from bridge.core.cost import CostTally
from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.stack import LocalStack, wait_until
from bridge.outbox import keys
from bridge.outbox.layout import LayoutStore
from bridge.redis.connection import sync_client
from bridge.state import keys as state_keys
from tests.integration.order_checker import check_namespaces
from tests.integration.paired_support import cost, full_settings
from tests.integration.worker_support import make_stack, outbox_depth, producer

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(240)


def _client(stack: LocalStack) -> redis.Redis:
    return redis.Redis.from_url(stack.redis.url)


def test_redis_door_under_backpressure_keeps_every_key_in_order(make_stack: Any) -> None:
    entities = {"tiny": {"replication": "none", "max_pending_messages": 150}}
    stack = make_stack(entities, settings={"BRIDGE_WORKERS__DISCOVER_INTERVAL": "1"})
    # A primary that settles each send 0.2 s late keeps the outbox near its bound of 150
    stack.primary.control.stall(delay=0.2)
    worker = stack.start_worker()
    stack.start_beat()
    client = _client(stack)
    sent: dict[str, list[str]] = {f"k{k}": [] for k in range(8)}
    try:
        # Given applications XADDing 600 entries in bursts, faster than the primary takes them
        for burst in range(6):
            pipe = client.pipeline(transaction=False)
            for i in range(100):
                key = f"k{i % 8}"
                message_id = f"{key}-{burst}-{i}-{uuid.uuid4().hex[:6]}"
                sent[key].append(message_id)
                pipe.xadd(
                    keys.ingress("tiny"), {"body": message_id, "message_id": message_id, "partition_key": key}
                )
            pipe.execute()
            time.sleep(0.3)
        # And an entity nobody configured, written the same way
        client.xadd(keys.ingress("invoices"), {"body": "inv-1", "message_id": "inv-1"})
        wait_until(lambda: client.xlen(keys.ingress("tiny")) == 0, 90, what="the door emptying its stream")
    finally:
        client.close()
    stack.primary.control.restore()
    # Then the door met backpressure: the full outbox refused moves (the entries waited in the stream) ...
    refusal = f"the outbox of entity {'tiny'!r} is full; retry later"
    assert refusal in worker.log_path.read_text(errors="replace"), worker.log_tail()
    # ... and every key's messages reached the primary in the order they were written
    report = check_namespaces(sent, {"primary": stack.primary}, "tiny", timeout=60)
    assert report.out_of_sequence == 0 and not report.missing, report
    # And the unlisted entity's entry was found and delivered (default: passive, to the primary)
    unlisted = check_namespaces({"inv": ["inv-1"]}, {"primary": stack.primary}, "invoices", timeout=30)
    assert not unlisted.missing, unlisted


def _shards(layouts: LayoutStore) -> int:
    layout = layouts.get("orders")
    return 0 if layout is None else layout.shards


def _entities(shards: int) -> str:
    return json.dumps({"orders": {"replication": "none", "outbox_shards": shards}})


def test_changing_outbox_shards_under_traffic_keeps_order_and_strands_nothing(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "none", "outbox_shards": 1}})
    stack.start_beat()
    worker = stack.start_worker("worker-1")
    sessions = [f"s{k}" for k in range(20)]
    sent: dict[str, list[str]] = {k: [] for k in sessions}

    def produce(p: Any, phase: str, rounds: int = 5) -> None:
        for i in range(rounds):
            for k in sessions:
                sent[k].append(p.send("orders", f"{phase}{i}".encode(), partition_key=k))

    layouts = LayoutStore(sync_client(stack.redis.url))
    with producer(stack) as p:  # its settings keep saying 1 shard all along: Redis's layout wins
        produce(p, "a")
        # Given a primary outage: the outbox holds everything
        stack.primary.control.outage()
        produce(p, "b")
        # When the workers are redeployed with 4 shards under traffic
        worker.kill()
        worker = stack.start_worker("worker-4", BRIDGE_ENTITIES=_entities(4))
        wait_until(lambda: _shards(layouts) == 4, 30, what="the change to 4 shards")
        produce(p, "c")
        # And again with 2 while the first change has not drained (it waits for it)
        worker.kill()
        worker = stack.start_worker("worker-2", BRIDGE_ENTITIES=_entities(2))
        produce(p, "d")
        # When the primary comes back
        stack.primary.control.restore()
        produce(p, "e")
        wait_until(lambda: _shards(layouts) == 2, 60, what="the change to 2 shards")
        produce(p, "f")
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 60, what="an empty outbox")
    # Then nothing was stranded in a shard beyond the count and every key kept its order
    report = check_namespaces(sent, {"primary": stack.primary}, "orders", timeout=60)
    assert report.out_of_sequence == 0 and not report.missing, report
    layout = layouts.get("orders")
    assert layout is not None and layout.shards == 2 and not layout.migrating


def test_active_all_remembers_where_every_entry_of_a_batch_landed(make_stack: Any) -> None:
    stack = make_stack({"audit": {"replication": "active", "success_policy": "all"}})
    stack.start_worker()
    stack.start_beat()
    # Given the secondary down: every entry of a batch lands on the primary only and must be retried
    stack.secondary.control.outage()
    with producer(stack) as p:
        ids = p.send_batch("audit", [f"m{i}".encode() for i in range(10)])
    wait_until(lambda: cost(stack, "audit").primary_sends >= 10, 30, what="the primary accepting the batch")
    time.sleep(3)  # several retries of the batch while the secondary stays down
    # When the secondary comes back
    stack.secondary.control.restore()
    wait_until(lambda: outbox_depth(stack, "audit") == 0, 30, what="an empty outbox")
    # Then every entry went to each namespace exactly once: the retries went to the secondary only
    assert cost(stack, "audit").primary_sends == 10
    assert cost(stack, "audit").backup_sends == 10
    for ns in (stack.primary, stack.secondary):
        report = check_namespaces({"all": ids}, {"ns": ns}, "audit", timeout=30)
        assert not report.missing and report.duplicates == 0, report


def test_every_send_of_an_active_batch_is_counted_before_its_entries_leave_the_outbox(
    make_stack: Any,
) -> None:
    stack = make_stack({"audit": {"replication": "active", "success_policy": "all"}})
    count = 2000
    with producer(stack) as p:
        for start in range(0, count, 1000):
            p.send_batch("audit", [f"m{i}".encode() for i in range(start, start + 1000)])
    client = _client(stack)
    # Given a drain service draining a few batches, each sent to both namespaces and acknowledged behind
    # the drain
    ctx = DeliveryContext.build(full_settings(stack))
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    deadline = time.monotonic() + 120
    try:
        while True:
            # Then whenever entries have left the outbox, the sends that took them are counted already
            # (both read at once: the counters and the outbox's depth)
            pipe = client.pipeline(transaction=True)
            pipe.hget(keys.stats("audit"), "messages")
            pipe.hgetall(state_keys.cost("audit"))
            depth, fields = pipe.execute()
            left, tally = count - int(depth or 0), CostTally.from_fields(fields)
            assert tally.primary_sends >= left and tally.backup_sends >= left, (left, tally)
            if left == count:
                break
            assert time.monotonic() < deadline, f"{left} of {count} messages left the outbox"
    finally:
        drains.stop()
        ctx.close()
        client.close()
    assert cost(stack, "audit").primary_sends == cost(stack, "audit").backup_sends == count


def produce_rounds(
    p: Any, entity: str, sent: dict[str, list[str]], rounds: range, pause: float = 0.0
) -> None:
    """One message per key of ``sent`` per round (its MessageId appended there), then ``pause`` s."""
    for i in rounds:
        for k, ids in sent.items():
            ids.append(p.send(entity, f"{k}-{i}".encode(), partition_key=k))
        if pause:
            time.sleep(pause)


def test_a_send_that_timed_out_and_was_committed_late_never_lands_behind_newer_messages(
    make_stack: Any,
) -> None:
    # Active replication, policy "any": an entry the secondary accepted is acknowledged even when its
    # primary send timed out, so without the wait newer messages sent to the primary right after the
    # stall ends would be committed before the abandoned transfers still pending there (the chaos soak's
    # finding; with the wait off this test fails). The wait must outlast the late commit: the SDK gives up
    # after 1.5 s (half the 3 s attempt deadline), the namespace commits 4 s after the transfer, so 2.5 s
    # after the bridge gave up; the wait is 4 s.
    stack = make_stack(
        {"ledger": {"replication": "active", "success_policy": "any"}},
        settings={"BRIDGE_RETRY__ABANDONED_SEND_WAIT": "4"},
    )
    stack.start_worker()
    stack.start_beat()
    sent: dict[str, list[str]] = {f"k{k}": [] for k in range(6)}

    def produce(p: Any, rounds: range) -> None:
        produce_rounds(p, "ledger", sent, rounds, pause=0.05)

    with producer(stack) as p:
        produce(p, range(5))
        wait_until(lambda: outbox_depth(stack, "ledger") == 0, 30, what="the first messages delivered")
        # Given keyed traffic on open links, and a primary that holds each transfer 4 s before committing
        # it, on the link the SDK keeps open after its timeout
        stack.primary.control.stall(delay=4.0)
        produce(p, range(5, 60))
        # When the primary settles on time again while abandoned transfers are still pending there
        stack.primary.control.restore()
        produce(p, range(60, 100))
    wait_until(lambda: outbox_depth(stack, "ledger") == 0, 60, what="an empty outbox")
    # Then the secondary holds every message in order, and so does the primary, for what it holds
    secondary = check_namespaces(sent, {"secondary": stack.secondary}, "ledger", timeout=60)
    assert not secondary.missing and secondary.out_of_sequence == 0, secondary
    time.sleep(4.5)  # longer than the stall: every abandoned transfer has been committed by now
    primary = check_namespaces(sent, {"primary": stack.primary}, "ledger", timeout=5)
    assert primary.out_of_sequence == 0, primary
    # And the primary did time out: it lacks messages the secondary took while the bridge waited
    assert primary.missing, primary


def test_a_retry_carrying_the_abandoned_messages_goes_at_once_and_their_late_commit_is_a_duplicate(
    make_stack: Any,
) -> None:
    # Passive: the retry after a timeout goes to the same namespace and carries the abandoned messages
    # first, so it need not wait (the wait here is 60 s: a retry held back by it would fail this test).
    stack = make_stack(
        {"payments": {"replication": "passive"}}, settings={"BRIDGE_RETRY__ABANDONED_SEND_WAIT": "60"}
    )
    stack.start_worker()
    stack.start_beat()
    sent: dict[str, list[str]] = {f"k{k}": [] for k in range(4)}

    def produce(p: Any, rounds: range) -> None:
        produce_rounds(p, "payments", sent, rounds)

    with producer(stack) as p:
        produce(p, range(5))
        wait_until(lambda: outbox_depth(stack, "payments") == 0, 30, what="the first messages delivered")
        # Given a primary that holds transfers 2 s (the SDK gives up after 1.5 s) for one second only
        stack.primary.control.stall(delay=2.0)
        produce(p, range(5, 10))
        time.sleep(1.0)
        stack.primary.control.restore()
        # When more messages follow
        produce(p, range(10, 30))
    # Then the retry went at once (well inside the 60 s wait) and everything reached the primary in order
    wait_until(lambda: outbox_depth(stack, "payments") == 0, 20, what="an empty outbox")
    time.sleep(2.5)  # every abandoned transfer has been committed by now
    primary = check_namespaces(sent, {"primary": stack.primary}, "payments", timeout=30)
    assert not primary.missing and primary.out_of_sequence == 0, primary
    # And the abandoned transfer was committed late after all: its copies are duplicates behind the retry
    assert primary.duplicates > 0, primary
