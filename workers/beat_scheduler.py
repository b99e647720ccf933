"""``OncePerIntervalScheduler``: Celery beat that sends each schedule once per interval across beat processes.

Beat HA (``docs/paired.md``): two ``bridge beat`` processes may run. Before sending a due task, a beat claims
the schedule's marker in Redis (``bridge.state.beat``; timing in ``bridge.core.beat``); the loser skips
that firing. Every task is safe even when both send: the sweeper's per-shard "scheduled" markers and drain
leases stop duplicate drains, a ping is sent only when ``ping_due`` says so, and each backlog queue is
syphoned under its own lease. The claim only keeps two beats from doubling the work. When Redis cannot be
reached the beat sends anyway: a duplicate costs little, a missed ping or syphon delays recovery.

Schedules without a fixed interval (crontab) are sent unconditionally.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any

from celery.beat import ScheduleEntry, Scheduler

from bridge.errors import StateStoreUnavailableError
from bridge.redis.connection import sync_client
from bridge.state.beat import BeatClaims

logger = logging.getLogger(__name__)


def entry_interval(entry: ScheduleEntry) -> float | None:
    """The fixed interval of ``entry`` in seconds, None for schedules without one."""
    run_every = getattr(entry.schedule, "run_every", None)
    seconds = run_every.total_seconds() if run_every is not None else None
    return seconds if seconds else None


class OncePerIntervalScheduler(Scheduler):  # type: ignore[misc]  # celery is untyped
    """An in-memory beat scheduler whose firings are claimed in Redis first (see the module docstring).

    Not celery's ``PersistentScheduler``: the last-run times that it keeps in a local shelve file are not
    needed when Redis decides who fires, and two beats on one host would share (and corrupt) that file.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._claims: BeatClaims | None = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        super().__init__(*args, **kwargs)

    def claims(self) -> BeatClaims:
        """The Redis claims (connected on first use, in the beat process)."""
        if self._claims is None:
            from workers.app import settings  # loaded once, with the app this scheduler serves

            self._claims = BeatClaims(sync_client(settings.redis_url.get_secret_value()))
        return self._claims

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Send ``entry``'s task unless another beat already sent it in this interval."""
        interval = entry_interval(entry)
        if interval is not None:
            try:
                won = self.claims().claim(entry.name, interval, self.owner)
            except StateStoreUnavailableError as exc:
                logger.warning("beat claim for %s failed, sending anyway: %s", entry.name, exc)
                won = True
            if not won:
                logger.debug("%s was sent by another beat in this interval", entry.name)
                return
        super().apply_entry(entry, producer=producer)
