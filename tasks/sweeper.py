"""The sweeper beat task and the Redis-door ingest task."""

from __future__ import annotations

from typing import Any

from bridge.delivery.context import get_context
from bridge.delivery.sweeper import sweep
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox
from tasks.drain import drain
from workers.app import app


@app.task(name="bridge.sweep")
def sweep_outboxes() -> dict[str, Any]:
    """Schedule drains for shards with work and ingest tasks for Redis-door streams with entries."""
    ctx = get_context()
    report = sweep(ctx, drain.delay, ingest.delay)
    return {"drains": len(report.drains), "ingests": len(report.ingests), "reclaimed": report.reclaimed}


@app.task(name="bridge.ingest")
def ingest(entity: str, max_rounds: int = 100) -> dict[str, int]:
    """Validate Redis-door entries of ``entity``: good ones into the outbox, bad ones to quarantine."""
    ctx = get_context()
    ctx.retry.unmark_scheduled(entity, -1)
    outbox = SyncOutbox(ctx.redis, ctx.settings)
    totals = {"moved": 0, "duplicates": 0, "quarantined": 0}
    for _ in range(max_rounds):
        report = move_ingress(outbox, entity, consumer=ctx.identity, now=ctx.clock())
        totals["moved"] += report.moved
        totals["duplicates"] += report.duplicates
        totals["quarantined"] += report.quarantined
        if report.moved + report.duplicates + report.quarantined == 0:
            break
    return totals
