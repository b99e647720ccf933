"""Which outbox shard a message goes to (``docs/architecture.md``), keyed like a partitioned entity.

The outbox of an entity is split into ``shards`` streams so several send workers can drain it in parallel
while order is kept where it matters: every message with the same key lands in the same shard. The key is
the SessionId, else the PartitionKey, else the MessageId when the entity requires duplicate detection.
Messages without a key are spread round-robin and skip a shard that is unavailable (availability over
order); a keyed message whose shard is unavailable is refused, for that key only.

The hash is CRC-32 of the key's UTF-8 bytes: stable across processes, Python versions and languages, so a
worker written in anything else can compute the same shard.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection

from bridge.core.envelope import Envelope
from bridge.errors import PartitionUnavailableError


def partition_key(envelope: Envelope, requires_duplicate_detection: bool) -> str | None:
    """SessionId, else PartitionKey, else MessageId when the entity deduplicates; ``None`` for no key."""
    if envelope.session_id is not None:
        return envelope.session_id
    if envelope.partition_key is not None:
        return envelope.partition_key
    if requires_duplicate_detection:
        return envelope.message_id
    return None


def shard_of_key(key: str, shards: int) -> int:
    """The shard of a key: CRC-32 of its UTF-8 bytes modulo ``shards``."""
    return zlib.crc32(key.encode()) % shards


def choose_shard(key: str | None, shards: int, round_robin: int, unavailable: Collection[int] = ()) -> int:
    """The shard for one message.

    ``round_robin`` is the caller's counter (any int; the caller advances it), used only when ``key`` is
    ``None``. ``unavailable`` lists shards that must not receive writes right now.
    """
    if shards < 1:
        raise ValueError("an outbox has at least one shard")
    if key is not None:
        shard = shard_of_key(key, shards)
        if shard in unavailable:
            raise PartitionUnavailableError(f"outbox shard {shard} for this partition key is unavailable")
        return shard
    for step in range(shards):
        shard = (round_robin + step) % shards
        if shard not in unavailable:
            return shard
    raise PartitionUnavailableError("every outbox shard is unavailable")
