"""The ping beat task of paired mode (see ``bridge.paired.ping``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bridge.delivery.context import get_context
from bridge.paired.ping import ping_failed_over
from workers.app import app, settings


@app.task(name="bridge.ping")
def ping() -> dict[str, Any]:
    """Ping every failed-over paired entity that is due; an accepted ping makes it available again."""
    return asdict(ping_failed_over(get_context(settings)))
