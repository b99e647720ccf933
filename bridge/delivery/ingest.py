"""Moving a Redis-door stream into the outbox: the work of one ingest task (``tasks.sweeper.ingest``).

The sweeper queues an ingest for an entity whose ingress stream (``bridge:{<entity>}:in``) has entries;
``ingest_entity`` moves them in rounds (``bridge.outbox.redis_door.move_ingress``: validate, write the good
ones to the outbox, quarantine the others, acknowledge) until the stream is empty or ``max_rounds`` is
reached, so one task never runs unbounded behind a producer that keeps writing. A round that fails leaves
its entries pending; the next ingest reclaims them, and the outbox's idempotency window keeps a repeated
move from storing anything twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bridge.delivery.context import DeliveryContext
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox


@dataclass
class IngestReport:
    """What one ingest task moved."""

    moved: int = 0
    duplicates: int = 0
    quarantined: int = 0

    def as_dict(self) -> dict[str, int]:
        """The task's JSON result."""
        return asdict(self)


def ingest_entity(ctx: DeliveryContext, entity: str, max_rounds: int = 100) -> IngestReport:
    """Move ``entity``'s Redis-door entries until none are left (or ``max_rounds`` rounds ran)."""
    ctx.retry.unmark_scheduled(entity, -1)
    outbox = SyncOutbox(ctx.redis, ctx.settings)
    totals = IngestReport()
    for _ in range(max_rounds):
        report = move_ingress(outbox, entity, consumer=ctx.identity, now=ctx.clock())
        totals.moved += report.moved
        totals.duplicates += report.duplicates
        totals.quarantined += report.quarantined
        if report.moved + report.duplicates + report.quarantined == 0:
            break
    return totals
