"""The sweeper: makes sure no outbox entry is stranded, whatever happened to the trigger that should have
sent it.

Every run (a beat task, about once a second) looks at every known entity's shards: a shard with entries,
no live drainer lease and no pending backoff gets a drain task; pending entries idle for longer than a
lease are claimed away from their dead consumer (``XAUTOCLAIM``) so the next drainer finds them; the Redis
door's ingress stream gets an ingest task when it has entries. A short "scheduled" marker per shard keeps
two sweepers (two beat processes) from flooding the queue with duplicate drains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bridge.delivery.context import DeliveryContext

SCHEDULE_MARK_MS = 3_000


@dataclass
class SweepReport:
    """What one sweep found and did."""

    drains: list[tuple[str, int]] = field(default_factory=list)
    ingests: list[str] = field(default_factory=list)
    reclaimed: int = 0


def known_entities(ctx: DeliveryContext) -> list[str]:
    """Entities from the settings plus every entity that ever had an outbox write."""
    return sorted(set(ctx.settings.entities) | set(ctx.reader.entities()))


def sweep(
    ctx: DeliveryContext,
    drain: Callable[[str, int], None],
    ingest: Callable[[str], None],
) -> SweepReport:
    """One pass over all shards; ``drain``/``ingest`` enqueue the tasks."""
    report = SweepReport()
    now = ctx.clock()
    for entity in known_entities(ctx):
        ctx.reader.ensure_groups(entity)
        if ctx.reader.ingress_length(entity) and ctx.retry.mark_scheduled(entity, -1, SCHEDULE_MARK_MS):
            ingest(entity)
            report.ingests.append(entity)
        for shard in range(ctx.reader.shards(entity)):
            if ctx.reader.shard_length(entity, shard) == 0:
                continue
            if ctx.leases.holder(entity, shard) is not None:
                continue
            lease_ms = int(ctx.settings.workers.lease_ttl * 1000)
            report.reclaimed += ctx.reader.reclaim_shard(entity, shard, "sweeper", lease_ms)
            not_before = ctx.retry.not_before(entity, shard)
            if not_before is not None and not_before > now:
                continue
            if ctx.retry.mark_scheduled(entity, shard, SCHEDULE_MARK_MS):
                drain(entity, shard)
                report.drains.append((entity, shard))
    return report
