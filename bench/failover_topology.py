"""The Redis topologies the failover harness kills: Sentinel (primary + replica) and a Cluster with replicas.

Each topology starts a ``LocalStack`` (two local namespaces, ``bridge serve``, a worker, a beat and a
receiver that appends every MessageId it is handed to a file) on its Redis, and knows how to make its
replication link lag (``iptables`` drops the primary-to-replica packets, as the Cluster tests do; without
root it does nothing and says so) and how to ``kill -9`` the primary that serves the traffic and bring it
back as a replica after the promotion.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import redis

from bench.failover_scenarios import SENTINEL_SCENARIOS
from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import WAITAOF_VERSION, RedisServer, redis_server_binary
from bridge.embedded.sentinel import SentinelRedis
from bridge.embedded.stack import LocalStack, wait_until
from bridge.servicebus.admin import NamespaceAdmin
from tests.integration.cluster_support import ClusterWithReplicas, Shard, can_cut_links
from tests.integration.receiver_support import namespace

ENTITY = "orders"
SESSIONS = {"requires_session": True}
"""Order per key is Service Bus's order per session: the keys are sessions."""
FAST = {
    "BRIDGE_RETRY__RETRY_TOTAL": "0",
    "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
    "BRIDGE_RETRY__OUTBOX_BACKOFF_FACTOR": "0.2",
    "BRIDGE_RETRY__OUTBOX_BACKOFF_MAX": "1",
    "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
    "BRIDGE_WORKERS__LEASE_TTL": "8",
    "BRIDGE_WORKERS__RECLAIM_INTERVAL": "3",
    "BRIDGE_RECEIVER__MAX_WAIT": "1",
    "BRIDGE_LOG_LEVEL": "WARNING",
}


def durability_env(mode: str) -> dict[str, str]:
    """The ``BRIDGE_INGRESS__*`` settings of ``local`` or ``replicated`` (one replica, one second)."""
    return {
        "BRIDGE_INGRESS__DURABILITY": mode,
        "BRIDGE_INGRESS__WAIT_REPLICAS": "1" if mode == "replicated" else "0",
        "BRIDGE_INGRESS__WAIT_TIMEOUT": "1",
    }


@contextlib.contextmanager
def cut_link(primary: redis.Redis, primary_port: int) -> Iterator[bool]:
    """While inside, the primary's packets to its replica are dropped (``iptables``); yields whether the
    cut is in place (False without root)."""
    links = primary.client_list(_type="replica")
    if not links or not can_cut_links():
        yield False
        return
    replica_port = links[0]["addr"].rpartition(":")[2]
    rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(primary_port), "--dport", replica_port]
    subprocess.run(["iptables", "-I", *rule, "-j", "DROP"], check=True, capture_output=True, timeout=10)
    try:
        yield True
    finally:
        subprocess.run(["iptables", "-D", *rule, "-j", "DROP"], check=False, capture_output=True, timeout=10)


class Topology:
    """A stack on one Redis topology; ``kill`` fails the primary over, ``lagging`` lags its replica."""

    name = ""

    def __init__(self, base: Path, mode: str, scenario: str = "kill") -> None:
        self.base = base
        self.mode = mode
        self.scenario = scenario
        self.received = base / "received.txt"
        self.stack: LocalStack | None = None

    def start_processes(self, stack: LocalStack) -> str:
        """serve, worker, beat and the receiver on ``stack``; the HTTP door's base URL."""
        self.received.touch()
        self.stack = stack
        for ns in (stack.primary, stack.secondary):
            with NamespaceAdmin(namespace(ns)) as admin:
                admin.create_queue(ENTITY, requires_session=True)
        stack.start_worker(concurrency=1)
        stack.start_beat()
        handler = "tests.integration.receiver_handlers:append_id"
        stack.start_bridge(
            "receiver", "receive", ENTITY, "--handler", handler, RX_TEST_IDS=str(self.received)
        )
        port = free_port()
        serve = stack.start_bridge("serve", "serve", "--port", str(port))
        if not wait_listening("127.0.0.1", port, 60):
            raise SystemExit(f"bridge serve did not listen:\n{serve.log_tail()}")
        return f"http://127.0.0.1:{port}"

    def start(self) -> str:
        """Start everything; the HTTP door's base URL."""
        raise NotImplementedError

    def lagging(self) -> contextlib.AbstractContextManager[bool]:
        """A context in which the serving primary's replica receives nothing."""
        raise NotImplementedError

    def kill(self, rng: random.Random) -> str:
        """``kill -9`` the serving primary, wait for the promotion, restart it as a replica (Sentinel: as
        ``scenario`` says, ``bench.failover_scenarios``); a description."""
        raise NotImplementedError

    def outage(self, on: bool, both: bool = False) -> None:
        """Start or end an outage of the primary local Service Bus namespace, or of both (fault control)."""
        assert self.stack is not None
        for ns in (self.stack.primary, self.stack.secondary) if both else (self.stack.primary,):
            ns.control.outage() if on else ns.control.restore()

    def stop(self) -> None:
        """Stop every process this topology started."""
        if self.stack is not None:
            self.stack.stop(timeout=5)


