"""Sentinel end to end: every bridge process and Celery's broker follow the primary through a failover.

A primary, a replica and three Sentinels run as real processes (``bridge.embedded.sentinel``); ``bridge
serve``, a worker, a beat and a receiver are given only the ``redis+sentinel://`` URL. The primary is
killed (``kill -9``) in the middle of HTTP traffic; with ``ingress.durability = "replicated"`` every message
answered 202 must reach the receiver, and no process may need a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.sentinel import SentinelRedis
from bridge.embedded.stack import LocalStack, wait_until
from bridge.errors import ConfigurationError
from bridge.settings import Settings
from tests.integration.worker_support import FAST_SETTINGS, status_json
from workers.app import create_app
from workers.broker import celery_broker

pytestmark = pytest.mark.xdist_group("sentinel")

REPLICATED = {
    "BRIDGE_INGRESS__DURABILITY": "replicated",
    "BRIDGE_INGRESS__WAIT_REPLICAS": "1",
    "BRIDGE_INGRESS__WAIT_TIMEOUT": "1",
}


@pytest.fixture
def sentinel_redis(tmp_path: Path) -> Iterator[SentinelRedis]:
    group = SentinelRedis(tmp_path / "redis", password="s3cret:/@")
    try:
        yield group.start()
    finally:
        group.stop()


def test_celery_follows_the_sentinel_primary_and_never_a_default_redis(sentinel_redis: SentinelRedis) -> None:
    # Given: only a redis+sentinel:// URL (no celery_broker_url)
    app = create_app(Settings(redis_url=sentinel_redis.url))
    # When: a task is sent
    with app.connection_for_write() as connection:
        app.send_task("bridge.sweep", queue="ha-probe", connection=connection)
    # Then: it waits in the queue on the primary the Sentinels name (kombu read redis+sentinel:// as plain
    # Redis and wrote to localhost:6379 before)
    with sentinel_redis.client(sentinel_redis.primary()) as primary:
        assert primary.llen("ha-probe") == 1


def test_a_cluster_url_is_refused_as_celery_broker_unless_one_is_named() -> None:
    cluster = Settings(redis_url="redis+cluster://127.0.0.1:7000")
    with pytest.raises(ConfigurationError, match="celery_broker_url"):
        celery_broker(cluster)
    named = Settings(redis_url="redis+cluster://127.0.0.1:7000", celery_broker_url="redis://127.0.0.1:6390/1")
    assert celery_broker(named) == ("redis://127.0.0.1:6390/1", {})
    sentinel = Settings(redis_url="redis+sentinel://:p%40ss@h1:26379,h2:26380/svc/2")
    assert celery_broker(sentinel) == (
        "sentinel://:p%40ss@h1:26379/2;sentinel://:p%40ss@h2:26380/2",
        {"master_name": "svc"},
    )


class Traffic:
    """POSTs at a steady rate from a thread; remembers what was answered 202 and how many were refused."""

    def __init__(self, base: str, rate: float = 40.0) -> None:
        self.base = base
        self.rate = rate
        self.acked: list[str] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            index = 0
            while not self._stop.is_set():
                message_id = f"ha-{index}"
                index += 1
                try:
                    answer = client.post(
                        f"{self.base}/v1/entities/orders/messages",
                        json={"body": message_id, "message_id": message_id},
                    )
                except httpx.HTTPError:
                    self.refused += 1
                    continue
                if answer.status_code == 202:
                    assert answer.json()["durability"] == "replicated"
                    self.acked.append(message_id)
                else:
                    self.refused += 1
                self._stop.wait(1 / self.rate)


def test_a_primary_killed_mid_traffic_loses_no_acknowledged_message(tmp_path: Path) -> None:
    received = tmp_path / "received.txt"
    received.touch()
    stack = LocalStack(
        tmp_path / "stack",
        entities={"orders": {"replication": "passive"}},
        settings={**FAST_SETTINGS, **REPLICATED},
        redis_password="s3cret",
        ha=True,
    )
    try:
        stack.start()
        assert isinstance(stack.redis, SentinelRedis)
        ha = stack.redis
        stack.start_worker(concurrency=1)
        stack.start_beat()
        stack.start_bridge(
            "receiver",
            "receive",
            "orders",
            "--handler",
            "tests.integration.receiver_handlers:append_id",
            RX_TEST_IDS=str(received),
        )
        port = free_port()
        serve = stack.start_bridge("serve", "serve", "--port", str(port))
        assert wait_listening("127.0.0.1", port, 30), serve.log_tail()
        with Traffic(f"http://127.0.0.1:{port}") as traffic:
            wait_until(lambda: len(traffic.acked) >= 40, 30, what="traffic before the kill")
            # When: the primary dies mid-traffic; the Sentinels promote the replica
            old = ha.kill_primary()
            ha.wait_failover(old)
            # (the old primary comes back as a replica: until then no write can be replicated)
            ha.restart_node(old)
            before = len(traffic.acked)
            wait_until(lambda: len(traffic.acked) >= before + 40, 60, what="traffic after the failover")
        # Then: every acknowledged message reaches the receiver, and every process rode the failover
        acked = set(traffic.acked)

        def missing() -> set[str]:
            return acked - set(received.read_text().split())

        wait_until(lambda: not missing(), 90, interval=0.5, what="every acknowledged message received")
        print(f"sentinel failover: acknowledged={len(acked)} refused={traffic.refused}")
        dead = [proc.name for proc in stack.processes if not proc.running]
        assert dead == []
        # And: `bridge status` and the status page follow the Sentinel too, and show the new primary
        ha.wait_synced()
        report = status_json(stack)
        assert report["durability"] == {"mode": "replicated", "wait_replicas": 1, "wait_timeout": 1.0}
        assert report["redis"]["topology"] == "sentinel" and report["redis"]["role"] == "master"
        assert report["redis"]["connected_replicas"] == 1
        # (the node that is the replica now: the old primary, unless a loaded machine made the Sentinels
        # fail over once more, back to it)
        current = ha.primary()
        (replica,) = [node for node in ha.nodes if node is not current]
        assert report["redis"]["replicas"][0]["address"] == f"127.0.0.1:{replica.port}"
        page = httpx.get(f"http://127.0.0.1:{port}/status.json", timeout=10).json()
        assert page["redis"]["topology"] == "sentinel" and page["durability"]["mode"] == "replicated"
        assert traffic.refused >= 1  # the failover was not invisible: some sends were refused, none lost
    finally:
        stack.stop(timeout=2)
