"""The sweeper: the safety net that makes sure no outbox entry is stranded, whatever happened to its drainer.

Shards are drained by their owners (``bridge.delivery.service``), which read an entry as soon as it is
written. The sweeper (a beat task, every ``workers.sweep_interval``) only looks for what they miss: a shard
with entries, *no lease holder* and no pending backoff gets a bounded drain task — a worker process died
and no survivor has taken its shard yet, an entity no drainer has seen yet, or workers run a pool without
drainers. A shard with a holder costs the sweep one ``EXISTS``; its holder claims whatever a dead consumer
left pending when it takes the shard, so the sweeper claims nothing itself. The Redis door's ingress
stream gets an ingest task when it has entries. A short "scheduled" marker per shard keeps two sweepers
(two beat processes) from flooding the queue with duplicate tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bridge.delivery.context import DeliveryContext
from bridge.outbox.discovery import door_entities
from bridge.outbox.layout import LayoutStore

SCHEDULE_MARK_MS = 3_000


@dataclass
class SweepReport:
    """What one sweep found and did."""

    drains: list[tuple[str, int]] = field(default_factory=list)
    ingests: list[str] = field(default_factory=list)


def known_entities(ctx: DeliveryContext) -> list[str]:
    """Entities from the settings, every entity in the outbox's entity set, and every entity with a
    Redis-door stream (found by a bounded scan: ``bridge.outbox.discovery``), named in the settings or not."""
    doors = door_entities(ctx.redis, ctx.settings.workers.discover_interval)
    return sorted(set(ctx.settings.entities) | set(ctx.reader.entities()) | set(doors))


def sweep(
    ctx: DeliveryContext,
    drain: Callable[[str, int], None],
    ingest: Callable[[str], None],
) -> SweepReport:
    """One pass over all shards; ``drain``/``ingest`` enqueue the tasks."""
    report = SweepReport()
    layouts = LayoutStore(ctx.redis)
    for entity in known_entities(ctx):
        # A changed ``outbox_shards`` becomes a migration that keeps every key's order (bridge.core.layout).
        layouts.follow_settings(entity, ctx.settings.entity(entity).outbox_shards)
        if ctx.reader.ingress_length(entity) and ctx.retry.mark_scheduled(entity, -1, SCHEDULE_MARK_MS):
            ingest(entity)
            report.ingests.append(entity)
        unowned = ctx.leases.free([(entity, shard) for shard in range(ctx.reader.shards(entity))])
        for _, shard in unowned:
            if ctx.reader.shard_length(entity, shard) == 0:
                continue
            if ctx.retry.backoff_left(entity, shard):  # seconds left on Redis's clock, not this host's
                continue
            if ctx.retry.mark_scheduled(entity, shard, SCHEDULE_MARK_MS):
                drain(entity, shard)
                report.drains.append((entity, shard))
    return report
