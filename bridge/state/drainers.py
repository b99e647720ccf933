"""The registry of live drainers: how many worker processes share the outbox shards right now.

Every drainer (one per worker process, on any host) calls ``heartbeat`` about once a second; the reply is
the number of drainers alive, which gives each its fair share of shards
(``bridge.core.shard_assignment``). A member is alive until its last heartbeat's TTL passes, measured on
the Redis server's clock (``TIME``), so hosts with skewed clocks agree. A drainer that stops cleanly
``leave``s at once; one that is killed drops out when its TTL passes. The set is a sorted set under the
``{bridge}`` tag (``bridge.state.keys.drainers``), one member per drainer, so it stays as small as the
fleet.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from bridge.redis.errors import driver_errors
from bridge.redis.scripts import LuaScript, run_script
from bridge.redis.types import SyncRedis
from bridge.state import keys

# KEYS: registry. ARGV: member, ttl_ms. Reply: live members, this one included.
HEARTBEAT = LuaScript(
    """#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
"""
)


class DrainerRegistry:
    """Heartbeats of drainers and their count."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def heartbeat(self, member: str, ttl_ms: int) -> int:
        """``member`` is alive for ``ttl_ms`` more; returns how many drainers are alive (at least 1)."""
        with driver_errors():
            return int(run_script(self.client, HEARTBEAT, [keys.drainers()], [member, int(ttl_ms)]))

    def leave(self, member: str) -> None:
        """``member`` stops: the others take over its share at their next heartbeat."""
        with driver_errors():
            self.client.zrem(keys.drainers(), member)
