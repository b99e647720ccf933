"""An owner-checked lease on one Redis key: at most one holder at a time, and a dead holder's lease expires.

Used for "one consumer per keyed outbox shard" (``RetryStore``), "at most one syphon per backlog queue" and
beat high availability. The holder is a string the caller chooses (e.g. ``<host>:<pid>:<uuid>``); every
operation is a Lua script that compares it first, so a process whose lease expired and was taken over can
neither renew nor release the new holder's lease (the classic ``GET`` then ``DEL`` race). The TTL is the
longest a crashed holder blocks others; renew well inside it (a third is customary).

Connection: any blocking client from ``bridge.outbox.connection.sync_client``; driver errors leave as
``OutboxUnavailableError``.
"""

from __future__ import annotations

from typing import Any

from bridge.outbox.connection import driver_errors
from bridge.state import keys, scripts


def ttl_ms(ttl: float) -> int:
    """``ttl`` seconds as whole milliseconds, at least 1 (``PX 0`` is an error in Redis)."""
    if ttl <= 0:
        raise ValueError("a lease TTL must be positive")
    return max(1, round(ttl * 1000))


class Lease:
    """A lease on ``key``; ``Lease.named`` builds one from a name in the ``bridge:{lease:<name>}`` space."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key

    @classmethod
    def named(cls, client: Any, name: str) -> Lease:
        """The lease called ``name`` (e.g. ``syphon:<backlog queue path>``, ``beat``)."""
        return cls(client, keys.lease(name))

    def acquire(self, owner: str, ttl: float) -> bool:
        """Take the lease for ``ttl`` seconds; True when ``owner`` holds it now (re-acquiring refreshes)."""
        with driver_errors():
            return int(scripts.run(self.client, scripts.LEASE_ACQUIRE, [self.key], [owner, ttl_ms(ttl)])) == 1

    def renew(self, owner: str, ttl: float) -> bool:
        """Extend the lease to ``ttl`` seconds from now; False when ``owner`` no longer holds it."""
        with driver_errors():
            return int(scripts.run(self.client, scripts.LEASE_RENEW, [self.key], [owner, ttl_ms(ttl)])) == 1

    def release(self, owner: str) -> bool:
        """Give the lease up; False (and nothing deleted) when ``owner`` does not hold it."""
        with driver_errors():
            return int(scripts.run(self.client, scripts.LEASE_RELEASE, [self.key], [owner])) == 1

    def holder(self) -> str | None:
        """Who holds the lease now, None when free."""
        with driver_errors():
            value = self.client.get(self.key)
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)
