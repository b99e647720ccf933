"""``ingress.durability = "replicated"`` on a Redis Cluster: each master confirms the writes it took.

Real parts: six Valkey processes (three masters, a replica each; Valkey speaks ``WAITAOF``), the real
ingress served by uvicorn, the unmodified producer; a replica is frozen with ``SIGSTOP`` (connected, but it
confirms nothing), so only the entities of its master are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from bridge import Producer
from bridge.embedded.redis_server import WAITAOF_VERSION, redis_server_binary
from bridge.errors import DurabilityNotReachedError
from bridge.outbox import keys
from bridge.redis.connection import sync_client
from bridge.redis.server_info import cluster_replicas
from bridge.settings import Settings
from tests.integration.cluster_support import ClusterWithReplicas, Shard
from tests.integration.ingress_support import running_ingress

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180), pytest.mark.xdist_group("durability-cluster")]

REPLICATED = {"durability": "replicated", "wait_replicas": 1, "wait_timeout": 0.3}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterWithReplicas]:
    with ClusterWithReplicas(binary=redis_server_binary(WAITAOF_VERSION)) as started:
        yield started


@pytest.fixture
def settings(cluster: ClusterWithReplicas) -> Settings:
    for master in cluster.masters():
        with contextlib.closing(cluster.admin(master)) as node:
            node.flushall()
    return Settings(redis_url=cluster.url, ingress=REPLICATED)


def _two_entities(cluster: ClusterWithReplicas) -> tuple[str, str, Shard]:
    """An entity on one master (the victim's, returned with it) and an entity on another master."""
    victim = cluster.shard_of(keys.outbox("e0", 0))
    other = next(
        f"e{i}" for i in range(1, 99) if cluster.shard_of(keys.outbox(f"e{i}", 0)).master is not victim.master
    )
    return "e0", other, victim


@contextlib.contextmanager
def frozen(cluster: ClusterWithReplicas, shard: Shard) -> Iterator[None]:
    """SIGSTOP the shard's replica until the block ends, then wait until it confirms again."""
    with contextlib.closing(cluster.admin(shard.replica)) as node:
        pid = int(node.info("server")["process_id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        with contextlib.closing(cluster.admin(shard.master)) as master:
            deadline = time.monotonic() + 30
            master.set("{e0}confirming", "1")
            while master.execute_command("WAITAOF", 1, 1, 200) != [1, 1]:
                assert time.monotonic() < deadline, "the replica never confirmed again"
                master.set("{e0}confirming", "1")


def test_replicated_on_a_cluster_acknowledges_what_each_master_confirmed(
    cluster: ClusterWithReplicas, settings: Settings
) -> None:
    first, second, _ = _two_entities(cluster)
    with Producer(settings=settings) as producer:
        for entity in (first, second):
            assert producer.send(entity, "one", message_id=f"{entity}-1") == f"{entity}-1"
            assert producer.durability == "replicated"
    with running_ingress(settings) as base:
        answer = httpx.post(f"{base}/v1/entities/{first}/messages", json={"body": "x", "message_id": "h1"})
    assert answer.status_code == 202, answer.text
    assert answer.headers["x-bridge-durability"] == "replicated; replicas=1"
    # Then: each entity's replica holds its entries the moment the sender holds the acknowledgement
    for entity, ids in ((first, [b"e0-1", b"h1"]), (second, [f"{second}-1".encode()])):
        with contextlib.closing(cluster.admin(cluster.shard_of(keys.outbox(entity, 0)).replica)) as replica:
            replica.execute_command("READONLY")  # a Cluster replica serves reads only when asked to
            assert [fields[b"id"] for _, fields in replica.xrange(keys.outbox(entity, 0))] == ids


def test_a_master_whose_replica_confirms_nothing_refuses_only_its_entities(
    cluster: ClusterWithReplicas, settings: Settings
) -> None:
    victim_entity, other_entity, victim = _two_entities(cluster)

    async def post_both(base: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(f"/v1/entities/{entity}/messages", json={"body": "x", "message_id": "m1"})
                        for entity in (victim_entity, other_entity)
                    )
                )
            )

    with running_ingress(settings) as base:
        with frozen(cluster, victim):
            refused, accepted = asyncio.run(post_both(base))
            with Producer(settings=settings) as producer:
                with pytest.raises(DurabilityNotReachedError) as caught:
                    producer.send(victim_entity, "y", message_id="p1")
                assert producer.send(other_entity, "y", message_id="p1") == "p1"
        again = httpx.post(
            f"{base}/v1/entities/{victim_entity}/messages", json={"body": "x", "message_id": "m1"}
        )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "durability_not_reached"
    assert refused.json()["error"]["durability"]["confirmed_replicas"] == 0
    assert accepted.status_code == 202, accepted.text
    assert caught.value.confirmed == 0
    # A retry once the replica is back is confirmed, and not stored twice
    assert again.status_code == 202, again.text
    assert again.json()["duplicate"] is True
    with contextlib.closing(cluster.admin(victim.master)) as master:
        assert master.xlen(keys.outbox(victim_entity, 0)) == 2


def test_a_re_posted_duplicate_on_a_cluster_is_confirmed_not_waved_through(
    cluster: ClusterWithReplicas, settings: Settings
) -> None:
    victim_entity, _, victim = _two_entities(cluster)
    with frozen(cluster, victim):
        with Producer(settings=settings) as producer, pytest.raises(DurabilityNotReachedError):
            producer.send(victim_entity, "one", message_id="d1")
        # A fresh producer's connection wrote nothing: only the fence makes its confirmation wait
        with Producer(settings=settings) as other, pytest.raises(DurabilityNotReachedError):
            other.send(victim_entity, "one", message_id="d1")
    with Producer(settings=settings) as producer:
        assert producer.send(victim_entity, "one", message_id="d1") == "d1"
    with redis.Redis(port=victim.master.port) as master:
        assert master.xlen(keys.outbox(victim_entity, 0)) == 1


def test_the_lag_of_every_masters_replica_is_reported(
    cluster: ClusterWithReplicas, settings: Settings
) -> None:
    victim_entity, _, victim = _two_entities(cluster)
    client = sync_client(cluster.url)
    try:
        healthy = cluster_replicas(client)
        assert healthy is not None and len(healthy) == 3
        # Given: every replica caught up (a replica acknowledges once a second: the writes of the test
        # before can still count as lag for up to that long)
        deadline = time.monotonic() + 10
        while any(r.lag_bytes >= 1000 for r in cluster_replicas(client) or []):
            assert time.monotonic() < deadline, "the replicas never caught up"
            time.sleep(0.1)
        with contextlib.closing(cluster.admin(victim.replica)) as node:
            frozen_port = int(node.config_get("port")["port"])
        with frozen(cluster, victim):
            with contextlib.closing(cluster.admin(victim.master)) as master:
                master.set(keys.fence(victim_entity), "x" * 1000)
            lagging = cluster_replicas(client)
        assert lagging is not None
        lag = {int(r.address.rpartition(":")[2]): r.lag_bytes for r in lagging}
        assert lag[frozen_port] >= 1000
        # the others lag at most a ping or two (a replica acknowledges once a second)
        assert all(value < 1000 for value in sorted(lag.values())[:2])
    finally:
        client.close()
