"""The end of a chaos run (``bench/chaos.py``): stopping the bridge processes and running the ledger."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

from bridge.embedded.stack import BridgeProcess


def stop_processes(procs: list[BridgeProcess]) -> None:
    """SIGTERM all at once (receivers and workers finish the work in hand in parallel), then wait."""
    for proc in procs:
        if proc.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.proc.pid, signal.SIGTERM)
    for proc in procs:
        proc.stop()


def run_ledger(chaos: Any) -> dict[str, Any] | None:
    """``bridge report --json`` over the run's journal; its last line, or None when it failed."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "report", "--out", str(chaos.base / "report"), "--json"],
        env={**chaos.local.env(), "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    (chaos.base / "report.stderr").write_text(done.stderr)
    if done.returncode != 0 or not done.stdout.strip():
        chaos.say(f"bridge report failed ({done.returncode}); see report.stderr")
        return None
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary
