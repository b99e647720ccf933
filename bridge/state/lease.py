"""The drain leases of outbox shards: one consumer per (entity, shard) at a time, so keyed order holds.

Each is a ``bridge.redis.lease.Lease`` (owner-checked, expiring) on ``bridge:{E}:lease:<i>``; its holder's
``Fence`` (``bridge.redis.fence``) goes into the fenced scripts of the reader and the retry state. Named
leases (a syphon per backlog queue, beat, the journal roll) use ``Lease.named`` directly.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.errors import StateStoreUnavailableError
from bridge.redis.errors import driver_errors
from bridge.redis.fence import Fence
from bridge.redis.lease import RENEW, Lease
from bridge.redis.node_pipelines import Call, run_script_many
from bridge.redis.types import SyncRedis
from bridge.state import keys


class LeaseStore:
    """Drain leases of outbox shards: one consumer per (entity, shard) at a time, so keyed order holds."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def lease(self, entity: str, shard: int) -> Lease:
        """The drain lease of one shard."""
        return Lease(self.client, keys.shard_lease(entity, shard))

    @staticmethod
    def fence(entity: str, shard: int, token: str) -> Fence:
        """The fence of ``token``'s tenure on one shard (for fenced acknowledgements and backoff)."""
        return Fence(keys.shard_lease(entity, shard), token)

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

    def free(self, shards: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of ``shards`` whose lease nobody holds now (one pipelined round trip; a Cluster client
        splits it per node)."""
        if not shards:
            return []
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for entity, shard in shards:
                pipe.exists(keys.shard_lease(entity, shard))
            held = pipe.execute()
        return [ref for ref, exists in zip(shards, held, strict=True) if not exists]

    def renew_many(self, leases: Sequence[tuple[str, int, str]], ttl_ms: int) -> list[bool | None]:
        """Renew many ``(entity, shard, owner)`` leases with one pipelined round trip per Redis server
        (``bridge.redis.node_pipelines``: on a Cluster, one per master); per lease True when renewed, False
        when another owner holds it or it expired, None when its server did not answer (not confirmed: the
        lease's validity runs down). A process owning thousands of shards renewed them one round trip each,
        and under load that took longer than the TTL."""
        calls: list[Call] = [
            (keys.shard_lease(entity, shard), [owner, int(ttl_ms)]) for entity, shard, owner in leases
        ]
        replies = run_script_many(self.client, RENEW, calls)
        if replies and all(isinstance(reply, Exception) for reply in replies):
            raise StateStoreUnavailableError(f"lease renewal failed: {type(replies[0]).__name__}")
        return [None if isinstance(reply, Exception) else int(reply) == 1 for reply in replies]
