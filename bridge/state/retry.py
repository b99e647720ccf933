"""When and by whom an outbox shard may be drained: retry "not before" times and shard drain leases.

Both answer the send workers' question "may I drain this shard now?". After both namespaces failed, the
shard's entries stay in the outbox and the core's backoff says how long to wait; the time is stored here
(``set_not_before``) so that every worker and the sweeper respect it, not only the worker that failed. A
keyed shard must be drained in order, so only one consumer may hold it at a time: ``acquire`` takes an
owner-checked lease (``SET NX PX`` semantics, see ``lease.Lease``) that expires if its holder dies.

Times are epoch seconds chosen by the caller (the core takes ``now`` as an argument, never a clock).

Connection: any blocking client from ``bridge.outbox.connection.sync_client``; driver errors leave as
``OutboxUnavailableError``.
"""

from __future__ import annotations

from typing import Any

from bridge.core.hash_fields import decode_fields
from bridge.outbox.connection import driver_errors
from bridge.state import keys
from bridge.state.lease import Lease

__all__ = ["Lease", "RetryStore"]


class RetryStore:
    """Retry times and drain leases of outbox shards."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def set_not_before(self, entity: str, shard: int, at: float) -> None:
        """Do not drain ``shard`` of ``entity`` before ``at`` (replaces an earlier time)."""
        with driver_errors():
            self.client.hset(keys.not_before(entity), str(shard), repr(float(at)))

    def not_before(self, entity: str, shard: int) -> float | None:
        """The time before which the shard waits, None when it may be drained now."""
        with driver_errors():
            raw = self.client.hget(keys.not_before(entity), str(shard))
        return None if raw is None else float(raw)

    def all_not_before(self, entity: str) -> dict[int, float]:
        """Every waiting shard of the entity and its time (for the sweeper and ``bridge status``)."""
        with driver_errors():
            data = decode_fields(self.client.hgetall(keys.not_before(entity)))
        return {int(shard): float(at) for shard, at in data.items()}

    def clear(self, entity: str, shard: int) -> None:
        """The shard may be drained at once again (after a successful send)."""
        with driver_errors():
            self.client.hdel(keys.not_before(entity), str(shard))

    def lease(self, entity: str, shard: int) -> Lease:
        """The drain lease of one shard."""
        return Lease(self.client, keys.shard_lease(entity, shard))

    def acquire(self, entity: str, shard: int, owner: str, ttl: float) -> bool:
        """Become the shard's only consumer for ``ttl`` seconds; False while another owner holds it."""
        return self.lease(entity, shard).acquire(owner, ttl)

    def renew(self, entity: str, shard: int, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease; False when it expired or another owner holds it (stop draining)."""
        return self.lease(entity, shard).renew(owner, ttl)

    def release(self, entity: str, shard: int, owner: str) -> bool:
        """Give the shard up; refused (False) for anyone but the holder."""
        return self.lease(entity, shard).release(owner)

    def holder(self, entity: str, shard: int) -> str | None:
        """The shard's current consumer, None when free."""
        return self.lease(entity, shard).holder()
