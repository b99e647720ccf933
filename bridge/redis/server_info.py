"""What the Redis server says of its own durability and memory (``INFO``), for the status and metrics.

An acknowledgement is only as durable as the server's append-only file: an operator wants to see at once
that AOF is off, that its last write failed (disk full), or that memory is near ``maxmemory``. A Cluster
answers ``INFO`` per node and some managed caches refuse it: then nothing is reported (``None``), rather
than one node's view passed off as the whole.

Connection: any blocking client from ``bridge.redis.connection.sync_client``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import redis

from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis


@dataclass(frozen=True)
class ServerState:
    """The durability and memory figures of one Redis server."""

    role: str
    aof_enabled: bool
    aof_last_write_ok: bool
    used_memory: int
    maxmemory: int
    connected_replicas: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``redis`` in ``/status.json``)."""
        return asdict(self)


def server_state(client: SyncRedis) -> ServerState | None:
    """The server's state from one ``INFO``; None on a Cluster or where ``INFO`` is refused."""
    if is_cluster(client):
        return None
    with driver_errors():
        try:
            info: dict[str, Any] = client.info()
        except redis.exceptions.ResponseError:  # INFO renamed or disabled (some managed caches)
            return None
    return ServerState(
        role=str(info.get("role", "?")),
        aof_enabled=bool(int(info.get("aof_enabled", 0))),
        aof_last_write_ok=str(info.get("aof_last_write_status", "ok")) == "ok",
        used_memory=int(info.get("used_memory", 0)),
        maxmemory=int(info.get("maxmemory", 0)),
        connected_replicas=int(info.get("connected_slaves", 0)),
    )
