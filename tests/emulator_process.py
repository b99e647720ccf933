"""Start a real ``bridge emulator`` process for a test and stop it afterwards, even when the test fails.

Interim helper for the management and fault-control integration tests until the shared ``namespace``
fixture (``bridge/embedded/namespaces.py``) lands; it runs the same command an operator would, reads the
one JSON line ``--json`` prints and kills the process group at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunningEmulator:
    """How to reach one running local namespace."""

    connection_string: str
    management_endpoint: str
    certificate: str
    control_url: str
    key: str
    pid: int


@contextlib.contextmanager
def running_emulator(data_dir: Path, name: str = "primary",
                     timeout: float = 20.0) -> Iterator[RunningEmulator]:
    """A ``bridge emulator --json`` process with a fresh random key, stopped on exit."""
    key = secrets.token_urlsafe(24)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli.main", "emulator", "--json", "--name", name, "--port", "0",
         "--data-dir", str(data_dir), "--key", key],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise RuntimeError(f"emulator did not start: {err[-2000:]}")
        info = json.loads(line)
        yield RunningEmulator(key=key, pid=proc.pid, **info)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
