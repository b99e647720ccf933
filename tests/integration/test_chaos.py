"""The short chaos run (``bench/chaos.py``) as a test: the whole stack under seeded faults, then the verdict.

It runs the script as a subprocess, exactly as an operator would, and asserts its last line: nothing
acknowledged was lost, nothing was handed twice (in particular never two calls of one id at once, whatever
the faults), the calls again after a receiver was killed inside its handler stay within what the kills can
bring back, no key was reordered, TTL / schedule / properties arrived as sent, and the ledger
(``bridge report --json``) agrees with the checker. About two minutes on 2 cores,
a fifth of it the PySpark ledger. Part of the default suite since the findings that made its verdict
depend on where the faults fell were fixed (``docs/findings.md``); the long soak is its own command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(480)
def test_a_short_chaos_run_loses_nothing_hands_nothing_twice_and_keeps_order(tmp_path: Path) -> None:
    run_dir = tmp_path / "chaos"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--duration",
            "45",
            "--seed",
            "3",
            "--hold",
            "1.5",
            "3",
            "--json",
            "--data-dir",
            str(run_dir),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=460,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"no verdict; stderr: {done.stderr[-3000:]}"
    verdict = json.loads(lines[-1])
    context = f"run folder {run_dir}; events:\n{done.stderr[-3000:]}\nverdict: {lines[-1][:3000]}"
    assert verdict["acknowledged"] > 300, context
    assert sum(verdict["faults"].values()) >= 4, context
    assert verdict["lost"] == 0, context
    assert verdict["handed_concurrently"] == 0, context
    assert verdict["handed_twice"] == 0, context
    # The crash window (a receiver killed inside the handler hands the id again) is allowed, and bounded
    print(f"handed again after a receiver kill: {verdict['handed_again_after_crash']} "
          f"(bound {verdict['crash_window_bound']})")  # fmt: skip
    assert verdict["handed_again_after_crash"] <= verdict["crash_window_bound"], context
    assert verdict["order_violations"] == 0, context
    assert verdict["fidelity_ok"], context
    assert verdict["ledger_agrees"], context
    assert done.returncode == 0, context
