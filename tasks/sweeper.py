"""The sweeper beat task (the safety net behind the drainers) and the Redis-door ingest task."""

from __future__ import annotations

from typing import Any

from bridge.delivery.context import get_context
from bridge.delivery.ingest import ingest_entity
from bridge.delivery.sweeper import sweep
from tasks.drain import drain
from workers.app import app, settings


@app.task(name="bridge.sweep")
def sweep_outboxes() -> dict[str, Any]:
    """Queue drains for shards with work and no drainer, and ingests for Redis-door streams with entries."""
    report = sweep(get_context(settings), drain.delay, ingest.delay)
    return {"drains": len(report.drains), "ingests": len(report.ingests)}


@app.task(name="bridge.ingest")
def ingest(entity: str, max_rounds: int = 100) -> dict[str, int]:
    """Validate Redis-door entries of ``entity``: good ones into the outbox, bad ones to quarantine."""
    return ingest_entity(get_context(settings), entity, max_rounds).as_dict()
