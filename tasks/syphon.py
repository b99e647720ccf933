"""The syphon beat task of paired mode (see ``bridge.paired.syphon_run``)."""

from __future__ import annotations

from typing import Any

from bridge.delivery.context import get_context
from bridge.paired.syphon_run import run_syphon
from workers.app import app, settings


@app.task(name="bridge.syphon")
def syphon() -> dict[str, Any]:
    """One bounded syphon run over the backlog queues whose leases are free."""
    return run_syphon(get_context(settings)).summary()
