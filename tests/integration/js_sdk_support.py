"""Microsoft's JavaScript Service Bus SDK, installed once per machine, and a bounded runner for its scripts.

- ``@azure/service-bus`` 7.9.5 (the newest 7.x) with ``@azure/identity`` 4.13.1 (the newest that runs on
  Node 20) and what the SDK's own samples add for WebSockets, proxies and ``.env`` files (``ws``,
  ``https-proxy-agent``, ``dotenv``), from the npm registry, into ``<cache>/node-azure-service-bus-7.9.5``;
- ``@azure/service-bus`` 7.10.0-beta.2 (with the samples' packages), into
  ``<cache>/node-azure-service-bus-7.10.0-beta.2``: the first release with ``deleteMessages`` and
  ``purgeMessages``.

``<cache>`` and the install (once, under a file lock, staged and renamed into place) are those of
``tests/integration/rest_clients.py``; the tests that use the SDK are skipped, with the reason printed, only
where ``node`` or ``npm`` is missing. A fresh machine needs the npm registry once.

``run_js`` runs one script with ``NODE_PATH`` naming the SDK's ``node_modules`` (so a plain
``require("@azure/service-bus")`` finds it) and a hard bound: an SDK that waits for an answer that never
comes is killed, and the test reads what it printed until then.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.rest_clients import _install, cache_dir

SERVICE_BUS = "@azure/service-bus@7.9.5"
IDENTITY = "@azure/identity@4.13.1"
SAMPLE_PACKAGES = ["ws@8.18.3", "https-proxy-agent@7.0.6", "dotenv@16.4.7"]
SERVICE_BUS_BETA = "@azure/service-bus@7.10.0-beta.2"
SCRIPTS = Path(__file__).parent / "js"
RESULT_PREFIX = "RESULT "


@dataclass(frozen=True)
class JsSdk:
    """``node`` and the ``node_modules`` folder that holds one installed SDK."""

    node: str
    modules: Path


@dataclass(frozen=True)
class JsRun:
    """What one script did: its exit code (None when killed at the bound) and its output."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        """True when the script was killed at its bound."""
        return self.returncode is None

    def results(self) -> dict[str, Any]:
        """The objects the script printed as ``RESULT {json}`` lines, merged (later keys win)."""
        merged: dict[str, Any] = {}
        for line in self.stdout.splitlines():
            if line.startswith(RESULT_PREFIX):
                merged.update(json.loads(line[len(RESULT_PREFIX) :]))
        return merged

    def explain(self) -> str:
        """The end of the script's output, for an assertion message."""
        state = "killed at its bound" if self.timed_out else f"exit code {self.returncode}"
        return f"{state}\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"


def _sdk(name: str, packages: list[str], marker: str) -> JsSdk:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js is not installed (node and npm): the JavaScript Service Bus SDK tests need it")
    modules = cache_dir() / name / "node_modules"
    staging = cache_dir() / f"{name}.partial"
    install = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save", *packages]
    _install(name, modules / marker / "package.json", [install], staging)
    return JsSdk(node, modules)


def service_bus_sdk() -> JsSdk:
    """``@azure/service-bus`` 7.9.5, ``@azure/identity`` and the samples' packages."""
    return _sdk("node-azure-service-bus-7.9.5", [SERVICE_BUS, IDENTITY, *SAMPLE_PACKAGES], "dotenv")


def service_bus_beta_sdk() -> JsSdk:
    """``@azure/service-bus`` 7.10.0-beta.2 (``deleteMessages``, ``listSessions``)."""
    return _sdk("node-azure-service-bus-7.10.0-beta.2", [SERVICE_BUS_BETA, *SAMPLE_PACKAGES], "dotenv")


def run_js(
    sdk: JsSdk,
    script: Path,
    env: Mapping[str, str],
    *,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> JsRun:
    """Run ``node script`` with ``env`` added to a clean environment; kill it at the bound."""
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "NODE_PATH": str(sdk.modules),
        **env,
    }
    try:
        done = subprocess.run(
            [sdk.node, str(script)],
            cwd=str(cwd or script.parent),
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:  # run() has killed the script and kept what it printed
        return JsRun(None, _text(expired.stdout), _text(expired.stderr))
    return JsRun(done.returncode, done.stdout, done.stderr)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""
