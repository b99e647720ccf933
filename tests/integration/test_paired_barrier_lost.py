"""A restore barrier that is never passed: declared lost after ``paired.barrier_timeout``, sent again, shown.

Real parts: the stack's Redis and local namespaces, a drain service and syphon runs in this process, the
status JSON and its metric, and the status page of a real ``bridge serve`` loaded in headless Chromium.
The loss is the one a restore of Redis from a backup makes: the shard's ledger names a barrier that is no
longer in the backlog queue (it was passed and completed after the backup was taken).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.core.barriers import barrier_token
from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.stack import LocalStack, wait_until
from bridge.paired.syphon import BacklogSyphon
from bridge.servicebus.messages import barrier_message
from bridge.settings import Settings
from bridge.state.backlog import BacklogLedger
from bridge.status.collector import families_from_snapshot
from bridge.status.snapshot import collect_snapshot
from tests.integration.operations_support import chromium, chromium_binary, start_serve
from tests.integration.order_checker import check
from tests.integration.paired_support import (
    create_backlog_queues,
    create_entities,
    envelope,
    fill_backlog,
    namespace_settings,
    stack_pool,
)
from tests.integration.worker_support import make_stack, producer, receive_all

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(180)

TIMEOUT = 3.0
"""``paired.barrier_timeout`` of the test (900 s by default)."""


def _settings(stack: LocalStack) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": stack.redis.url,
            "primary": namespace_settings(stack.primary),
            "secondary": namespace_settings(stack.secondary),
            "entities": stack.entities,
            "retry": {"attempt_deadline": 3, "retry_total": 0},
            "paired": {
                "backlog_queue_count": 1,
                "syphon_receive_wait": 1,
                "syphon_batch_size": 5,
                "syphon_retry_interval": 0.5,
                "enable_syphon": False,
                "barrier_timeout": TIMEOUT,
            },
            "workers": {"lease_ttl": 5},
        }
    )


@pytest.fixture
def service(make_stack: Any) -> Iterator[tuple[LocalStack, DeliveryContext]]:
    stack = make_stack({"orders": {"replication": "paired", "outbox_shards": 1}})
    create_entities(stack.primary, queues=["orders"])
    create_backlog_queues(stack, count=1)
    ctx = DeliveryContext.build(_settings(stack))
    try:
        yield stack, ctx
    finally:
        ctx.close()


def _barriers(ctx: DeliveryContext) -> list[dict[str, Any]]:
    snapshot = collect_snapshot(ctx.settings, ctx.redis)
    (orders,) = [e for e in snapshot["entities"] if e["name"] == "orders"]
    return list(orders["paired"]["barriers"])


def _lost_gauge(ctx: DeliveryContext) -> float:
    snapshot = collect_snapshot(ctx.settings, ctx.redis)
    (family,) = [f for f in families_from_snapshot(snapshot) if f.name == "bridge_restore_barriers"]
    return sum(s.value for s in family.samples if s.labels == {"entity": "orders", "state": "lost"})


def test_a_barrier_missing_from_its_queue_is_declared_lost_sent_again_shown_and_the_shard_resumes(
    service: tuple[LocalStack, DeliveryContext], tmp_path: Path
) -> None:
    stack, ctx = service
    (queue,) = create_backlog_queues(stack, count=1)
    # Given shard 0's ledger naming a barrier in backlog queue 0 that is not in the queue (Redis restored
    # from a backup taken before the syphon passed it)
    ledger = BacklogLedger(ctx.redis)
    ledger.set_barrier("orders", 0, 0, "sent:" + barrier_token("gone", time.time(), 0))
    assert [b["state"] for b in _barriers(ctx)] == ["waiting"]
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        # When messages of key k are written: the shard waits for its barrier and sends nothing
        with producer(stack) as p:
            written = p.send_batch("orders", [{"body": f"k#{i}", "partition_key": "k"} for i in range(5)])
        time.sleep(1.0)
        assert receive_all(stack.primary, "orders", 1, timeout=0.5) == []
        # Then once the timeout passed, the barrier is declared lost and another one is sent to the queue
        wait_until(
            lambda: [(b["state"], b["resends"]) for b in _barriers(ctx)] == [("lost", 1)],
            TIMEOUT + 10,
            what="the barrier declared lost and sent again",
        )
        assert _lost_gauge(ctx) == 1
        # And an operator sees it on the status page
        if chromium_binary() is not None:
            dom = chromium(f"{start_serve(stack)}/status")
            row = re.search(r'<tr data-entity="orders">(.*?)</tr>', dom, re.S)
            assert row is not None, dom[-2000:]
            cell = re.search(r'<td data-field="barriers" class="down">([^<]*)</td>', row.group(1))
            assert cell is not None and cell.group(1).startswith("BARRIER LOST: shard 0 queue 0"), row.group(
                1
            )
        # When the syphon reaches the new barrier
        report = BacklogSyphon(ctx, queue, lambda: True).run(ctx.clock() + 3)
        assert report.barriers == 1, report
        # Then the shard sends to the primary again, in order, and nothing is left waiting
        got = receive_all(stack.primary, "orders", 5, timeout=20)
    finally:
        drains.stop()
    result = check({"k": written}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    assert ledger.queues("orders", 0) == {}
    assert _barriers(ctx) == [] and _lost_gauge(ctx) == 0


def test_a_barrier_declared_lost_while_the_syphon_is_merely_slow_still_lets_the_shard_resume(
    service: tuple[LocalStack, DeliveryContext],
) -> None:
    stack, ctx = service
    (queue,) = create_backlog_queues(stack, count=1)
    # Given 40 backlog messages of key k and shard 0's restore barrier behind them, in the queue
    backlog = [envelope("orders", i, partition_key="k") for i in range(40)]
    token = barrier_token("first", time.time(), 0)
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, backlog)
        assert pool.send("secondary", queue, [barrier_message("orders", 0, token)]).ok
    ledger = BacklogLedger(ctx.redis)
    ledger.set_barrier("orders", 0, 0, "sent:" + token)
    # And a syphon that moves a batch of 5 every 0.8 s or so (a slow primary), so reaching the barrier takes
    # longer than the barrier timeout
    real_send = ctx.pool.send

    def slow_send(role: Any, entity: str, messages: Any, **kwargs: Any) -> Any:
        if role == "primary" and entity == "orders":
            time.sleep(0.8)
        return real_send(role, entity, messages, **kwargs)

    ctx.pool.send = slow_send  # type: ignore[method-assign]
    drains = DrainService(ctx, tick=0.1, block_ms=200).start()
    stop = threading.Event()
    resends: list[int] = []

    def syphon_runs() -> None:
        while not stop.is_set():
            BacklogSyphon(ctx, queue, lambda: True).run(ctx.clock() + 1)
            resends.extend(b["resends"] for b in _barriers(ctx))

    runs = threading.Thread(target=syphon_runs)
    try:
        # When messages of key k are written while the syphon works through the backlog
        with producer(stack) as p:
            written = p.send_batch("orders", [{"body": f"k#{i}", "partition_key": "k"} for i in range(5)])
        runs.start()
        # Then the barrier is declared lost and sent again while the syphon is still on its way to it
        wait_until(lambda: any(resends), TIMEOUT + 20, what="the barrier declared lost")
        # And yet the syphon reaches a barrier of the shard, which then resumes: every message of k reaches
        # the primary once, the backlog's before the new ones, and no barrier is left waiting
        got = receive_all(stack.primary, "orders", 45, timeout=60)
    finally:
        stop.set()
        runs.join(30)
        drains.stop()
    result = check({"k": [e.message_id for e in backlog] + written}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    wait_until(lambda: ledger.queues("orders", 0) == {}, 20, what="the shard's ledger empty")
