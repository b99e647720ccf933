"""The LockDuration of a backlog queue, which the syphon measures its message locks by (docs/paired.md).

Read with the administration client (Manage right); without it the syphon falls back on the locks' own
expiries, bounded by ``ASSUMED_LOCK`` (``bridge.paired.syphon``).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from bridge.core.outcomes import describe_error
from bridge.core.provisioning import BACKLOG_QUEUE
from bridge.errors import NamespaceError
from bridge.servicebus.admin import NamespaceAdmin
from bridge.settings import Settings

log = logging.getLogger(__name__)

ASSUMED_LOCK = (BACKLOG_QUEUE.lock_duration or timedelta(minutes=1)).total_seconds()
"""The LockDuration the bridge provisions backlog queues with: the bound when a queue's cannot be read."""


def queue_lock_duration(settings: Settings, queue: str) -> float | None:
    """The LockDuration of backlog queue ``queue`` in seconds (administration client, Manage right); None
    when it cannot be read."""
    if settings.secondary is None:
        return None
    try:
        with NamespaceAdmin(
            settings.secondary, role="secondary", retry_total=0, timeout=settings.retry.attempt_deadline
        ) as admin:
            props = admin.get_queue(queue)
    except NamespaceError as error:
        log.warning("cannot read the LockDuration of %s: %s", queue, describe_error(error))
        return None
    duration = getattr(props, "lock_duration", None)
    if not isinstance(duration, timedelta) or duration <= timedelta(0):
        return None
    return duration.total_seconds()
