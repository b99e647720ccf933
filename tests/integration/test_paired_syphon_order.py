"""The syphon keeps order per destination and is not blocked by a failed-over entity.

In-process syphon runs (``BacklogSyphon``) against a real Redis and two real local namespaces, through the
real SDK. One fault is injected by wrapping the real call at the pool's seam: a deferral that fails for
one message (as a lost lock or a dropped link makes it fail), so its successor could overtake it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.core.paired import MarkAvailable, backlog_queue_index
from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.errors import NamespaceOutageError
from bridge.paired.syphon_run import run_syphon
from bridge.servicebus.messages import barrier_message
from bridge.state.aside import AsideStore
from bridge.state.backlog import BacklogLedger
from tests.integration.order_checker import check, drain
from tests.integration.paired_support import (
    create_backlog_queues,
    envelope,
    fill_backlog,
    fresh_context,
    lose_aside_records,
    mark_failed_over,
    stack_pool,
    syphon,
    syphon_stack,
    syphon_until_empty,
)
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)

ENTITIES = {"down": {"replication": "paired"}, "up": {"replication": "paired"}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One Redis and two namespaces for the module; each test starts from empty Redis and queues."""
    with syphon_stack(Path(tmp_path_factory.mktemp("syphon-order")), ENTITIES) as local:
        yield local


@pytest.fixture
def ctx(stack: LocalStack) -> Iterator[DeliveryContext]:
    """A delivery context of this process: batches of 5, 1 s polls, 1 s pings."""
    with fresh_context(stack, ENTITIES, batch=5) as context:
        yield context


