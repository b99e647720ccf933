"""``bridge demo`` (the README's first command) runs its whole story and loses nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_bridge_demo_runs_end_to_end(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "demo", "--messages", "5", "--data-dir", str(tmp_path)],
        capture_output=True,
        check=False,
        text=True,
        timeout=240,
    )
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sent 15, received 15 distinct, lost 0" in out
    assert "active=secondary primary=DOWN" in out  # the failover really happened
    assert "demo passed" in out
