"""What the Redis server says of its own durability, replication and memory (``INFO``), for the status and
metrics.

An acknowledgement is only as durable as the server's append-only file and, under ``ingress.durability =
"replicated"``, its replicas: an operator wants to see at once that AOF is off, that its last write failed
(disk full), that memory is near ``maxmemory``, which role the server has and how far each replica lags
(bytes of the replication stream not yet acknowledged, seconds since its last acknowledgement). A Cluster
answers ``INFO`` per node and some managed caches refuse it: then no server state is reported (``None``),
rather than one node's view passed off as the whole; a Cluster's replica lag is read from every master
(``cluster_replicas``), as each master confirms its own writes.

Connection: any blocking client from ``bridge.redis.connection.sync_client``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import redis

from bridge.redis.connection import is_cluster, topology
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis


@dataclass(frozen=True)
class ReplicaState:
    """One replica as its primary sees it."""

    address: str
    state: str
    lag_bytes: int
    lag_seconds: int


@dataclass(frozen=True)
class ServerState:
    """The durability and memory figures of one Redis server."""

    role: str
    aof_enabled: bool
    aof_last_write_ok: bool
    used_memory: int
    maxmemory: int
    connected_replicas: int
    replicas: tuple[ReplicaState, ...] = ()
    link_up: bool | None = None
    """A replica's link to its primary (None on a primary)."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``redis`` in ``/status.json``; the replicas a list, as JSON reads them back)."""
        return {**asdict(self), "replicas": [asdict(replica) for replica in self.replicas]}


def server_state(client: SyncRedis) -> ServerState | None:
    """The server's state from one ``INFO``; None on a Cluster or where ``INFO`` is refused."""
    if is_cluster(client):
        return None
    with driver_errors():
        try:
            info: dict[str, Any] = client.info()
        except redis.exceptions.ResponseError:  # INFO renamed or disabled (some managed caches)
            return None
    link = info.get("master_link_status")
    return ServerState(
        role=str(info.get("role", "?")),
        aof_enabled=bool(int(info.get("aof_enabled", 0))),
        aof_last_write_ok=str(info.get("aof_last_write_status", "ok")) == "ok",
        used_memory=int(info.get("used_memory", 0)),
        maxmemory=int(info.get("maxmemory", 0)),
        connected_replicas=int(info.get("connected_slaves", 0)),
        replicas=replicas(info),
        link_up=None if link is None else link == "up",
    )


def redis_section(client: SyncRedis) -> dict[str, Any] | None:
    """``redis`` of ``bridge status --json`` and ``/status.json``: the state and the topology."""
    state = server_state(client)
    if state is None:
        return None
    return {**state.as_dict(), "topology": topology(client)}


def cluster_replicas(client: SyncRedis) -> tuple[ReplicaState, ...] | None:
    """Every replica of every Cluster master, with its lag (``INFO replication`` of each master); None on a
    single server (``server_state`` has them) or where ``INFO`` is refused."""
    if not is_cluster(client):
        return None
    cluster: Any = client
    with driver_errors():
        try:
            per_node: Any = cluster.info("replication", target_nodes=cluster.PRIMARIES)
        except redis.exceptions.ResponseError:
            return None
    if not isinstance(per_node, dict) or "role" in per_node:  # one master answered for all
        per_node = {"": per_node}
    return tuple(replica for info in per_node.values() for replica in replicas(info))


def replicas(info: dict[str, Any]) -> tuple[ReplicaState, ...]:
    """The ``slaveN`` entries of ``INFO`` (redis-py parses each into a dict), with their lag."""
    offset = int(info.get("master_repl_offset", 0))
    out = []
    for index in range(int(info.get("connected_slaves", 0))):
        entry = info.get(f"slave{index}")
        if not isinstance(entry, dict):
            continue
        out.append(
            ReplicaState(
                address=f"{entry.get('ip', '?')}:{entry.get('port', '?')}",
                state=str(entry.get("state", "?")),
                lag_bytes=max(0, offset - int(entry.get("offset", 0))),
                lag_seconds=int(entry.get("lag", 0)),
            )
        )
    return tuple(out)