def test_a_failed_over_entity_at_the_head_of_the_backlog_blocks_nobody(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given a backlog queue whose first 7 messages (more than a batch of 5) belong to a failed-over entity,
    # and 5 messages of a healthy entity behind them
    down = [envelope("down", i, session_id="d") for i in range(7)]
    up = [envelope("up", i, session_id="u") for i in range(5)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down + up)
    mark_failed_over(stack, "down")
    # When the syphon runs while "down" is still failed over
    report = syphon(ctx, queue, 4)
    # Then the healthy entity's messages reached the primary, in order
    got_up = drain(stack.primary, "up", expected=5, timeout=10)
    assert check({"u": [e.message_id for e in up]}, {"primary": got_up}).out_of_sequence == 0
    assert sorted(str(m.message_id) for m in got_up) == sorted(e.message_id for e in up)
    # And the failed-over entity's messages were received once each and set aside, not polled again and again
    assert report.received == 12, report
    assert report.set_aside == 7
    assert AsideStore(ctx.redis).counts(queue) == {"down": 7}
    assert count_in(stack.primary, "down") == 0
    # When "down" is available again, its messages follow, in order, and the backlog ends empty
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    syphon(ctx, queue, 3)
    got_down = drain(stack.primary, "down", expected=7, timeout=10)
    result = check({"d": [e.message_id for e in down]}, {"primary": got_down})
    assert result.out_of_sequence == 0 and not result.missing, result
    assert count_in(stack.secondary, queue) == 0
    assert AsideStore(ctx.redis).counts(queue) == {}


def test_a_settlement_that_fails_for_one_message_does_not_let_the_next_overtake_it(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given three messages of a failed-over entity, and a secondary that fails to settle the first of them
    # once (the way a dropped link does: the message stays locked until its lock expires)
    down = [envelope("down", i, session_id="d") for i in range(3)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down)
    mark_failed_over(stack, "down")
    failed: list[str] = []
    pool = ctx.pool.queues
    real_defer, real_abandon = pool.defer, pool.abandon

    def flaky(real: Any) -> Any:
        def settle(role: Any, path: str, message: Any) -> None:
            if not failed and str(message.message_id) == down[0].message_id:
                failed.append(str(message.message_id))
                raise NamespaceOutageError("secondary settle: link detached (injected)", namespace=role)
            real(role, path, message)

        return settle

    pool.defer = flaky(real_defer)  # type: ignore[method-assign]
    pool.abandon = flaky(real_abandon)  # type: ignore[method-assign]
    syphon(ctx, queue, 2)
    assert failed == [down[0].message_id]
    # When the entity is available again at once, while the first message is still locked
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and count_in(stack.secondary, queue):
        syphon(ctx, queue, 2)
    # Then the messages reach the primary in their order, the first one included
    got = drain(stack.primary, "down", expected=3, timeout=10)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing, result
    assert count_in(stack.secondary, queue) == 0


def test_a_lowered_backlog_queue_count_still_empties_the_retired_queues(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    # Given backlog queue /1, in use while the count was 2, still holding messages; the count is now 1
    namespace = ctx.settings.primary.namespace_name  # type: ignore[union-attr]
    (_, retired) = create_backlog_queues(stack, count=2)
    ctx.paired.register_backlog(namespace, [0, 1])
    up = [envelope("up", i, session_id="u") for i in range(4)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, retired, up)
    # When the syphon runs with the lowered count
    report = run_syphon(ctx, budget=3)
    # Then it read the retired queue too and moved its messages, in order
    assert retired in [q.queue for q in report.queues], report.summary()
    got = drain(stack.primary, "up", expected=4, timeout=10)
    result = check({"u": [e.message_id for e in up]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing, result
    # And once it finds the retired queue empty it stops reading it
    run_syphon(ctx, budget=2)
    assert ctx.paired.backlog_indexes(namespace) == {0}
    assert [q.queue for q in run_syphon(ctx, budget=1).queues] == [create_backlog_queues(stack, count=1)[0]]


def test_deferred_messages_whose_records_redis_lost_are_found_again_and_go_in_order(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given six messages of a failed-over entity set aside (deferred, their numbers in Redis)
    down = [envelope("down", i, session_id="d") for i in range(10)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down[:6])
    mark_failed_over(stack, "down")
    syphon(ctx, queue, 3)
    assert AsideStore(ctx.redis).counts(queue) == {"down": 6}
    # When Redis loses the set-aside records, newer messages of the entity arrive behind them and the
    # entity is available again
    lose_aside_records(ctx, queue)
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down[6:])
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    first = syphon(ctx, queue, 2)
    # Then the first run found the six again by peeking the queue and stopped to wait out older locks
    assert first.recovered == 6 and first.sent == 0, first
    assert AsideStore(ctx.redis).counts(queue) == {"down": 6}
    syphon_until_empty(stack, ctx, queue)
    # And all ten reached the primary once each, in order, and the backlog is empty
    got = drain(stack.primary, "down", expected=10, timeout=10)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    assert count_in(stack.secondary, queue) == 0
    assert AsideStore(ctx.redis).counts(queue) == {}


def test_a_deferred_restore_barrier_whose_record_redis_lost_is_passed(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    index = backlog_queue_index(queue)
    assert index is not None
    # Given three messages of a failed-over entity and shard 0's restore barrier behind them, all set aside
    down = [envelope("down", i, session_id="d") for i in range(3)]
    ledger = BacklogLedger(ctx.redis)
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down)
        assert pool.send("secondary", queue, [barrier_message("down", 0, "t0")]).ok
    ledger.set_barrier("down", 0, index, "sent:t0")
    mark_failed_over(stack, "down")
    syphon(ctx, queue, 3)
    assert AsideStore(ctx.redis).counts(queue) == {"down": 4}
    # When Redis loses the set-aside records and the entity is available again
    lose_aside_records(ctx, queue)
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    syphon_until_empty(stack, ctx, queue)
    # Then the messages went in order and the barrier was passed: shard 0 may send to the primary again
    got = drain(stack.primary, "down", expected=3, timeout=10)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing, result
    assert ledger.queues("down", 0) == {}
    assert count_in(stack.secondary, queue) == 0


def test_records_recovered_while_another_syphon_holds_the_messages_send_nothing_twice_or_out_of_order(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given five set-aside messages of an entity that is available again
    down = [envelope("down", i, session_id="d") for i in range(5)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down)
    mark_failed_over(stack, "down")
    syphon(ctx, queue, 3)
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    # And syphon A, which has taken them back (locked) and is held up on its send to the primary
    holding, release = threading.Event(), threading.Event()
    real_send = ctx.pool.send

    def slow_send(role: Any, entity: str, messages: Any, **kwargs: Any) -> Any:
        if role == "primary" and not holding.is_set():
            holding.set()
            release.wait(10)
        return real_send(role, entity, messages, **kwargs)

    ctx.pool.send = slow_send  # type: ignore[method-assign]
    a = threading.Thread(target=syphon, args=(ctx, queue, 3))
    a.start()
    assert holding.wait(10)
    # When Redis loses the records and syphon B, another process, starts on the queue meanwhile
    lose_aside_records(ctx, queue)
    other = DeliveryContext.build(ctx.settings)
    try:
        b = syphon(other, queue, 2)
        # Then B finds the five again but moves nothing while A may hold locks
        assert b.recovered == 5 and b.sent == 0, b
        release.set()
        a.join(20)
        # And once A sent and completed them, B's later runs forget the numbers: each message reached the
        # primary once, in order
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and AsideStore(ctx.redis).counts(queue):
            syphon(other, queue, 2)
            time.sleep(0.2)
    finally:
        release.set()
        other.close()
    got = drain(stack.primary, "down", expected=5, timeout=10)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    assert count_in(stack.secondary, queue) == 0
    assert AsideStore(ctx.redis).counts(queue) == {}


def test_a_retired_queue_is_not_forgotten_by_a_run_that_only_scanned_it(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    # Given retired backlog queue /1 (in use while the count was 2) still holding messages
    namespace = ctx.settings.primary.namespace_name  # type: ignore[union-attr]
    (_, retired) = create_backlog_queues(stack, count=2)
    ctx.paired.register_backlog(namespace, [0, 1])
    with stack_pool(stack) as pool:
        fill_backlog(pool, retired, [envelope("up", i, session_id="u") for i in range(2)])
    # When a run's budget ends right after its scan, before any receive
    report = run_syphon(ctx, budget=0.001)
    # Then the queue is still read by later runs: a peek is no receive that found it empty
    assert all(q.received == 0 for q in report.queues), report.summary()
    assert ctx.paired.backlog_indexes(namespace) == {0, 1}
