"""Local Service Bus namespaces as child processes (``bridge emulator --json``).

Each namespace is its own process, so an outage can be real: ``kill()`` is ``kill -9``, ``stop()`` a clean
shutdown, ``restart()`` starts again on the same port and data directory (messages survive when
``persistent``). ``control`` drives the fault interface (outage, busy, stall, blackhole, disaster).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bridge.emulator.control_client import ControlClient
from bridge.errors import EmulatorError


@dataclass(frozen=True)
class NamespaceEndpoints:
    """What ``bridge emulator --json`` prints: how clients reach the namespace."""

    connection_string: str
    management_endpoint: str
    certificate: str
    control_url: str
    amqps_ports: str | None = None
    identity_endpoint: str | None = None
    identity_header: str | None = None
    authority: str | None = None
    tenant_id: str | None = None
    federated_tokens: str | None = None


class LocalNamespace:
    """One ``bridge emulator`` child process with its own port, key and data directory."""

    def __init__(
        self,
        name: str = "primary",
        *,
        entities_file: Path | None = None,
        persistent: bool = True,
        auto_create: bool = False,
        data_dir: Path | None = None,
        key: str | None = None,
        log_level: str = "WARNING",
        extra_args: tuple[str, ...] = (),
        idle_timeouts: tuple[float, float] | None = None,
    ) -> None:
        self.name = name
        self.entities_file = entities_file
        self.persistent = persistent
        self.auto_create = auto_create
        self._owns_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=f"bridge-ns-{name}-"))
        self.key = key or secrets.token_urlsafe(24)
        self.log_level = log_level
        # More ``bridge emulator`` options, e.g. ``("--disable-local-auth", "--identity-dir", DIR)``.
        self.extra_args = extra_args
        self.idle_timeouts = idle_timeouts  # (link, connection) seconds; None = Azure's 600 and 300
        self.port = 0
        self.control_port = 0
        self.endpoints: NamespaceEndpoints | None = None
        self._proc: subprocess.Popen[str] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalNamespace:
        """Start the process (on the previous ports after a restart) and wait for its JSON line."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it (``wait_ready`` does): a caller starting several
        namespaces lets them import and bind at the same time."""
        args = [
            sys.executable,
            "-m",
            "bridge.cli.main",
            "emulator",
            "--json",
            "--name",
            self.name,
            "--port",
            str(self.port),
            "--control-port",
            str(self.control_port),
            "--log-level",
            self.log_level,
        ]
        if self.persistent:
            args += ["--data-dir", str(self.data_dir / "data")]
        if self.entities_file is not None:
            args += ["--entities", str(self.entities_file)]
        if self.auto_create:
            args.append("--auto-create")
        args += list(self.extra_args)
        if self.idle_timeouts is not None:
            link, connection = self.idle_timeouts
            args += ["--link-idle-timeout", str(link), "--connection-idle-timeout", str(connection)]
        env = dict(os.environ, BRIDGE_EMULATOR_KEY=self.key)  # keeps the key out of `ps`
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir / "emulator.log").open("a")
        try:
            self._proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
            )
        finally:
            log.close()

    def wait_ready(self, timeout: float = 30.0) -> LocalNamespace:
        """Wait for the JSON line of the process ``launch`` started; learn its endpoints and ports."""
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            self.kill()
            tail = (self.data_dir / "emulator.log").read_text()[-2000:]
            raise EmulatorError(f"local namespace {self.name!r} did not start: {tail}")
        info = json.loads(line)
        self.endpoints = NamespaceEndpoints(**info)
        self.port = int(info["connection_string"].split("sb://", 1)[1].split(";", 1)[0].rsplit(":", 1)[1])
        self.control_port = int(info["control_url"].rsplit(":", 1)[1])
        return self

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id, while running."""
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> None:
        """``kill -9`` the process: nothing is flushed, nothing is said goodbye to."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)
        self._close_pipes()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while self._proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        self.kill()

    def _close_pipes(self) -> None:
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()

    def restart(self, hard: bool = False) -> LocalNamespace:
        """Stop (``kill -9`` when ``hard``) and start again on the same ports and data."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def close(self) -> None:
        """Stop and remove the data directory if this object created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalNamespace:
        return self.start() if not self.running else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- access --------------------------------------------------------------------------------------
    def _info(self) -> NamespaceEndpoints:
        if self.endpoints is None:
            raise EmulatorError(f"local namespace {self.name!r} was never started")
        return self.endpoints

    @property
    def connection_string(self) -> str:
        """For ``ServiceBusClient.from_connection_string`` (contains the key: do not log it)."""
        return self._info().connection_string

    @property
    def management_endpoint(self) -> str:
        """``https://host:port`` of the management endpoint (same port as AMQP)."""
        return self._info().management_endpoint

    @property
    def certificate(self) -> str:
        """PEM file to pass as ``connection_verify`` to the administration client."""
        return self._info().certificate

    @property
    def control(self) -> ControlClient:
        """The fault-control client."""
        return ControlClient(self._info().control_url)
