"""A real Redis Cluster on loopback ports for the tests: three masters, each with a replica.

Every node is a ``redis-server`` child process (``bridge.embedded.redis_server.RedisServer``) with
``cluster-enabled``; ``redis-cli --cluster create`` assigns the slots and the replicas. Faults are real:
``kill_master`` is ``kill -9``, ``promote`` is ``CLUSTER FAILOVER TAKEOVER`` on the replica (what the
cluster does by itself after ``cluster-node-timeout``, without the wait), and ``cut_replication`` drops the
master-to-replica packets of one replication link with ``iptables`` so that writes a master acknowledges
never reach its replica (the "lagging replica" of a failover).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import redis

from bridge.embedded.ports import free_port
from bridge.embedded.redis_server import RedisServer

NODE_TIMEOUT_MS = 1000


@dataclass
class Shard:
    """One master and its replica (they swap roles after a promotion)."""

    master: RedisServer
    replica: RedisServer


class ClusterWithReplicas:
    """Three masters with a replica each; ``url`` is the bridge's ``redis+cluster://`` URL (all six)."""

    def __init__(self, full_coverage: bool = False, binary: str | None = None) -> None:
        self._stack = ExitStack()
        self.binary = binary
        """The server binary (None: Debian's ``redis-server``; a ``WAITAOF`` test names Valkey's)."""
        self.servers: list[RedisServer] = []
        # ``no`` as docs/durability.md recommends: the healthy masters serve while a dead one's slots wait
        # for its replica (``yes`` makes every node refuse every command meanwhile).
        self.full_coverage = "yes" if full_coverage else "no"

    def start(self) -> ClusterWithReplicas:
        """Start six nodes and create the cluster (``--cluster-replicas 1``)."""
        for _ in range(6):
            server = RedisServer(
                binary=self.binary,
                extra_args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    "--cluster-require-full-coverage",
                    self.full_coverage,
                    # The bus port defaults to port + 10000, past 65535 for a high free port: name one.
                    "--cluster-port",
                    str(free_port()),
                ),
            )
            self.servers.append(self._stack.enter_context(server))
        subprocess.run(
            ["redis-cli", "--cluster", "create", *self.addresses, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()
        self._wait_paired()
        return self

    def _wait_paired(self, timeout: float = 30.0) -> None:
        """Until every node knows three masters with a replica each (the replicas' ``CLUSTER REPLICATE``
        spreads by gossip after ``--cluster create`` returns) and every replica finished its first sync (a
        replica that never synced refuses to be promoted)."""
        deadline = time.monotonic() + timeout
        for server in self.servers:
            with contextlib.closing(self.admin(server)) as node:
                while True:
                    nodes = node.cluster("nodes").values()
                    masters = {i["node_id"] for i in nodes if "master" in i["flags"]}
                    followed = {i["master_id"] for i in nodes if "slave" in i["flags"]}
                    replication = node.info("replication")
                    synced = replication["role"] == "master" or replication.get("master_link_status") == "up"
                    if len(masters) == 3 and masters == followed and synced:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError("the replicas did not all join")
                    time.sleep(0.1)

    @property
    def addresses(self) -> list[str]:
        """``127.0.0.1:<port>`` of every node."""
        return [f"127.0.0.1:{server.port}" for server in self.servers]

    @property
    def url(self) -> str:
        """The bridge's URL for this cluster (every node a seed, so a dead one is no problem)."""
        return "redis+cluster://" + ",".join(self.addresses)

    def admin(self, server: RedisServer) -> redis.Redis:
        """A plain client of one node."""
        return redis.Redis(port=server.port, socket_timeout=5)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says ``cluster_state:ok`` and three masters serve all slots."""
        deadline = time.monotonic() + timeout
        while True:
            live = [s for s in self.servers if s.running]
            states = []
            for server in live:
                with contextlib.closing(self.admin(server)) as node:
                    try:
                        states.append(node.cluster("info").get("cluster_state"))
                    except redis.RedisError:
                        states.append("error")
            if states and all(state == "ok" for state in states):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"cluster not ok: {states}")
            time.sleep(0.1)

    def shard_of(self, key: str) -> Shard:
        """The master serving ``key``'s slot now, and a replica of it."""
        with contextlib.closing(self.admin(self._any_live())) as node:
            slot = int(node.cluster("keyslot", key))
            nodes = node.cluster("nodes")
        for address, info in nodes.items():
            flags = info["flags"]
            if "master" not in flags or "fail" in flags:
                continue
            if any(int(lo) <= slot <= int(hi) for lo, hi, *_ in info["slots"]):
                replica = next(
                    a
                    for a, i in nodes.items()
                    if i["master_id"] == info["node_id"] and "fail" not in i["flags"]
                )
                return Shard(self._by_address(address), self._by_address(replica))
        raise AssertionError(f"no master serves {key}")

    def masters(self) -> list[RedisServer]:
        """The live masters."""
        result = []
        for server in self.servers:
            if not server.running:
                continue
            with contextlib.closing(self.admin(server)) as node:
                if node.info("replication")["role"] == "master":
                    result.append(server)
        return result

    def kill_master(self, shard: Shard) -> None:
        """``kill -9`` the shard's master."""
        shard.master.kill()

    def hold_failover(self, shard: Shard) -> None:
        """The shard's replica does not take over by itself (``cluster-replica-no-failover``) until
        ``promote``: a failover as slow as the test needs."""
        with contextlib.closing(self.admin(shard.replica)) as node:
            node.config_set("cluster-replica-no-failover", "yes")

    def promote(self, shard: Shard, timeout: float = 30.0) -> None:
        """Make the replica the master now (``CLUSTER FAILOVER TAKEOVER``) and wait for a healthy cluster."""
        with contextlib.closing(self.admin(shard.replica)) as node:
            node.config_set("cluster-replica-no-failover", "no")
            node.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            deadline = time.monotonic() + timeout
            while node.info("replication")["role"] != "master":
                if time.monotonic() > deadline:
                    raise TimeoutError("the replica was not promoted")
                time.sleep(0.05)
        self.wait_ok(timeout)

    def replica_promoted(self, shard: Shard) -> bool:
        """True once the shard's replica is a master (promoted by the cluster or by ``promote``)."""
        with contextlib.closing(self.admin(shard.replica)) as node:
            try:
                return node.info("replication")["role"] == "master"
            except redis.RedisError:
                return False

    def wait_replicated(self, shard: Shard, timeout: float = 10.0) -> None:
        """Until the replica has every write its master made so far (``WAIT 1``)."""
        with contextlib.closing(self.admin(shard.master)) as node:
            assert int(node.execute_command("WAIT", 1, int(timeout * 1000))) >= 1, "replica not in sync"

    @contextlib.contextmanager
    def cut_replication(self, shard: Shard) -> Iterator[None]:
        """While inside, the master's writes never reach the replica: its packets on the replication link
        are dropped (``iptables``; needs root). Yields after the rule is in place. A master killed inside
        still has its kernel retransmit what its socket held once the rule is gone: promote the replica
        before leaving."""
        with contextlib.closing(self.admin(shard.master)) as node:
            links = node.client_list(_type="replica")
        assert links, "the master has no replica link"
        replica_port = links[0]["addr"].rpartition(":")[2]
        rule = [
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "--sport",
            str(shard.master.port),
            "--dport",
            replica_port,
            "-j",
            "DROP",
        ]
        subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True, timeout=10)
        try:
            yield
        finally:
            subprocess.run(["iptables", "-D", *rule], check=False, capture_output=True, timeout=10)

    def _any_live(self) -> RedisServer:
        return next(s for s in self.servers if s.running)

    def _by_address(self, address: str) -> RedisServer:
        port = int(address.split("@", maxsplit=1)[0].rpartition(":")[2])
        return next(s for s in self.servers if s.port == port)

    def close(self) -> None:
        """Stop every node and remove their data."""
        self._stack.close()

    def __enter__(self) -> ClusterWithReplicas:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def can_cut_links() -> bool:
    """True when ``iptables`` is usable here (root, and the tool installed)."""
    if shutil.which("iptables") is None:
        return False
    probe = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, timeout=10, check=False)
    return probe.returncode == 0
