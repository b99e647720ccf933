"""The whole bridge on one machine: a private Redis, two local namespaces, and bridge processes.

``bridge demo`` runs on it, and so do the end-to-end tests: every part is a real process (redis-server,
two ``bridge emulator``, ``bridge serve``, ``bridge worker``, ``bridge beat``) configured only through the
public ``BRIDGE_*`` environment, exactly as an operator would run them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from bridge.embedded.entra import EntraSetup
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.redis_server import RedisServer
from bridge.embedded.sentinel import SentinelRedis
from bridge.embedded.trust import STANDARD_PORT_ARGS, LocalTrust


class BridgeProcess:
    """One ``bridge <command>`` child process with its log file."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bridge.cli.main", *args],
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._terminated = False

    @property
    def running(self) -> bool:
        """True while alive."""
        return self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9`` the whole process group (Celery's pool children too)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the main process (Celery then stops its pool children itself), then SIGKILL the group."""
        self.terminate()
        self.finish(time.monotonic() + timeout)

    def terminate(self) -> None:
        """SIGTERM the main process once, without waiting (``finish`` waits)."""
        if self.running and not self._terminated:
            self._terminated = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)

    def finish(self, deadline: float) -> None:
        """Wait for the exit until ``deadline`` (``time.monotonic()``), then SIGKILL whatever is left."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        self.kill()

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the process's output (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class LocalStack:
    """Redis + primary + secondary namespaces, and bridge processes started on demand."""

    def __init__(
        self,
        base_dir: Path,
        entities: Mapping[str, Mapping[str, Any]] | None = None,
        settings: Mapping[str, str] | None = None,
        namespace_entities_file: Path | None = None,
        auto_create: bool = True,
        *,
        redis_password: str | None = None,
        entra: bool = False,
        standard_ports: bool = False,
        ha: bool = False,
    ) -> None:
        self.base_dir = base_dir
        base_dir.mkdir(parents=True, exist_ok=True)
        self.entities = dict(entities or {})
        self.extra_settings = dict(settings or {})
        # ``ha``: a primary, a replica and three Sentinels (``bridge.embedded.sentinel``), not one server.
        self.redis: RedisServer | SentinelRedis = (
            SentinelRedis(base_dir / "redis", password=redis_password)
            if ha
            else RedisServer(data_dir=base_dir / "redis", password=redis_password)
        )
        # Entra ID only (``bridge/embedded/entra.py``): one issuer, SAS refused by both namespaces.
        self.entra = EntraSetup(base_dir) if entra else None
        # SAS on the SDK's standard ports (``bridge/embedded/trust.py``); an Entra-only stack has its own.
        self.trust = self.entra.trust if self.entra else LocalTrust(base_dir) if standard_ports else None
        if self.entra is not None:
            primary_args = self.entra.primary_args()
        else:
            primary_args = STANDARD_PORT_ARGS if standard_ports else ()
        self.primary = LocalNamespace(
            "primary",
            data_dir=base_dir / "primary",
            auto_create=auto_create,
            entities_file=namespace_entities_file,
            extra_args=primary_args,
        )
        self.secondary = LocalNamespace(
            "secondary",
            data_dir=base_dir / "secondary",
            auto_create=auto_create,
            entities_file=namespace_entities_file,
            extra_args=self.entra.secondary_args() if self.entra else (),
        )
        self.processes: list[BridgeProcess] = []

    def start(self) -> LocalStack:
        """Start Redis and both namespaces (the two namespace processes start side by side)."""
        self.redis.start()
        self.primary.launch()
        self.secondary.launch()
        self.primary.wait_ready()
        self.secondary.wait_ready()
        if self.trust is not None:
            self.trust.write_bundle(self.primary, self.secondary)
        return self

    def env(self, **overrides: str) -> dict[str, str]:
        """The ``BRIDGE_*`` environment that points every bridge process at this stack."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
        env.update(
            {
                "BRIDGE_REDIS_URL": self.redis.url,
                "BRIDGE_PRIMARY__CONNECTION_STRING": self.primary.connection_string,
                "BRIDGE_PRIMARY__CERTIFICATE": self.primary.certificate,
                "BRIDGE_SECONDARY__CONNECTION_STRING": self.secondary.connection_string,
                "BRIDGE_SECONDARY__CERTIFICATE": self.secondary.certificate,
                "BRIDGE_ENTITIES": json.dumps(self.entities),
                "BRIDGE_LOG_JSON": "false",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.entra is not None:
            for key in [k for k in env if k.endswith("__CONNECTION_STRING")]:
                del env[key]
            env.update(self.entra.bridge_env(self.primary, self.secondary))
        env.update(self.extra_settings)
        env.update(overrides)
        return env

    def start_bridge(self, name: str, *args: str, **env_overrides: str) -> BridgeProcess:
        """Start ``bridge <args>`` with this stack's environment; its output goes to ``<name>.log``."""
        proc = BridgeProcess(name, list(args), self.env(**env_overrides), self.base_dir / f"{name}.log")
        self.processes.append(proc)
        return proc

    def start_worker(self, name: str = "worker", concurrency: int = 2, **env: str) -> BridgeProcess:
        """A Celery send worker (prefork)."""
        return self.start_bridge(
            name,
            "worker",
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--without-gossip",
            "--without-mingle",
            "-n",
            f"{name}@%h",
            **env,
        )

    def start_beat(self, name: str = "beat", **env: str) -> BridgeProcess:
        """A beat scheduler with its own schedule file."""
        return self.start_bridge(name, "beat", "--schedule", str(self.base_dir / f"{name}-schedule"), **env)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every process (bridge processes first), keep the data directories.

        The bridge processes are all asked to stop at once and get ``timeout`` seconds together: a worker
        finishing its work in hand takes seconds, and stopping them one after another added those up.
        """
        for proc in reversed(self.processes):
            proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in reversed(self.processes):
            proc.finish(deadline)
        self.processes.clear()
        for ns in (self.primary, self.secondary):
            ns.stop()
        self.redis.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def wait_until(predicate: Any, timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