class SentinelTopology(Topology):
    """A primary, a replica and three Sentinels (``bridge.embedded.sentinel``)."""

    name = "sentinel"

    def start(self) -> str:
        settings = {**FAST, **durability_env(self.mode)}
        stack = LocalStack(self.base / "stack", entities={ENTITY: SESSIONS}, settings=settings, ha=True)
        self.stack = stack
        stack.start()
        return self.start_processes(stack)

    @property
    def group(self) -> SentinelRedis:
        assert self.stack is not None and isinstance(self.stack.redis, SentinelRedis)
        return self.stack.redis

    def lagging(self) -> contextlib.AbstractContextManager[bool]:
        primary = self.group.primary()
        return cut_link(self.group.client(primary), primary.port)

    def kill(self, rng: random.Random) -> str:
        return SENTINEL_SCENARIOS[self.scenario](self.group, rng)


class ClusterTopology(Topology):
    """Three masters with a replica each; Celery's broker on a Redis of its own (the stack's)."""

    name = "cluster"

    def __init__(self, base: Path, mode: str, scenario: str = "kill") -> None:
        if scenario != "kill":
            raise SystemExit(f"--scenario {scenario} runs on Sentinel only")
        super().__init__(base, mode, scenario)
        # ``replicated`` needs WAITAOF on every master: the pinned Valkey rather than Debian's Redis 7.0.
        binary = redis_server_binary(WAITAOF_VERSION) if mode == "replicated" else None
        self.cluster = ClusterWithReplicas(binary=binary)

    def start(self) -> str:
        self.cluster.start()
        settings = {**FAST, **durability_env(self.mode), "BRIDGE_REDIS_URL": self.cluster.url}
        stack = LocalStack(
            self.base / "stack", entities={ENTITY: {**SESSIONS, "outbox_shards": 2}}, settings=settings
        )
        self.stack = stack
        stack.start()
        assert isinstance(stack.redis, RedisServer)
        stack.extra_settings["BRIDGE_CELERY_BROKER_URL"] = stack.redis.url
        return self.start_processes(stack)

    def victim(self) -> Shard:
        """The shard that serves the entity's first outbox shard (where the traffic goes)."""
        from bridge.outbox import keys

        return self.cluster.shard_of(keys.outbox(ENTITY, 0))

    def lagging(self) -> contextlib.AbstractContextManager[bool]:
        shard = self.victim()
        return cut_link(self.cluster.admin(shard.master), shard.master.port)

    def kill(self, rng: random.Random) -> str:
        shard = self.victim()
        self.cluster.kill_master(shard)
        wait_until(lambda: self.cluster.replica_promoted(shard), 60, what="the promotion")
        shard.master.start()
        self.cluster.wait_ok(60)
        return f"master :{shard.master.port} killed, :{shard.replica.port} promoted"

    def stop(self) -> None:
        super().stop()
        self.cluster.close()


TOPOLOGIES: dict[str, type[Topology]] = {"sentinel": SentinelTopology, "cluster": ClusterTopology}
