"""Reading an outbox shard in tests the way a drainer does: under the shard's drain lease, through the
fenced scripts (``OutboxReader.read_fenced`` / ``claim_fenced``), never around them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bridge.outbox.reader import OutboxEntry, OutboxReader
from bridge.redis.fence import Fence
from bridge.state.lease import LeaseStore

LEASE_MS = 60_000


@contextmanager
def shard_lease(reader: OutboxReader, entity: str, shard: int, owner: str = "test") -> Iterator[Fence]:
    """Hold the shard's drain lease for the block, as a drainer's tenure does, and give its fence; released
    after (as the lease of a holder that died expires)."""
    leases = LeaseStore(reader.client)
    token = f"{owner}:{uuid.uuid4().hex[:8]}"
    assert leases.acquire(entity, shard, token, LEASE_MS), f"shard {shard} of {entity} is held by another"
    try:
        yield leases.fence(entity, shard, token)
    finally:
        leases.release(entity, shard, token)


def read_new(
    reader: OutboxReader, entity: str, shard: int, consumer: str, count: int = 100
) -> list[OutboxEntry]:
    """New entries of one shard for ``consumer``, oldest first (they stay pending under its name)."""
    with shard_lease(reader, entity, shard, consumer) as fence:
        return reader.read_fenced(entity, shard, consumer, fence, count).entries


def read_all(reader: OutboxReader, entity: str, consumer: str, count: int = 100) -> list[OutboxEntry]:
    """New entries of every shard of ``entity`` for ``consumer`` (what the drainers read, shard by shard)."""
    return [
        entry
        for shard in range(reader.shards(entity))
        for entry in read_new(reader, entity, shard, consumer, count)
    ]
