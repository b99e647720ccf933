"""Redis's clock in another process: ``TIME``, sampled now and then, carried forward monotonically.

Every epoch time the delivery side stores for *another* process to compare with its own "now" — a paired
entity's failover timer and last ping, a namespace's last probe, a backlog queue's removal from the
rotation, a role swap, a namespace's health — is taken from ``RedisClock``, the delivery context's clock
(``bridge.delivery.context``). Two workers on hosts whose clocks disagree then still agree on how long ago
such a time was: both read Redis's clock. (Waits that must never come out shorter — the shard backoff and
the abandoned-send wait — go further: their scripts read ``TIME`` themselves, ``bridge.state.retry``.)

How: one ``TIME`` (round trip measured on ``time.monotonic``) gives the server's time at the middle of the
round trip; later readings add the monotonic seconds since. A reading is off Redis's clock by at most half
that round trip plus the monotonic clock's rate error since the sample (parts per million); it is sampled
again every ``resync`` seconds (default 60). ``error`` is the half round trip of the last sample.

Never raises, and only the one thread that samples waits for the round trip (the others answer from the
last sample meanwhile): a failed resync keeps the last sample (the monotonic clock carries it forward fine)
until the next one; a clock that never reached Redis answers with the host's clock (``host``, default
``time.time``) and tries again at most once a second, so a process that cannot reach Redis — and so can
write nothing another process reads — still runs. On a Cluster, ``TIME`` goes to one node; the nodes of a
cluster are assumed to keep time together, as Redis's own key expiry across a failover assumes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from bridge.errors import StateStoreUnavailableError
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis

log = logging.getLogger(__name__)

RESYNC = 60.0
"""Seconds between two ``TIME`` samples of one clock."""
RETRY = 1.0
"""Seconds between two tries of a clock that never reached Redis."""


def server_time(client: SyncRedis) -> float:
    """Redis's ``TIME`` as epoch seconds (one round trip); ``StateStoreUnavailableError`` when unreachable."""
    with driver_errors():
        seconds, micros = client.time()
    return int(seconds) + int(micros) / 1_000_000


class RedisClock:
    """A callable like ``time.time`` that answers Redis's time (see the module docstring)."""

    def __init__(
        self,
        client: SyncRedis,
        *,
        resync: float = RESYNC,
        monotonic: Callable[[], float] = time.monotonic,
        host: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.resync = resync
        self.monotonic = monotonic
        self.host = host
        self.error: float | None = None
        """Half the round trip of the last sample (seconds); None before the first one."""
        self._lock = threading.Lock()
        self._base: tuple[float, float] | None = None  # (server time, monotonic time) of the last sample
        self._next_sample = float("-inf")

    def __call__(self) -> float:
        # One thread samples; the others meanwhile answer from the last sample (never wait for a round trip).
        if self.monotonic() >= self._next_sample and self._lock.acquire(blocking=False):
            try:
                if self.monotonic() >= self._next_sample:
                    self._sample()
            finally:
                self._lock.release()
        base = self._base
        if base is None:
            return self.host()
        server, at = base
        return server + (self.monotonic() - at)

    def _sample(self) -> None:
        started = self.monotonic()
        try:
            server = server_time(self.client)
        except StateStoreUnavailableError as error:
            # Without a sample yet, try again soon; with one, it carries on fine until the next resync.
            self._next_sample = self.monotonic() + (RETRY if self._base is None else self.resync)
            log.info(
                "Redis's clock not sampled (%s): %s",
                "last sample kept" if self._base else "host clock",
                error,
            )
            return
        ended = self.monotonic()
        self._base = (server, (started + ended) / 2)
        self.error = (ended - started) / 2
        self._next_sample = ended + self.resync
