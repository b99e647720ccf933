"""The outbox on a real 3-node Redis Cluster on loopback ports (hash tags keep an entity in one slot)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import redis
from redis.cluster import RedisCluster

from bridge import AsyncProducer, Producer
from bridge.embedded.ports import free_port
from bridge.embedded.redis_server import RedisServer
from bridge.errors import BackpressureError
from bridge.outbox import keys
from bridge.outbox.reader import OutboxReader
from bridge.redis.connection import sync_client
from bridge.settings import Settings
from tests.integration.ingress_support import read_all

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    with ExitStack() as stack:
        servers = [
            # The cluster bus port defaults to port + 10000, which fails for high free ports: pick one.
            stack.enter_context(
                RedisServer(
                    extra_args=(
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                        "--cluster-port",
                        str(free_port()),
                    )
                )
            )
            for _ in range(3)
        ]
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        probe = redis.Redis(port=servers[0].port)
        deadline = time.monotonic() + 20
        while probe.cluster("info").get("cluster_state") != "ok":
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not become ok")
            time.sleep(0.1)
        probe.close()
        yield "redis+cluster://" + ",".join(addresses)


def _slot_owners(client: RedisCluster, entity: str) -> set[str]:
    names = [
        keys.outbox(entity, 0),
        keys.outbox(entity, 1),
        keys.stats(entity),
        keys.message_id_prefix(entity) + "1",
        keys.quarantine(entity),
    ]
    return {client.get_node_from_key(name).name for name in names}


def test_entities_spread_over_nodes_but_each_stays_in_one_slot(cluster_url: str):
    client = sync_client(cluster_url)
    entities = [f"entity-{i}" for i in range(12)]
    owners = set()
    for entity in entities:
        nodes = _slot_owners(client, entity)
        assert len(nodes) == 1
        owners |= nodes
    assert len(owners) == 3
    client.close()


def test_producer_reader_round_trip_on_the_cluster(cluster_url: str):
    settings = Settings(
        redis_url=cluster_url,
        entities={f"c{i}": {"outbox_shards": 2} for i in range(6)},
        ingress={"max_total_messages": 10_000},
    )
    with Producer(settings=settings) as producer:
        sent = {f"c{i}": producer.send_batch(f"c{i}", [f"m{j}" for j in range(5)]) for i in range(6)}
        # idempotent on the cluster too
        assert producer.send("c0", "again", message_id=sent["c0"][0]) == sent["c0"][0]
    reader = OutboxReader(sync_client(cluster_url), settings)
    for entity, ids in sent.items():
        reader.ensure_groups(entity)
        entries = read_all(reader, entity, "worker")
        assert sorted(e.envelope.message_id for e in entries if e.envelope) == sorted(ids)
        assert reader.depth(entity)["pending_messages"] == 5
        for shard in (0, 1):
            reader.ack(entity, shard, [e.entry_id for e in entries if e.shard == shard])
        assert reader.depth(entity)["pending_messages"] == 0
    totals = reader.client.hgetall(keys.TOTALS)
    assert int(totals[b"messages"]) == 0


def test_async_producer_on_the_cluster(cluster_url: str):
    settings = Settings(redis_url=cluster_url)

    async def scenario() -> list[str]:
        async with AsyncProducer(settings=settings) as producer:
            return await producer.send_batch("async-cluster", ["a", "b"])

    ids = asyncio.run(scenario())
    client = sync_client(cluster_url)
    assert client.xlen(keys.outbox("async-cluster", 0)) == 2
    assert len(ids) == 2
    client.close()


def test_total_bound_on_the_cluster_is_kept_outside_the_entity_slot(cluster_url: str):
    client = sync_client(cluster_url)
    client.delete(keys.TOTALS)
    settings = Settings(redis_url=cluster_url, ingress={"max_total_messages": 3})
    with Producer(settings=settings) as producer:
        producer.send_batch("bound-a", ["1", "2"])
        producer.send("bound-b", "3")
        with pytest.raises(BackpressureError):
            producer.send("bound-c", "4")
    assert client.exists(keys.outbox("bound-c", 0)) == 0
    client.delete(keys.TOTALS)
    client.close()
