"""The syphon's message locks when this host's clock and Service Bus's disagree.

A lock's expiry (``locked_until_utc``) is Service Bus's time. The syphon renews a batch's locks before they
run out and leaves a marker in Redis that outlives them (a later run after a crash waits for it); both must
hold whatever this host's clock says. The skew is injected as the delivery context's clock
(``DeliveryContext.clock``, what the syphon reads as "now"), 30 s off; nothing sleeps to make clocks differ.
Real Redis and two local namespaces, the backlog queue with a 6 s lock, through the SDK.

Timing under load: the primary's stall delays its CBS replies as well as its transfers, so a send that has
to open its link first (the pool reopens a role's client after a fault, e.g. a backlog link that did not open
in time on a busy machine) takes two stalls. The attempt deadline (10 s, the default: the SDK's own timeout
is half of it) leaves room for that and for a starved CPU, so a send is never cut short by the test's own
fault; the batch still outlasts its lock by the stalls alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from bridge.core.paired import backlog_queue_paths
from bridge.delivery.context import DeliveryContext
from bridge.embedded.namespaces import LocalNamespace
from bridge.paired.syphon_run import SyphonReport, run_syphon
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import to_message
from bridge.settings import Settings
from bridge.state.aside import AsideStore
from tests.integration.paired_support import envelope, fill_backlog, namespace_settings, receive, text
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)
ENTITIES = ("a", "b", "c", "d")
SKEW = 30.0
LOCK = 6.0
STALL = 1.6
"""Seconds the primary takes per send: four sends (6.4 s) outlast one lock."""


@pytest.fixture
def ctx(redis_url: str, namespace_pair: tuple[LocalNamespace, LocalNamespace]) -> Iterator[DeliveryContext]:
    """A delivery context on the pair, one backlog queue with a 6 s lock, four paired entities."""
    primary, secondary = namespace_pair
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(primary),
            "secondary": namespace_settings(secondary),
            "entities": {name: {"replication": "paired"} for name in ENTITIES},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
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
        admin.create_queue(backlog(settings), lock_duration=timedelta(seconds=LOCK))
    context = DeliveryContext.build(settings)
    try:
        yield context
    finally:
        context.close()


def backlog(settings: Settings) -> str:
    assert settings.primary is not None
    return backlog_queue_paths(settings.primary.namespace_name, 1)[0]


def _skewed(ctx: DeliveryContext, skew: float) -> None:
    """This host's clock runs ``skew`` seconds off Service Bus's."""
    ctx.clock = lambda: time.time() + skew


def _slow_batch(ctx: DeliveryContext, primary: LocalNamespace) -> list[str]:
    """40 backlog messages for four destinations on a primary that takes 1.6 s per send: the batch outlasts
    its 6 s lock unless the locks are renewed."""
    ids = fill_backlog(ctx.pool, backlog(ctx.settings), [envelope(n, i) for n in ENTITIES for i in range(10)])
    warm = [envelope(name, -1) for name in ENTITIES]  # senders attached and authorized before the stall
    for message in warm:
        assert ctx.pool.send("primary", message.entity, [to_message(message)]).ok
    primary.control.stall(delay=STALL)
    return ids + [m.message_id for m in warm]


def _moving_run(ctx: DeliveryContext, budget: float) -> SyphonReport:
    """One syphon run that received the batch. A run whose backlog link did not open within the attempt
    deadline (a loaded machine: ``OperationTimeoutError`` before any message, so nothing was locked or
    moved) is run again: opening the link is not what these tests are about."""
    deadline = time.monotonic() + 60
    while True:
        report = run_syphon(ctx, budget=budget)
        (queue,) = report.queues
        if queue.received or time.monotonic() > deadline:
            return report


def test_a_syphon_whose_clock_runs_behind_service_bus_still_renews_its_locks_in_time(
    ctx: DeliveryContext, namespace_pair: tuple[LocalNamespace, LocalNamespace]
) -> None:
    primary, secondary = namespace_pair
    # Given this host's clock 30 s behind Service Bus's: a 6 s lock looks 36 s long against it
    _skewed(ctx, -SKEW)
    expected = _slow_batch(ctx, primary)
    # When one run moves the batch of 40 through four slow sends
    report = _moving_run(ctx, budget=8)
    primary.control.restore()
    # Then the locks were renewed on the way and every message arrived exactly once
    (done,) = report.queues
    assert done.sent == 40 and done.lock_renewals >= 1, report.summary()
    got = [text(m.message_id) for name in ENTITIES for m in receive(primary, name, 11, timeout=10)]
    assert sorted(got) == sorted(expected)
    assert count_in(secondary, backlog(ctx.settings)) == 0


def test_a_syphon_whose_clock_runs_ahead_of_service_bus_leaves_a_lock_marker_that_outlives_its_locks(
    ctx: DeliveryContext, namespace_pair: tuple[LocalNamespace, LocalNamespace]
) -> None:
    primary, _ = namespace_pair
    # Given this host's clock 30 s ahead of Service Bus's: a 6 s lock looks long gone against it
    _skewed(ctx, SKEW)
    _slow_batch(ctx, primary)
    aside, queue = AsideStore(ctx.redis), backlog(ctx.settings)
    seen: list[float] = []
    # When a run holds the batch's locks (sending slowly)
    run = threading.Thread(target=lambda: _moving_run(ctx, budget=6))
    run.start()
    try:
        deadline = time.monotonic() + 70
        while run.is_alive() and time.monotonic() < deadline and len(seen) < 20:
            pending = aside.locks_pending(queue)
            if pending is not None:
                seen.append(pending)
            time.sleep(0.1)
    finally:
        run.join(30)
        primary.control.restore()
    # Then the marker a run that follows a crash would wait for lasted as long as the locks, not a moment
    assert seen and max(seen) > LOCK - 1, seen
