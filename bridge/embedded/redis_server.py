"""A private ``redis-server`` process: own port, own data directory, AOF on.

Never touches a Redis someone else runs (e.g. the shared one on 6379). ``restart()`` keeps the data
directory, so tests can prove that acknowledged writes survive a restart.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis

from bridge.embedded.ports import free_port, wait_listening
from bridge.errors import EmulatorError

WAITAOF_VERSION = (7, 2)
"""The first Redis protocol version with ``WAITAOF`` (Valkey 7.2 and later speak it too)."""


def redis_server_binary(at_least: tuple[int, int] | None = None) -> str:
    """Path of a server binary, or a clear error telling how to install it.

    Without ``at_least``: Debian's ``redis-server`` (any version). With it: the first of ``redis-server`` and
    the pinned ``valkey-server`` that ``scripts/bootstrap`` links into the virtualenv's ``bin`` whose
    protocol version is at least that (Debian's Redis 7.0 has no ``WAITAOF``; ``docs/durability.md``).
    """
    if at_least is None:
        path = shutil.which("redis-server")
        if path is None:
            raise EmulatorError(
                "redis-server is not installed (Debian: sudo apt-get install -y redis-server)"
            )
        return path
    beside = Path(sys.executable).parent / "valkey-server"
    for candidate in (shutil.which("redis-server"), str(beside), shutil.which("valkey-server")):
        if candidate and Path(candidate).is_file() and server_version(candidate) >= at_least:
            return candidate
    wanted = ".".join(map(str, at_least))
    raise EmulatorError(
        f"no Redis server >= {wanted} found (Debian's redis-server is older); ./scripts/bootstrap installs a "
        "pinned valkey-server into .venv/bin"
    )


@cache
def server_version(binary: str) -> tuple[int, int]:
    """The Redis protocol version ``binary --version`` states (a Valkey states the Redis one it speaks)."""
    try:
        out = subprocess.run(
            [binary, "--version"], check=False, capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    found = re.search(r"v=(\d+)\.(\d+)", out)
    if found is None:
        return (0, 0)
    major, minor = int(found[1]), int(found[2])
    # Valkey restarted its numbering at 7.2 (Redis 7.2.4's protocol), so 8.x and 9.x speak at least that.
    return (major, minor) if "Redis" in out or major < 7 else max((major, minor), WAITAOF_VERSION)


def stop_process(proc: subprocess.Popen[Any] | None) -> None:
    """SIGTERM, up to 10 s to exit, then SIGKILL (a server process this module, a sibling or a bench
    started)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class RedisServer:
    """One redis-server child process.

    ``appendfsync`` is ``always`` by default here so a test's acknowledged write is on disk before the
    process can be killed; production deployments choose their own policy (see ``docs/durability.md``).
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        appendfsync: str = "always",
        extra_args: tuple[str, ...] = (),
        password: str | None = None,
        *,
        binary: str | None = None,
    ) -> None:
        self._owns_dir = data_dir is None
        self.password = password
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="bridge-redis-"))
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.binary = binary
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``redis://:<password>@...`` with a password)."""
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The child process's id while it runs (``kill -9 <pid>`` to crash it by hand)."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the child process this object started is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start (or restart) the server on the same port and data directory; no-op while running."""
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary or redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
            "--protected-mode",
            "yes",
            *self.extra_args,
        ]
        if self.password:
            # From a config on stdin, not argv: `ps` shows a command line to every user of the machine.
            args[1:1] = ["-"]
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if self.password else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if self.password and self._proc.stdin is not None:
            self._proc.stdin.write(f'requirepass "{self.password}"\n'.encode())
            self._proc.stdin.close()
        try:
            if not wait_listening("127.0.0.1", self.port, timeout):
                raise EmulatorError(f"redis-server did not listen on port {self.port} within {timeout}s")
            self._wait_loaded(self._proc.pid, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_loaded(self, pid: int, timeout: float) -> None:
        """Wait until the AOF is replayed (PING answers LOADING until then).

        Also checks that the server answering is our child: if another process took the port between
        ``free_port()`` and the start, ours exits and a test must not go on writing (or FLUSHALL-ing) there.
        """
        client = redis.Redis(port=self.port, socket_timeout=1, password=self.password)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    client.ping()
                    break
                except redis.exceptions.BusyLoadingError:
                    if time.monotonic() > deadline:
                        raise EmulatorError("redis-server still loading its AOF") from None
                    time.sleep(0.02)
            if int(client.info("server")["process_id"]) != pid:
                raise EmulatorError(f"port {self.port} is served by another process, not our redis-server")
        except redis.exceptions.RedisError as exc:
            reason = type(exc).__name__
            raise EmulatorError(f"redis-server on port {self.port} did not answer: {reason}") from None
        finally:
            client.close()

    def kill(self) -> None:
        """``kill -9``: what a crash looks like."""
        if self._proc and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(10)

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), then force."""
        stop_process(self._proc)
        self._proc = None

    def restart(self, hard: bool = False) -> None:
        """Stop (or kill) and start again on the same port with the same data."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def close(self) -> None:
        """Stop and remove the data directory if this object created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
