"""The whole stack on a Redis Cluster with replicas, a master killed (``kill -9``) mid-traffic.

Real parts: six ``redis-server`` processes in cluster mode (three masters, a replica each), Celery's broker on
a Redis of its own, two local namespaces, ``bridge serve``, ``bridge worker``, ``bridge beat`` (rolling the
journal), a ``bridge receive`` per entity, and ``bridge report`` (in this process, on the session's Spark).
The cluster promotes the replica by itself (``cluster-node-timeout`` of one second).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.embedded.stack import LocalStack, wait_until
from bridge.outbox import keys
from tests.integration.cluster_support import ClusterWithReplicas
from tests.integration.operations_support import start_serve
from tests.integration.receiver_handlers import CALLS
from tests.integration.receiver_support import FAST_RECEIVER, start_receiver
from tests.integration.worker_support import make_stack

__all__ = ["make_stack"]

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ENTITIES = {"orders": {"outbox_shards": 2}, "invoices": {}, "audit": {}}
RATE = 40
"""Messages per second over HTTP, spread over the entities."""
SECONDS = 6.0
KILL_AT = 2.0
REPLICATION_WINDOW = 1.0
"""Seconds before the kill within which an acknowledged message may be missing from the promoted replica."""


class Traffic:
    """Posts at a steady rate; a 503 is retried with the same message_id, as a producer does."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.acked: dict[str, tuple[str, float]] = {}
        self.refused = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        names = list(ENTITIES)
        started = time.monotonic()
        with httpx.Client(base_url=self.base, timeout=10) as http:
            n = 0
            while time.monotonic() - started < SECONDS:
                entity, message_id = names[n % len(names)], f"m{n}"
                while True:
                    body = {"body": f"n{n}", "message_id": message_id}
                    answer = http.post(f"/v1/entities/{entity}/messages", json=body)
                    if answer.status_code == 202:
                        self.acked[message_id] = (entity, time.monotonic())
                        break
                    assert answer.status_code == 503, answer.text
                    self.refused += 1
                    time.sleep(0.1)
                n += 1
                time.sleep(max(0.0, started + n / RATE - time.monotonic()))


def test_the_whole_stack_on_a_cluster_rides_out_a_master_killed_mid_traffic(
    spark: Any, make_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the whole stack on a Cluster with replicas
    with ClusterWithReplicas() as cluster:
        journal = tmp_path / "journal"
        stack: LocalStack = make_stack(
            ENTITIES,
            settings={
                "BRIDGE_REDIS_URL": cluster.url,
                "BRIDGE_JOURNAL__DIRECTORY": str(journal),
                "BRIDGE_JOURNAL__ROLL_INTERVAL": "1",
                "BRIDGE_WORKERS__RECLAIM_INTERVAL": "3",
                **FAST_RECEIVER,
            },
        )
        stack.extra_settings["BRIDGE_CELERY_BROKER_URL"] = stack.redis.url
        base = start_serve(stack)
        stack.start_worker(concurrency=1)
        stack.start_beat()
        env = stack.env(RX_TEST_CALLS_URL=stack.redis.url)
        for entity in ENTITIES:
            stack.processes.append(start_receiver(tmp_path, env, entity))
        victim = cluster.shard_of(keys.outbox("orders", 0))

        # When messages go in at a steady rate and the master of "orders" is killed mid-traffic
        traffic = Traffic(base)
        traffic.thread.start()
        time.sleep(KILL_AT)
        killed_at = time.monotonic()
        cluster.kill_master(victim)
        traffic.thread.join(SECONDS + 60)
        assert not traffic.thread.is_alive()
        wait_until(lambda: cluster.replica_promoted(victim), 30, what="the promotion")
        assert traffic.refused > 0, "the kill should have refused writes to the victim's entities for a while"

        # Then every acknowledged message is handled, except what the replica had not received at the kill
        calls = redis.Redis.from_url(stack.redis.url)

        def handled() -> set[str]:
            return {json.loads(raw)["id"] for raw in calls.lrange(CALLS, 0, -1)}

        def missing() -> set[str]:
            return set(traffic.acked) - handled()

        try:
            wait_until(lambda: not missing(), 60, what="every acknowledged message handled")
        except TimeoutError:
            late = {m: killed_at - traffic.acked[m][1] for m in missing()}
            assert all(0 <= age <= REPLICATION_WINDOW for age in late.values()), late
        lost = missing()

        # And one report reconciles it: nothing it saw accepted is lost
        for key, value in stack.env().items():
            if key.startswith("BRIDGE_"):
                monkeypatch.setenv(key, value)
        out = tmp_path / "report"
        result = CliRunner().invoke(app, ["report", "--out", str(out), "--json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["lost"] == 0, summary
        assert summary["accepted"] == len(traffic.acked) - len(lost), (summary, len(lost))
        calls.close()
