"""An owner-checked lease on one Redis key: at most one holder at a time, and a dead holder's lease expires.

Used for "one consumer per keyed outbox shard" (``LeaseStore``), "at most one syphon per backlog queue" and
beat high availability. The holder is a string the caller chooses (e.g. ``<host>:<pid>:<uuid>``); every
operation is a Lua script that compares it first, so a process whose lease expired and was taken over can
neither renew nor release the new holder's lease (the classic ``GET`` then ``DEL`` race). The TTL is the
longest a crashed holder blocks others; renew well inside it (a third is customary). TTLs are whole
milliseconds, as ``SET ... PX`` takes them.

Connection: any blocking client from ``bridge.outbox.connection.sync_client``; driver errors leave as
``OutboxUnavailableError``.
"""

from __future__ import annotations

from typing import Any

from bridge.outbox.connection import driver_errors
from bridge.state import keys, scripts


def _checked(ttl_ms: int) -> int:
    # PX 0 or a negative PX is an error in Redis, and a fraction would be refused as "not an integer".
    if int(ttl_ms) != ttl_ms or ttl_ms <= 0:
        raise ValueError("a lease TTL must be a positive whole number of milliseconds")
    return int(ttl_ms)


class Lease:
    """A lease on ``key``; ``Lease.named`` builds one from a name in the ``bridge:{lease:<name>}`` space."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key

    @classmethod
    def named(cls, client: Any, name: str) -> Lease:
        """The lease called ``name`` (e.g. ``syphon:<backlog queue path>``, ``beat``)."""
        return cls(client, keys.lease(name))

    def acquire(self, owner: str, ttl_ms: int) -> bool:
        """Take the lease for ``ttl_ms``; True when ``owner`` holds it now (re-acquiring refreshes it)."""
        args: list[str | int] = [owner, _checked(ttl_ms)]
        with driver_errors():
            return int(scripts.run(self.client, scripts.LEASE_ACQUIRE, [self.key], args)) == 1

    def renew(self, owner: str, ttl_ms: int) -> bool:
        """Extend the lease to ``ttl_ms`` from now; False when ``owner`` no longer holds it."""
        args: list[str | int] = [owner, _checked(ttl_ms)]
        with driver_errors():
            return int(scripts.run(self.client, scripts.LEASE_RENEW, [self.key], args)) == 1

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


class LeaseStore:
    """Drain leases of outbox shards: one consumer per (entity, shard) at a time, so keyed order holds."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def lease(self, entity: str, shard: int) -> Lease:
        """The drain lease of one shard."""
        return Lease(self.client, keys.shard_lease(entity, shard))

    def acquire(self, entity: str, shard: int, owner: str, ttl_ms: int) -> bool:
        """Become the shard's only consumer for ``ttl_ms``; False while another owner holds it."""
        return self.lease(entity, shard).acquire(owner, ttl_ms)

    def renew(self, entity: str, shard: int, owner: str, ttl_ms: int) -> bool:
        """Extend ``owner``'s lease; False when it expired or another owner holds it (stop draining)."""
        return self.lease(entity, shard).renew(owner, ttl_ms)

    def release(self, entity: str, shard: int, owner: str) -> bool:
        """Give the shard up; refused (False) for anyone but the holder."""
        return self.lease(entity, shard).release(owner)

    def holder(self, entity: str, shard: int) -> str | None:
        """The shard's current consumer, None when free."""
        return self.lease(entity, shard).holder()
