"""The syphon receives from a backlog queue of any length: its scan for lost set-aside records is bounded by
the runs' budgets, resumes where it stopped, and runs only when the Redis server may have lost records.

In-process syphon runs (``BacklogSyphon``) against a real Redis and two real local namespaces, through the
real SDK. Peeks are slowed by wrapping the real call at the pool's seam (cross-region peeks take tens to
hundreds of milliseconds; the local ones a few), so a few hundred messages stand for a queue whose scan
outlasts a run's budget.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.core.paired import MarkAvailable
from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.state.aside import AsideStore
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
    syphon_settings,
    syphon_stack,
    syphon_until_empty,
)
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(150)

ENTITIES = {"down": {"replication": "paired"}, "up": {"replication": "paired"}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One Redis and two namespaces for the module; each test starts from empty Redis and leaves the
    backlog queue empty."""
    with syphon_stack(Path(tmp_path_factory.mktemp("syphon-backlog")), ENTITIES) as local:
        yield local


@pytest.fixture
def ctx(stack: LocalStack) -> Iterator[DeliveryContext]:
    """A delivery context of this process on an empty Redis."""
    with fresh_context(stack, ENTITIES, batch=50) as context:
        yield context


def slow_peeks(ctx: DeliveryContext, seconds: float) -> list[int]:
    """Every peek of ``ctx``'s pool takes ``seconds`` longer; returns the sequence numbers peeks start at."""
    real_peek, starts = ctx.pool.queues.peek, []

    def peek(role: Any, queue: str, from_sequence_number: int, max_count: int) -> Any:
        starts.append(from_sequence_number)
        time.sleep(seconds)
        return real_peek(role, queue, from_sequence_number, max_count)

    ctx.pool.queues.peek = peek  # type: ignore[method-assign]
    return starts


def test_a_run_receives_from_a_backlog_longer_than_its_budget_could_peek(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given a syphon that already ran against this Redis server (it runs every interval)
    syphon(ctx, queue, 1)
    # And 260 messages in the backlog queue: peeking them all (two pages of 250 and one that finds the end)
    # at 1 s a peek takes longer than a run's budget of 2 s
    up = [envelope("up", i, session_id="u") for i in range(260)]
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, up)
    peeks = slow_peeks(ctx, 1.0)
    # When a syphon run of 2 s starts
    report = syphon(ctx, queue, 2)
    # Then it received and moved messages, and peeked nothing
    assert report.sent > 0, report
    assert peeks == [], peeks
    # And later runs move the rest, in order, once each, still without a peek
    syphon_until_empty(stack, ctx, queue, 60, run=1)
    got = drain(stack.primary, "up", expected=260, timeout=20)
    result = check({"u": [e.message_id for e in up]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    assert peeks == [], peeks


def set_aside(stack: LocalStack, ctx: DeliveryContext, queue: str, down: list[Any]) -> None:
    """``down``'s messages in the backlog queue, set aside by a run while "down" is failed over."""
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down)
    mark_failed_over(stack, "down")
    syphon(ctx, queue, 2)
    assert AsideStore(ctx.redis).counts(queue) == {"down": len(down)}


def test_a_scan_for_lost_records_resumes_where_the_last_run_stopped_and_peeks_each_page_once(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given three set-aside messages of "down" whose records Redis lost, 255 messages of "up" behind them
    # and two newer ones of "down", "down" available again
    down = [envelope("down", i, session_id="d") for i in range(5)]
    up = [envelope("up", i, session_id="u") for i in range(255)]
    set_aside(stack, ctx, queue, down[:3])
    lose_aside_records(ctx, queue)
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, up + down[3:])
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    # When peeks take 0.6 s and each run has 1 s: a whole scan (three peeks) fits in no run
    peeks = slow_peeks(ctx, 0.6)
    first = syphon(ctx, queue, 1)
    # Then the first run found the three again in the part it peeked, and moved nothing
    assert first.recovered == 3 and first.sent == 0, first
    # And later runs go on from where it stopped: every message leaves, once each, in order, and no page
    # was peeked twice (two pages of 250 and one that finds the end)
    syphon_until_empty(stack, ctx, queue, 60, run=1)
    got_down = drain(stack.primary, "down", expected=5, timeout=20)
    result = check({"d": [e.message_id for e in down]}, {"primary": got_down})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    got_up = drain(stack.primary, "up", expected=255, timeout=20)
    assert not check({"u": [e.message_id for e in up]}, {"primary": got_up}).missing
    assert len(peeks) == 3 and len(set(peeks)) == 3, peeks
    assert AsideStore(ctx.redis).counts(queue) == {}


def test_the_scan_starts_at_the_first_message_whatever_the_receiver_received_before(
    stack: LocalStack, ctx: DeliveryContext
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given six set-aside messages of "down" whose records Redis lost, four newer ones behind them, and
    # "down" available again
    down = [envelope("down", i, session_id="d") for i in range(10)]
    set_aside(stack, ctx, queue, down[:6])
    lose_aside_records(ctx, queue)
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down[6:])
    ctx.paired.apply("down", [MarkAvailable(time.time(), "test: primary back")])
    # And the pool's receiver of the queue has received (and given back) the seventh message
    (seventh,) = ctx.pool.queues.receive_batch("secondary", queue, 1, 5)
    ctx.pool.queues.abandon("secondary", queue, seventh)
    # When the syphon runs
    first = syphon(ctx, queue, 2)
    # Then its scan found the six from the first sequence number on, not only those after the seventh
    assert first.recovered == 6 and first.sent == 0, first
    # And all ten reach the primary once each, in order
    syphon_until_empty(stack, ctx, queue, 60, run=1)
    got = drain(stack.primary, "down", expected=10, timeout=20)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
    assert count_in(stack.secondary, queue) == 0


def test_a_redis_restored_from_a_backup_has_the_next_run_scan_the_queue_again(
    stack: LocalStack, ctx: DeliveryContext, tmp_path: Path
) -> None:
    (queue,) = create_backlog_queues(stack, count=1)
    # Given a syphon that ran on the queue (its scan complete on this Redis server) and a backup of Redis
    # taken then
    syphon(ctx, queue, 1)
    backup = tmp_path / "redis-backup"
    shutil.copytree(stack.redis.data_dir, backup)
    # And three messages of "down" set aside after the backup
    down = [envelope("down", i, session_id="d") for i in range(5)]
    set_aside(stack, ctx, queue, down[:3])
    # When Redis is restored from the backup (the three records and the failover are gone, the record of the
    # complete scan is back) and two newer messages of "down" arrive
    stack.redis.stop()
    shutil.rmtree(stack.redis.data_dir)
    shutil.copytree(backup, stack.redis.data_dir)
    stack.redis.start()
    with stack_pool(stack) as pool:
        fill_backlog(pool, queue, down[3:])
    restored = DeliveryContext.build(syphon_settings(stack, ENTITIES, batch=50))
    try:
        assert AsideStore(restored.redis).counts(queue) == {}
        first = syphon(restored, queue, 2)
        # Then the first run scanned the queue again, found the three and moved nothing
        assert first.recovered == 3 and first.sent == 0 and first.peeks > 0, first
        # And all five reach the primary once each, in order
        syphon_until_empty(stack, restored, queue, 60, run=1)
    finally:
        restored.close()
    got = drain(stack.primary, "down", expected=5, timeout=20)
    result = check({"d": [e.message_id for e in down]}, {"primary": got})
    assert result.out_of_sequence == 0 and not result.missing and not result.duplicates, result
