"""The chaos run with long faults (``--hold 40 60``): every fault held 40 to 60 s, a Redis outage first.

Not in the default suite (``slow``; about 15 minutes on 2 cores): ``pytest -m slow
tests/integration/test_chaos_long_hold.py``, or the command itself, ``python -m bench.chaos --duration 300
--hold 40 60 --seed 11 --first redis_outage --drain-timeout 600 --json`` (docs/chaos.md, "Long faults").
The verdict must be the short run's: nothing lost, nothing handed twice, the calls again after a receiver
kill within what the kills can bring back (counted apart and asserted), no key out of order, the ledger in
agreement — after faults that outlast every lease, lock, in-flight mark and FailoverInterval of the
bridge's defaults in the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_chaos_run_with_faults_of_40_to_60_s_loses_nothing_hands_nothing_twice_and_keeps_order(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "chaos"
    command = [
        *(sys.executable, "-m", "bench.chaos", "--duration", "300", "--hold", "40", "60"),
        *("--seed", "11", "--first", "redis_outage", "--drain-timeout", "600", "--json"),
        *("--data-dir", str(run_dir)),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=2300, check=False)
    lines = done.stdout.strip().splitlines()
    assert lines, f"no verdict; stderr: {done.stderr[-3000:]}"
    verdict = json.loads(lines[-1])
    context = f"run folder {run_dir}; events:\n{done.stderr[-3000:]}\nverdict: {lines[-1][:3000]}"
    assert verdict["faults"].get("redis_outage", 0) >= 1, context
    assert sum(verdict["faults"].values()) >= 4, context
    assert verdict["lost"] == 0, context
    assert verdict["handed_concurrently"] == 0, context
    assert verdict["handed_twice"] == 0, context
    assert verdict["handed_again_after_crash"] <= verdict["crash_window_bound"], context
    assert verdict["order_violations"] == 0, context
    assert verdict["fidelity_ok"], context
    assert verdict["ledger_agrees"], context
    assert done.returncode == 0, context
