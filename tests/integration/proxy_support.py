"""A real HTTP CONNECT proxy for tests: Debian's ``tinyproxy`` on a free loopback port, with Basic auth."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


class Tinyproxy:
    """One ``tinyproxy -d`` process; ``url`` carries the credentials (a secret, like any proxy URL)."""

    def __init__(self, folder: Path, user: str, password: str) -> None:
        self.folder = folder
        self.user, self.password = user, password
        self.port = _free_port()
        self.log = folder / "tinyproxy.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://user:password@127.0.0.1:port``."""
        return f"http://{self.user}:{self.password}@127.0.0.1:{self.port}"

    def start(self) -> Tinyproxy:
        """Write the configuration and start the proxy in the foreground (no ConnectPort: any port)."""
        binary = shutil.which("tinyproxy")
        if binary is None:
            pytest.skip("tinyproxy is not installed (scripts/bootstrap installs it)")
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "tinyproxy.conf"
        conf.write_text(
            f'Port {self.port}\nListen 127.0.0.1\nTimeout 120\nLogFile "{self.log}"\nLogLevel Connect\n'
            f"MaxClients 50\nBasicAuth {self.user} {self.password}\nAllow 127.0.0.1\n"
        )
        self._proc = subprocess.Popen(
            [binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("tinyproxy did not start")

    def connects(self) -> str:
        """What the proxy logged about CONNECT requests."""
        return self.log.read_text() if self.log.exists() else ""

    def stop(self) -> None:
        """Stop the process this object started."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
