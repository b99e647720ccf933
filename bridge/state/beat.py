"""Per-schedule firing claims of the beat processes (beat HA; the timing is ``bridge.core.beat``).

``BeatClaims.claim(name, interval, owner)`` is ``SET bridge:{beat}:fired:<name> <owner> NX PX <ttl>``:
True for the one beat that may send the schedule's task in this interval. Keys live under the ``{beat}``
hash tag, apart from every entity.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from bridge.core.beat import claim_ttl_ms
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis


def claim_key(name: str) -> str:
    """The marker of one schedule entry."""
    return "bridge:{beat}:fired:" + name


class BeatClaims:
    """Firing claims shared by every beat process."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def claim(self, name: str, interval: float, owner: str) -> bool:
        """True when ``owner`` may send schedule ``name`` now (no beat sent it in this interval)."""
        with driver_errors():
            return bool(self.client.set(claim_key(name), owner, nx=True, px=claim_ttl_ms(interval)))

    def holder(self, name: str) -> str | None:
        """Which beat sent schedule ``name`` last, while its claim lives."""
        with driver_errors():
            value = self.client.get(claim_key(name))
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)
