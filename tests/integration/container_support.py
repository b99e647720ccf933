"""The container tests' engine and images: a real ``dockerd``, images built by ``scripts/images``.

An engine that already answers (``DOCKER_HOST``, else the default socket) is used as it is. Otherwise the
tests start ``dockerd --bridge=none --iptables=false`` themselves, with its socket and run state in a
private temporary folder, and stop it afterwards; its image store lives in the machine-level cache folder
(``scripts/images``: ``/var/cache/servicebus-bridge-images`` when writable), so the Debian stand-in base and
the build cache outlive the run and only the first run on a machine pays for debootstrap. An engine the
tests start holds nothing but theirs: containers left by an interrupted run are removed when it starts.

Containers run with host networking only (the engine has no bridge network), and every service listens on
loopback.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES_SCRIPT = ROOT / "scripts" / "images"
STAND_IN_BASE = "servicebus-bridge-base:bookworm"
BRIDGE_IMAGE = "servicebus-bridge:local"
EMULATOR_IMAGE = "servicebus-bridge-emulator:local"
LEDGER_IMAGE = "servicebus-bridge-ledger:local"
PROMETHEUS_IMAGE = "servicebus-bridge-prometheus:local"
ENGINE_START_DEADLINE = 90.0
BUILD_DEADLINE = 900.0


def cache_dir() -> Path:
    """The machine-level cache folder, as ``scripts/images`` picks it."""
    configured = os.environ.get("BRIDGE_IMAGE_CACHE")
    if configured:
        path = Path(configured)
    else:
        path = Path("/var/cache/servicebus-bridge-images")
        try:
            path.mkdir(parents=True, exist_ok=True)
            writable = os.access(path, os.W_OK)
        except OSError:
            writable = False
        if not writable:
            path = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "servicebus-bridge-images"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Engine:
    """A Docker engine the tests talk to: ``env`` carries its ``DOCKER_HOST``."""

    env: dict[str, str]

    def docker(
        self, *args: str, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this engine."""
        return run(["docker", *args], self.env, timeout=timeout, check=check)

    def inspect(self, name: str) -> dict[str, Any]:
        """``docker inspect`` of one container or image."""
        data: list[dict[str, Any]] = json.loads(self.docker("inspect", name).stdout)
        return data[0]

    def health(self, container: str) -> str:
        """``starting``, ``healthy`` or ``unhealthy`` (``none`` without a health check)."""
        state = self.inspect(container)["State"]
        return str(state.get("Health", {}).get("Status", "none"))

    def wait_healthy(self, containers: list[str], deadline: float) -> None:
        """Wait until every container's health check passes; fail with their logs when one does not."""
        end = time.monotonic() + deadline
        while True:
            states = {c: self.health(c) for c in containers}
            if all(s == "healthy" for s in states.values()):
                return
            if time.monotonic() > end or "unhealthy" in states.values():
                logs = {
                    c: self.docker("logs", "--tail", "20", c, check=False).stderr[-2000:] for c in containers
                }
                pytest.fail(f"containers not healthy within {deadline:.0f} s: {states}\n{logs}")
            time.sleep(1.0)


def run(
    args: list[str], env: dict[str, str], *, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A command with ``env`` added to this process's environment; a failure shows its output."""
    result = subprocess.run(
        args, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        pytest.fail(f"{' '.join(args[:4])} ... exited {result.returncode}:\n{output}")
    return result


def require(*tools: str) -> None:
    """Skip, naming what is missing: ``scripts/bootstrap`` installs these (``test``: the engine and
    debootstrap; ``containers``: docker-compose too)."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (./scripts/bootstrap containers installs them)")


def _answers(env: dict[str, str]) -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            env={**os.environ, **env},
            capture_output=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


@contextlib.contextmanager
def engine() -> Iterator[Engine]:
    """The running engine, or one started here (and stopped on the way out)."""
    if _answers({}):
        yield Engine(env={})
        return
    require("docker", "dockerd", "debootstrap")
    cache = cache_dir()
    # One engine per image store: a second run on this machine waits for the first.
    with (cache / "engine.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # A short path: the socket's must fit a unix socket address.
        run_dir = Path(tempfile.mkdtemp(prefix="sbb-engine-", dir="/tmp"))
        env = {"DOCKER_HOST": f"unix://{run_dir}/docker.sock"}
        log = cache / "dockerd.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [
                    "dockerd",
                    "--bridge=none",
                    "--iptables=false",
                    "--data-root",
                    str(cache / "engine"),
                    "--exec-root",
                    str(run_dir / "exec"),
                    "--pidfile",
                    str(run_dir / "dockerd.pid"),
                    "-H",
                    env["DOCKER_HOST"],
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            end = time.monotonic() + ENGINE_START_DEADLINE
            while not _answers(env):
                if process.poll() is not None or time.monotonic() > end:
                    pytest.fail(f"dockerd did not start (exit {process.poll()}):\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            started = Engine(env=env)
            # Containers of an interrupted run would come back with their restart policy: remove them.
            leftovers = started.docker("ps", "-aq").stdout.split()
            if leftovers:
                started.docker("rm", "-f", *leftovers)
            yield started
        finally:
            _stop(process)
            _unmount_below(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)


def _unmount_below(directory: Path) -> None:
    """dockerd leaves its network namespace bind-mounted (``exec/netns/default``) when it exits: unmount
    what is mounted below ``directory`` so that it can be removed."""
    mounts = Path("/proc/mounts").read_text().splitlines()
    points = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for point in sorted((p for p in points if p.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", point], capture_output=True, timeout=30, check=False)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (dockerd stops its containers and its containerd), SIGKILL to the group if that hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def build_images(engine: Engine, *targets: str) -> None:
    """The Debian stand-in base (cached), the wheels, then the images of ``targets`` FROM the stand-in."""
    # The wheels are made by the pip of the interpreter running the tests (the project venv's).
    env = {**engine.env, "PYTHON": sys.executable}
    run([str(IMAGES_SCRIPT), "standin"], env, timeout=BUILD_DEADLINE)
    run([str(IMAGES_SCRIPT), "build", STAND_IN_BASE, *targets], env, timeout=BUILD_DEADLINE)


def build_prometheus_image(engine: Engine, directory: Path) -> str:
    """Debian's ``prometheus`` binary (``scripts/bootstrap`` installs the package) on the Debian stand-in
    base, for the compose file's ``monitoring`` profile (``PROMETHEUS_IMAGE``): the engine pulls no image.
    The binary needs only the C library, which the stand-in (the same Debian release) has."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (./scripts/bootstrap test installs Debian's package)")
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(binary, directory / "prometheus")
    (directory / "Dockerfile").write_text(f"FROM {STAND_IN_BASE}\nCOPY prometheus /bin/prometheus\n")
    env = {**engine.env, "DOCKER_BUILDKIT": "0"}
    run(["docker", "build", "--quiet", "-t", PROMETHEUS_IMAGE, str(directory)], env, timeout=BUILD_DEADLINE)
    return PROMETHEUS_IMAGE
