"""The HTTP door on a Redis Cluster whose master dies: only the entities in its slots wait.

Real parts: six ``redis-server`` processes (three masters, a replica each), the real ingress served by
uvicorn, ``kill -9`` of the master that also holds the bridge's global keys (the ``{bridge}`` slot: the
entity set and the Cluster totals), and the cluster's own failover to its replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from bridge.embedded.stack import wait_until
from bridge.outbox import keys
from bridge.settings import Settings
from tests.integration.cluster_support import ClusterWithReplicas
from tests.integration.ingress_support import running_ingress

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

OUTAGE = 6.0
"""Seconds the dead master's slots go unserved (a production cluster's promotion takes 5-10 s)."""


@pytest.fixture
def cluster() -> Iterator[ClusterWithReplicas]:
    with ClusterWithReplicas() as started:
        yield started


@pytest.mark.parametrize("global_keys", [True, False], ids=["bridge-slot-master", "other-master"])
def test_a_dead_master_stalls_only_the_entities_in_its_slots(cluster: ClusterWithReplicas, global_keys: bool):
    # Given entities on every master, and the victim the master of the bridge's global keys (or another)
    victim = cluster.shard_of(keys.TOTALS)
    if not global_keys:
        others = (cluster.shard_of(keys.outbox(f"v{i}", 0)) for i in range(99))
        victim = next(shard for shard in others if shard.master is not victim.master)
    names = [f"e{i}" for i in range(30)]
    on_victim = [n for n in names if cluster.shard_of(keys.outbox(n, 0)).master is victim.master]
    healthy = [n for n in names if n not in on_victim]
    assert on_victim and len(healthy) >= 4
    settings = Settings(redis_url=cluster.url)
    with running_ingress(settings) as base, httpx.Client(base_url=base, timeout=30) as http:

        def post(entity: str, body: str) -> httpx.Response:
            return http.post(f"/v1/entities/{entity}/messages", json={"body": body})

        for entity in names:
            assert post(entity, "before").status_code == 202
        # When the victim is killed and its replica takes over only after OUTAGE seconds
        cluster.hold_failover(victim)
        cluster.kill_master(victim)
        refused: list[str] = []
        accepted = 0
        deadline = time.monotonic() + OUTAGE
        while time.monotonic() < deadline:
            for entity in healthy:
                answer = post(entity, "during")
                if answer.status_code == 202:
                    accepted += 1
                else:
                    refused.append(f"{entity}: {answer.status_code} {answer.text}")
        cluster.promote(victim)
        # Then every write to an entity on a healthy master was accepted all along
        assert not refused, f"{len(refused)} refused, {accepted} accepted: {refused[:5]}"
        # And the victim's entities are written again once the replica serves their slots
        wait_until(
            lambda: all(post(e, "after").status_code == 202 for e in on_victim), 30, what="victim back"
        )
