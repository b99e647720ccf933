"""Opening the outbox's Redis: the client every user of the outbox (the ingress, the ``Producer``) gets.

The URL forms (single server, Sentinel, Cluster; TLS) and the client options are
``bridge.redis.connection``'s; this is the outbox's one door to them, so that code above the outbox reaches
Redis only through it (``tests/unit/test_layering.py``). ``SyncRedis`` and ``AsyncRedis`` are the types of
what it returns.
"""

from __future__ import annotations

from bridge.redis.connection import async_client, sync_client
from bridge.redis.types import AsyncRedis, SyncRedis


def open_sync(url: str) -> SyncRedis:
    """A blocking client of ``url`` for ``SyncOutbox`` (and the outbox's other blocking readers)."""
    return sync_client(url)


def open_async(url: str) -> AsyncRedis:
    """An asyncio client of ``url`` for ``AsyncOutbox`` and ``AsyncOutboxView``."""
    return async_client(url)


__all__ = ["AsyncRedis", "SyncRedis", "open_async", "open_sync"]
