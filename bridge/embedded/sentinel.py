"""A private Redis under Sentinel: one primary, its replicas and three Sentinels, each a real process.

``bridge up --ha`` and the failover tests run on it: kill the primary (``kill_primary``) and the Sentinels
promote a replica within seconds; the bridge's processes, given ``url`` (``redis+sentinel://``), follow
the new primary without a restart. ``restart_node`` brings a killed data node back; the Sentinels then
make it a replica of the new primary.

Data nodes run a server that speaks ``WAITAOF`` (Redis >= 7.2, or the pinned Valkey that
``scripts/bootstrap`` installs), with AOF, ``appendfsync always`` and no diskless-sync delay, so
``ingress.durability = "replicated"`` works on them. The Sentinels are the same binary in Sentinel mode.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.redis_server import WAITAOF_VERSION, RedisServer, redis_server_binary, stop_process
from bridge.errors import EmulatorError

SERVICE = "bridge"
"""The Sentinel service name of the primary (the path of the ``redis+sentinel://`` URL)."""
DOWN_AFTER_MS = 1000
"""How long the Sentinels wait on a silent primary before they call it down (Redis's default: 30 s)."""


class SentinelProcess:
    """One Sentinel: a server binary in Sentinel mode with its own config file (which it rewrites)."""

    def __init__(
        self, binary: str, data_dir: Path, primary_port: int, quorum: int, password: str | None = None
    ) -> None:
        self.binary = binary
        self.password = password
        self.data_dir = data_dir
        self.port = free_port()
        self.primary_port = primary_port
        self.quorum = quorum
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Write the config (first start only) and start; return once it listens."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "sentinel.conf"
        if not config.exists():
            config.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndir {self.data_dir}\n"
                f"logfile {self.data_dir / 'sentinel.log'}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                + (f'sentinel auth-pass {SERVICE} "{self.password}"\n' if self.password else "")
            )
            config.chmod(0o600)
        self._proc = subprocess.Popen(
            [self.binary, str(config), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not wait_listening("127.0.0.1", self.port, timeout):
            self.stop()
            raise EmulatorError(f"Sentinel did not listen on port {self.port} within {timeout}s")

    def stop(self) -> None:
        """SIGTERM, then force."""
        stop_process(self._proc)
        self._proc = None


class SentinelRedis:
    """A primary, ``replicas`` replicas and three Sentinels on free loopback ports under ``data_dir``."""

    def __init__(self, data_dir: Path, replicas: int = 1, password: str | None = None) -> None:
        self.data_dir = data_dir
        self.password = password
        self.binary = redis_server_binary(WAITAOF_VERSION)
        # A Sentinel-managed node must let a promoted replica's old primary follow it with the same password.
        auth = ("--masterauth", password) if password else ()
        self.nodes = [
            RedisServer(
                data_dir=data_dir / f"node-{index}",
                password=password,
                binary=self.binary,
                extra_args=("--repl-diskless-sync-delay", "0", "--hz", "100", *auth),
            )
            for index in range(1 + replicas)
        ]
        self.sentinels = [
            SentinelProcess(
                self.binary, data_dir / f"sentinel-{index}", self.nodes[0].port, quorum=2, password=password
            )
            for index in range(3)
        ]

    @property
    def url(self) -> str:
        """``redis+sentinel://[:password@]127.0.0.1:<s1>,...,127.0.0.1:<s3>/bridge/0``."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{auth}{hosts}/{SERVICE}/0"

    @property
    def running(self) -> bool:
        """True while at least one data node runs."""
        return any(node.running for node in self.nodes)

    def start(self, timeout: float = 30.0) -> SentinelRedis:
        """Start the primary, its replicas (synced) and the Sentinels (watching them)."""
        primary = self.nodes[0]
        primary.start()
        for node in self.nodes[1:]:
            node.extra_args = (*node.extra_args, "--replicaof", "127.0.0.1", str(primary.port))
            node.start()
        self.wait_synced(timeout)
        for sentinel in self.sentinels:
            sentinel.start()
        return self

    def client(self, node: RedisServer) -> redis.Redis:
        """A plain client of one data node (for tests and status)."""
        return redis.Redis(port=node.port, password=self.password, socket_timeout=2)

    def primary(self) -> RedisServer:
        """The data node that answers ``role:master`` now."""
        for node in self.nodes:
            if not node.running:
                continue
            with self.client(node) as client, contextlib.suppress(redis.exceptions.RedisError):
                if client.info("replication").get("role") == "master":
                    return node
        raise EmulatorError("no data node is a primary right now")

    def wait_synced(self, timeout: float = 30.0) -> None:
        """Return once every running replica's link to its primary is up and its AOF rewritten after the
        full sync (until then it confirms no ``WAITAOF``)."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            while node.running:
                with self.client(node) as client, contextlib.suppress(redis.exceptions.RedisError):
                    info = client.info()
                    if info.get("role") == "master" or (
                        info.get("master_link_status") == "up"
                        and not int(info["aof_rewrite_in_progress"]) + int(info["aof_rewrite_scheduled"])
                    ):
                        break
                if time.monotonic() > deadline:
                    raise EmulatorError(f"replica on port {node.port} did not sync within {timeout}s")
                time.sleep(0.05)

    def kill_primary(self) -> RedisServer:
        """``kill -9`` the current primary; returns it (``restart_node`` brings it back as a replica)."""
        node = self.primary()
        node.kill()
        return node

    def wait_failover(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until the Sentinels name another primary than ``old``; return it."""
        deadline = time.monotonic() + timeout
        probe = redis.Redis(port=self.sentinels[0].port, socket_timeout=2)
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(redis.exceptions.RedisError):
                    host_port: Any = probe.sentinel_get_master_addr_by_name(SERVICE)
                    port = int(host_port[1]) if host_port else old.port
                    if port != old.port:
                        return next(node for node in self.nodes if node.port == port)
                time.sleep(0.1)
        finally:
            probe.close()
        raise EmulatorError(f"the Sentinels did not fail over within {timeout}s")

    def restart_node(self, node: RedisServer) -> None:
        """Start a killed data node again on its port and data, as a replica of the current primary.

        The Sentinels would turn it into one by themselves, but only seconds after it answers as a primary.
        """
        current = self.primary()
        args = list(node.extra_args)
        if "--replicaof" in args:
            at = args.index("--replicaof")
            del args[at : at + 3]
        node.extra_args = (*args, "--replicaof", "127.0.0.1", str(current.port))
        node.start()

    def stop(self) -> None:
        """Stop the Sentinels, then the data nodes (data directories stay)."""
        for sentinel in self.sentinels:
            sentinel.stop()
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> SentinelRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
