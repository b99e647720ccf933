"""The probe beat task: measure the namespaces that carry no traffic (see ``bridge.delivery.probe``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bridge.delivery.context import get_context
from bridge.delivery.probe import probe_standbys
from workers.app import app, settings


@app.task(name="bridge.probe")
def probe() -> dict[str, Any]:
    """Probe the passive backups and active-mode namespaces of every known entity whose probe is due."""
    ctx = get_context(settings)
    entities = sorted(set(ctx.settings.entities) | set(ctx.reader.entities()))
    return asdict(probe_standbys(ctx, entities))
