"""Drain tasks: the sweeper's fallback for a shard no drainer holds (see ``bridge.delivery.sweeper``)."""

from __future__ import annotations

from typing import Any

from bridge.delivery.context import get_context
from bridge.delivery.drainer import ShardDrainer
from workers.app import app, settings


@app.task(name="bridge.drain")
def drain(entity: str, shard: int) -> dict[str, Any]:
    """Send what shard ``shard`` of ``entity`` holds, in order, until empty or told to wait."""
    ctx = get_context(settings)
    ctx.retry.unmark_scheduled(entity, shard)
    report = ShardDrainer(ctx, entity, shard).run(budget=ctx.settings.workers.drain_budget)
    return report.__dict__
