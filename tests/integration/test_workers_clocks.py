"""Hosts whose clocks disagree: waits one drainer leaves in Redis for the next are measured on one clock.

A shard can pass from a worker on one host to a worker on another. What the first leaves behind for the
next — the wait after an abandoned send (``bridge.core.abandoned``) and the shard's backoff — must last as
long on the new holder as it was meant to, whatever the new host's clock says. The skew is injected as the
delivery context's clock (``DeliveryContext.clock``, what a drainer and the sweeper read as "now"), 30 s
ahead of or behind this host's; nothing here sleeps to make a clock differ. Real Redis (the session's
private server) and the shared local namespace, with a stall on the test's own entity.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import DrainReport, ShardDrainer
from bridge.delivery.sweeper import sweep
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.producer import Producer
from bridge.settings import Settings
from tests.integration.paired_support import namespace_settings

pytestmark = pytest.mark.timeout(120)

SKEW = 30.0
"""Seconds the new holder's clock is off."""


def _settings(redis_url: str, ns: LocalNamespace, entity: str, abandoned_wait: float) -> Settings:
    # No backoff of its own (factor 0): a retry waits only for what the abandoned send asks. The SDK gives up
    # after 1 s (half the attempt deadline), the namespace holds the transfer 3 s.
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"outbox_shards": 1, "replication": "none"}},
            "retry": {
                "attempt_deadline": 2,
                "retry_total": 0,
                "outbox_backoff_factor": 0,
                "abandoned_send_wait": abandoned_wait,
            },
            "workers": {"lease_ttl": 10},
        }
    )


@pytest.fixture
def contexts() -> Iterator[list[DeliveryContext]]:
    """Delivery contexts built by a test (each one a worker process on its own host); closed after."""
    built: list[DeliveryContext] = []
    yield built
    for ctx in built:
        ctx.close()


def _context(built: list[DeliveryContext], settings: Settings, identity: str) -> DeliveryContext:
    ctx = DeliveryContext.build(settings)
    ctx.identity = identity
    built.append(ctx)
    return ctx


def _skewed(ctx: DeliveryContext, skew: float) -> DeliveryContext:
    """``ctx`` on a host whose clock is ``skew`` seconds off this one's."""
    ctx.clock = lambda: time.time() + skew
    return ctx


def _abandon_a_send(ns: LocalNamespace, settings: Settings, ctx: DeliveryContext, entity: str) -> DrainReport:
    """A first holder (this host's clock) delivers one message, then times out on the next five: it leaves
    an abandoned-send wait on the entity's path and gives the shard up."""
    with Producer(settings=settings) as p:
        p.send(entity, b"warm", partition_key="k")
        assert ShardDrainer(ctx, entity, 0).run(budget=10, idle_reads=1, block_ms=1).sent == 1
        ns.control.stall(delay=3.0, entity=entity)
        for i in range(5):
            p.send(entity, f"m{i}".encode(), partition_key="k")
    report = ShardDrainer(ctx, entity, 0).run(budget=10, idle_reads=1, block_ms=1)
    ns.control.restore(entity=entity)
    assert report.sent == 0 and report.retry_after is not None, report
    return report


def test_a_holder_whose_clock_runs_ahead_still_waits_out_an_inherited_abandoned_send_wait(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, abandoned_wait=20)
    first = _context(contexts, settings, "host-a")
    # Given a holder that abandoned a send to the entity: nothing newer may go there for 20 s
    _abandon_a_send(shared_namespace, settings, first, entity)
    abandoned_at = time.monotonic()
    # When the shard passes to a worker on a host whose clock runs 30 s ahead
    ahead = _skewed(_context(contexts, settings, "host-b"), SKEW)
    report = ShardDrainer(ahead, entity, 0).run(budget=5, idle_reads=1, block_ms=1)
    # Then it sends nothing there and waits for what is left of the 20 s, not for nothing
    left = 20 - (time.monotonic() - abandoned_at)
    assert report.sent == 0, report
    assert report.retry_after is not None and left - 2 <= report.retry_after <= 20, (report, left)
    # And a sweeper on that host does not queue a drain while the shard waits
    queued: list[tuple[str, int]] = []
    sweep(ahead, lambda e, s: queued.append((e, s)), lambda e: None)
    assert (entity, 0) not in queued


def test_a_holder_whose_clock_runs_behind_waits_no_longer_than_the_inherited_wait(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, abandoned_wait=5)
    first = _context(contexts, settings, "host-a")
    # Given a holder that abandoned a send to the entity: nothing newer goes there for 5 s
    _abandon_a_send(shared_namespace, settings, first, entity)
    abandoned_at = time.monotonic()
    # When the shard passes to a worker on a host whose clock runs 30 s behind
    behind = _skewed(_context(contexts, settings, "host-b"), -SKEW)
    report = ShardDrainer(behind, entity, 0).run(budget=5, idle_reads=1, block_ms=1)
    # Then it waits what is left of the 5 s, not 30 s more
    assert report.sent == 0 and report.retry_after is not None and report.retry_after <= 5, report
    # And once that passed, a sweeper on that host queues the drain, and the drain sends the five
    queued: list[tuple[str, int]] = []
    wait_until(
        lambda: bool(sweep(behind, lambda e, s: queued.append((e, s)), lambda e: None).drains),
        10,
        what="the sweeper queueing the waiting shard",
    )
    assert queued == [(entity, 0)] and time.monotonic() - abandoned_at < 5 + 3
    assert ShardDrainer(behind, entity, 0).run(budget=10, idle_reads=1, block_ms=1).sent == 5
