"""``ReceiverCounterStore``: the receiver counters of an entity (or subscription) in one Redis hash.

Every receiver process adds to the same hash (``HINCRBY``, one pipelined round trip per batch), so the
figures are the entity's, whichever process received what. ``read`` is what ``Receiver.counts`` reads;
``counts_read`` is the same read on the status snapshot's shared pipeline (``bridge.redis.pipelined``).
Connection: a blocking client from ``bridge.redis.connection.sync_client``; driver errors
leave as ``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.core.receiving import ReceiverCounts
from bridge.receiving.keys import ReceiverKeys
from bridge.redis.errors import driver_errors
from bridge.redis.pipelined import PipelinedRead
from bridge.redis.types import SyncRedis


def counts_read(entity: str, subscription: str | None = None) -> PipelinedRead[ReceiverCounts]:
    """The counters of ``entity`` (or its ``subscription``) as a read on a shared pipeline."""
    key = ReceiverKeys(entity, subscription).counts

    def parse(replies: Sequence[Any]) -> ReceiverCounts:
        return ReceiverCounts.from_fields(replies[0])

    return PipelinedRead(lambda pipe: pipe.hgetall(key), parse)


class ReceiverCounterStore:
    """Counters of one receiving scope."""

    def __init__(self, client: SyncRedis, keys: ReceiverKeys) -> None:
        self.client = client
        self.keys = keys

    def add(self, deltas: Mapping[str, int]) -> None:
        """Add ``deltas`` (``ReceiverCounts`` field names) to the counters."""
        items = [(name, value) for name, value in deltas.items() if value]
        if not items:
            return
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for name, value in items:
                pipe.hincrby(self.keys.counts, name, value)
            pipe.execute()

    def read(self) -> ReceiverCounts:
        """The counters (all zero when nothing was received yet)."""
        with driver_errors():
            return ReceiverCounts.from_fields(self.client.hgetall(self.keys.counts))
