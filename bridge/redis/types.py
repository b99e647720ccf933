"""The client types every Redis adapter accepts, so ``mypy --strict`` checks the calls made on them.

A URL names a single server, a Sentinel-managed primary or a Cluster (``bridge.redis.connection``); the
first two are ``redis.Redis``, the last ``RedisCluster``. Adapters take the union and stay within the
commands both offer (the cluster refuses a few, such as ``EVALSHA`` in a pipeline; ``is_cluster`` says
which one a caller has).
"""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

SyncRedis: TypeAlias = redis.Redis | redis.cluster.RedisCluster
"""A blocking client from ``bridge.redis.connection.sync_client``."""

AsyncRedis: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
"""An asyncio client from ``bridge.redis.connection.async_client``."""

AnyRedis: TypeAlias = SyncRedis | AsyncRedis
"""Either kind (for helpers that only inspect the client, such as ``is_cluster``)."""
