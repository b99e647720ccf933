"""The syphon in this process (``run_syphon``) against real Redis and two local namespaces: lock renewal
on a slow batch, and the lease that keeps a second syphon off a queue (finer grain than
``test_paired_syphon.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from bridge.core.paired import backlog_queue_paths
from bridge.core.syphon import syphon_lease_name
from bridge.delivery.context import DeliveryContext
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.errors import NamespaceError
from bridge.paired.syphon_run import run_syphon
from bridge.redis.lease import Lease
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import to_message
from bridge.settings import Settings
from tests.integration.paired_support import envelope, fill_backlog, namespace_settings, receive, text
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)
ENTITIES = ("a", "b", "c", "d")


@pytest.fixture
def ctx(redis_url: str, namespace_pair: tuple[LocalNamespace, LocalNamespace]) -> Iterator[DeliveryContext]:
    """A delivery context on the pair, one backlog queue with a 4 s lock, four paired entities."""
    primary, secondary = namespace_pair
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(primary),
            "secondary": namespace_settings(secondary),
            "entities": {name: {"replication": "paired"} for name in ENTITIES},
            "retry": {"attempt_deadline": 3, "retry_total": 0},
            "paired": {
                "backlog_queue_count": 1,
                "syphon_batch_size": 40,
                "syphon_receive_wait": 0.5,
                "syphon_lease_ttl": 10,
            },
        }
    )
    assert settings.secondary is not None
    with NamespaceAdmin(settings.secondary) as admin:
        admin.create_queue(backlog(settings), lock_duration=timedelta(seconds=4))
    context = DeliveryContext.build(settings)
    try:
        # The backlog queue's receive link open before the test (the syphon reuses the pool's cached link):
        # with the 3 s attempt deadline, a link that a loaded machine opens slowly would fail the run.
        wait_until(lambda: _link_open(context, backlog(settings)), 60, what="the backlog receive link")
        yield context
    finally:
        context.close()


def _link_open(context: DeliveryContext, queue: str) -> bool:
    try:
        context.pool.queues.peek("secondary", queue, 0, 1)
    except NamespaceError:
        return False
    return True


def backlog(settings: Settings) -> str:
    assert settings.primary is not None
    return backlog_queue_paths(settings.primary.namespace_name, 1)[0]


def test_locks_of_a_slow_batch_are_renewed_so_nothing_is_sent_twice(
    ctx: DeliveryContext, namespace_pair: tuple[LocalNamespace, LocalNamespace]
) -> None:
    primary, secondary = namespace_pair
    queue = backlog(ctx.settings)
    ids = fill_backlog(ctx.pool, queue, [envelope(name, i) for name in ENTITIES for i in range(10)])
    warm = [envelope(name, -1) for name in ENTITIES]  # senders attached and authorized before the stall
    for message in warm:
        assert ctx.pool.send("primary", message.entity, [to_message(message)]).ok
    # Given a primary that takes 1.2 s to settle each send: four destinations outlast the 4 s lock
    primary.control.stall(delay=1.2)
    # When one run moves the batch of 40
    report = run_syphon(ctx, budget=8)
    primary.control.restore()
    # Then the locks were renewed on the way and every message arrived exactly once
    (done,) = report.queues
    assert done.sent == 40 and done.lock_renewals >= 1, report.summary()
    got = [text(m.message_id) for name in ENTITIES for m in receive(primary, name, 11, timeout=10)]
    assert sorted(got) == sorted(ids + [m.message_id for m in warm])
    assert count_in(secondary, queue) == 0


def test_a_second_syphon_skips_a_queue_whose_lease_is_held(ctx: DeliveryContext) -> None:
    queue = backlog(ctx.settings)
    fill_backlog(ctx.pool, queue, [envelope("a", i) for i in range(5)])
    # Given another syphon holding the queue's lease
    lease = Lease.named(ctx.redis, syphon_lease_name(queue))
    assert lease.acquire("someone-else", 10_000)
    # Then a run does not touch the queue
    report = run_syphon(ctx, budget=1)
    assert report.busy == [queue] and report.queues == []
    # When the holder gives it up, the next run takes it, moves everything and releases it
    assert lease.release("someone-else")
    report = run_syphon(ctx, budget=1)
    assert [q.sent for q in report.queues] == [5]
    assert lease.holder() is None


def test_two_runs_at_once_one_works_the_other_waits(ctx: DeliveryContext) -> None:
    queue = backlog(ctx.settings)
    fill_backlog(ctx.pool, queue, [envelope("a", i) for i in range(50)])
    results: list[object] = []
    runs = [threading.Thread(target=lambda: results.append(run_syphon(ctx, budget=2))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    held = [r for r in results if getattr(r, "queues", None)]
    waited = [r for r in results if getattr(r, "busy", None)]
    assert len(held) == 1 and len(waited) == 1
    assert sum(q.sent for q in held[0].queues) == 50  # type: ignore[attr-defined]
