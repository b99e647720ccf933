"""What the Redis server says of its durability and memory, as the status and the metrics show it."""

from __future__ import annotations

import redis

from bridge.redis.server_info import server_state
from bridge.status.collector import families_from_snapshot


def test_the_server_state_follows_the_servers_aof_setting(redis_client: redis.Redis) -> None:
    before = redis_client.config_get("appendonly")["appendonly"]
    try:
        redis_client.config_set("appendonly", "no")
        off = server_state(redis_client)
        assert off is not None and off.aof_enabled is False and off.role == "master"
        assert off.used_memory > 0 and off.connected_replicas == 0
        redis_client.config_set("appendonly", "yes")
        on = server_state(redis_client)
        assert on is not None and on.aof_enabled is True and on.aof_last_write_ok is True
    finally:
        redis_client.config_set("appendonly", before)


def test_the_metrics_carry_the_servers_state() -> None:
    snapshot = {
        "entities": [],
        "redis": {
            "role": "master",
            "aof_enabled": False,
            "aof_last_write_ok": True,
            "used_memory": 1024,
            "maxmemory": 0,
            "connected_replicas": 1,
        },
    }
    values = {f.name: [s.value for s in f.samples] for f in families_from_snapshot(snapshot)}
    assert values["bridge_redis_aof_enabled"] == [0]
    assert values["bridge_redis_aof_last_write_ok"] == [1]
    assert values["bridge_redis_used_memory_bytes"] == [1024]
    assert values["bridge_redis_connected_replicas"] == [1]


def test_the_metrics_carry_each_replicas_lag() -> None:
    replica = {"address": "10.0.0.2:6379", "state": "online", "lag_bytes": 512, "lag_seconds": 3}
    single = {"entities": [], "redis": {**_SERVER, "replicas": [replica]}}
    cluster = {"entities": [], "redis": None, "cluster_replicas": [replica]}
    for snapshot in (single, cluster):
        families = {f.name: f.samples for f in families_from_snapshot(snapshot)}
        assert [(s.labels, s.value) for s in families["bridge_redis_replica_lag_bytes"]] == [
            ({"replica": "10.0.0.2:6379"}, 512)
        ]
        assert [s.value for s in families["bridge_redis_replica_lag_seconds"]] == [3]


_SERVER = {
    "role": "master",
    "aof_enabled": True,
    "aof_last_write_ok": True,
    "used_memory": 1024,
    "maxmemory": 0,
    "connected_replicas": 1,
}
