"""Send workers on a real Redis Cluster of three masters with a replica each.

Every part is real: six ``redis-server`` processes in cluster mode, two local namespaces, ``bridge
worker`` processes (Celery, prefork) whose broker is a Redis of its own (a Cluster cannot be a Celery
broker). Faults are ``kill -9`` of a master and the promotion of its replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bridge.embedded.stack import LocalStack, wait_until
from bridge.outbox import keys as outbox_keys
from bridge.producer import Producer
from bridge.redis.connection import sync_client
from bridge.settings import Settings
from bridge.state import keys as state_keys
from tests.integration.cluster_support import ClusterWithReplicas, can_cut_links
from tests.integration.worker_support import make_stack, receive_all

__all__ = ["make_stack"]

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

ENTITIES = {f"c{i}": {"outbox_shards": 2} for i in range(4)}


@pytest.fixture
def cluster() -> Iterator[ClusterWithReplicas]:
    with ClusterWithReplicas() as started:
        yield started


def cluster_stack(make_stack: Any, cluster: ClusterWithReplicas, **settings: str) -> LocalStack:
    """A stack whose outbox and state live on ``cluster``; its own Redis is only Celery's broker."""
    stack: LocalStack = make_stack(ENTITIES, settings={"BRIDGE_REDIS_URL": cluster.url, **settings})
    stack.extra_settings["BRIDGE_CELERY_BROKER_URL"] = stack.redis.url
    return stack


def holders(client: Any) -> dict[tuple[str, int], bytes | None]:
    """Who holds each shard's drain lease now."""
    return {
        (entity, shard): client.get(state_keys.shard_lease(entity, shard))
        for entity in ENTITIES
        for shard in range(2)
    }


def test_leases_are_renewed_on_a_cluster_and_delivery_goes_on(make_stack: Any, cluster: ClusterWithReplicas):
    # Given a worker on the Cluster with a 3 s lease TTL (renewed every second)
    stack = cluster_stack(make_stack, cluster, BRIDGE_WORKERS__LEASE_TTL="3")
    worker = stack.start_worker(concurrency=1)
    settings = Settings(redis_url=cluster.url, entities=ENTITIES)
    client = sync_client(cluster.url)
    sent: dict[str, list[str]] = {entity: [] for entity in ENTITIES}
    with Producer(settings=settings) as producer:
        for entity in ENTITIES:
            sent[entity] += producer.send_batch(entity, [b"first"] * 5)
        first = wait_until(
            lambda: all(holders(client).values()) and holders(client), 60, what="every lease held"
        )
        # When it runs for four TTLs with traffic all along
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            for entity in ENTITIES:
                sent[entity] += producer.send_batch(entity, [b"more"] * 2)
            time.sleep(0.25)
            now = holders(client)
            # Then no lease ever lapsed or changed hands: each was renewed by its first holder
            assert now == first, f"a lease lapsed or moved: {first} -> {now}\n{worker.log_tail()}"
    # And everything sent was delivered
    for entity, ids in sent.items():
        got = receive_all(stack.primary, entity, len(ids), timeout=60)
        assert {m.message_id for m in got} == set(ids)
    assert "not renewed" not in worker.log_tail(100_000)
    client.close()


def pending(client: Any, entity: str) -> int:
    """Entries of the entity's one shard read by a drainer and not acknowledged (-1: no group yet)."""
    try:
        return int(client.xpending(outbox_keys.outbox(entity, 0), outbox_keys.SENDERS_GROUP)["pending"])
    except redis.exceptions.ResponseError:
        return -1


@pytest.mark.skipif(not can_cut_links(), reason="cutting a replication link needs iptables (root)")
def test_acknowledgements_a_failover_lost_are_claimed_again(make_stack: Any, cluster: ClusterWithReplicas):
    # Given a worker whose lease outlives the test, and an entity whose entries are pending under it (its
    # namespace is down), with the replica holding all of that
    entity = "stuck"
    stack: LocalStack = make_stack(
        {entity: {"replication": "none"}},
        settings={
            "BRIDGE_REDIS_URL": cluster.url,
            "BRIDGE_WORKERS__LEASE_TTL": "120",
            "BRIDGE_WORKERS__RECLAIM_INTERVAL": "3",
        },
    )
    stack.extra_settings["BRIDGE_CELERY_BROKER_URL"] = stack.redis.url
    worker = stack.start_worker(concurrency=1)
    settings = Settings(redis_url=cluster.url, entities={entity: {"replication": "none"}})
    client = sync_client(cluster.url)
    shard = cluster.shard_of(outbox_keys.outbox(entity, 0))
    stack.primary.control.outage()
    with Producer(settings=settings) as producer:
        ids = producer.send_batch(entity, [f"m{i}" for i in range(20)])
    wait_until(lambda: pending(client, entity) == 20, 60, what="the entries pending under the worker")
    holder = client.get(state_keys.shard_lease(entity, 0))
    cluster.wait_replicated(shard)
    # When they are delivered and acknowledged on the master while its replica hears nothing, and the
    # master is killed and the replica promoted
    with cluster.cut_replication(shard):
        stack.primary.control.restore()
        wait_until(lambda: pending(client, entity) == 0, 60, what="the acknowledgements on the master")
        cluster.kill_master(shard)
        # Promoted before the link is restored: the dead master's kernel still retransmits what its socket
        # held, and with the rule gone the replica would receive the acknowledgements after all
        cluster.promote(shard)
    client.close()
    client = sync_client(cluster.url)
    assert pending(client, entity) == 20, "the promoted replica should have missed the acknowledgements"
    # Then the worker, still holding its lease, claims them again: every entry is delivered, none pending
    wait_until(lambda: pending(client, entity) == 0, 30, what=f"no entry pending\n{worker.log_tail()}")
    assert client.get(state_keys.shard_lease(entity, 0)) == holder
    assert client.xlen(outbox_keys.outbox(entity, 0)) == 0
    got = receive_all(stack.primary, entity, 40, timeout=30)
    assert {m.message_id for m in got} == set(ids)
    client.close()
