"""The third-party Service Bus REST clients the REST door is tested with, installed once per machine.

- Node's ``azure-sb`` 0.11.2 from the npm registry, into ``<cache>/node-azure-sb-0.11.2`` (needs ``node`` and
  ``npm``; the tests that use it are skipped, with the reason printed, only where Node is missing).
- Python's ``azure-servicebus==0.21.1`` (the REST ``ServiceBusService``) from PyPI, in its own virtualenv
  ``<cache>/py-azure-servicebus-0.21.1``: it cannot live beside the project's azure-servicebus 7.

``<cache>`` is ``$BRIDGE_TEST_CACHE``, else ``$XDG_CACHE_HOME/bridge-tests``, else ``~/.cache/bridge-tests``.
Each install happens once (under a file lock, so parallel test workers wait for one install), into a
temporary directory renamed into place when complete, so an interrupted install is never mistaken for one.
A fresh machine needs network access to the npm registry and PyPI once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

AZURE_SB = "azure-sb@0.11.2"
PY_SDK = "azure-servicebus==0.21.1"
INSTALL_TIMEOUT = 600


def cache_dir() -> Path:
    """Where the clients are installed (module docstring)."""
    explicit = os.environ.get("BRIDGE_TEST_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bridge-tests"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _install(name: str, ready: Path, build: list[list[str]], staging: Path) -> None:
    """Run ``build`` in ``staging`` and move it to ``cache_dir()/name`` unless ``ready`` exists already."""
    with _locked(name):
        if ready.exists():
            return
        target = cache_dir() / name
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.mkdir(parents=True)
        for command in build:
            done = subprocess.run(
                command, check=False, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                )
        staging.rename(target)


def node_azure_sb() -> tuple[str, Path]:
    """``node`` and the ``node_modules`` holding azure-sb 0.11.2; skips the test where Node is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js is not installed (node and npm): the azure-sb 0.11.2 client test needs it")
    name = "node-azure-sb-0.11.2"
    modules = cache_dir() / name / "node_modules"
    staging = cache_dir() / f"{name}.partial"
    install = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save", AZURE_SB]
    _install(name, modules / "azure-sb" / "package.json", [install], staging)
    return node, modules


def python_0x() -> Path:
    """The Python of a virtualenv holding azure-servicebus 0.21.1 (the REST ``ServiceBusService``)."""
    name = "py-azure-servicebus-0.21.1"
    staging = cache_dir() / f"{name}.partial"
    python = cache_dir() / name / "bin" / "python"
    # The venv is made in place and renamed: its scripts name their own path, so only the interpreter is
    # used (``bin/python -m ...``), never a console script.
    build = [
        [sys.executable, "-m", "venv", "--without-pip", str(staging)],
        [str(staging / "bin" / "python"), "-m", "ensurepip", "--default-pip"],
        [
            str(staging / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PY_SDK,
        ],
    ]
    _install(name, python, build, staging)
    return python
