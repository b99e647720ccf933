"""Journals rolled on several worker hosts, each into its own folder, reconciled by one ``bridge report``.

Real parts: ``bridge worker`` processes (Celery, prefork), a beat that schedules the roll every second,
one journal folder per worker "host", the local namespaces through the SDK, and ``bridge report`` (in this
process, reusing the session's Spark) with a folder of its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.worker_support import make_stack, producer, receive_all

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(240)


def _start_host(stack: LocalStack, name: str, folder: Path) -> Any:
    """One host: a worker that rolls into ``folder`` whenever beat's roll task comes to it."""
    env = {"BRIDGE_JOURNAL__DIRECTORY": str(folder), "BRIDGE_JOURNAL__ROLL_INTERVAL": "1"}
    return stack.start_worker(name, concurrency=1, **env)


def test_one_report_reconciles_the_journals_of_two_worker_hosts(
    spark: Any, make_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two worker hosts running at once, each rolling the journal into its own folder
    stack: LocalStack = make_stack({"orders": {"replication": "none"}})
    # One beat for both: each roll goes to whichever worker takes the task, into that worker's folder
    stack.start_beat(BRIDGE_JOURNAL__DIRECTORY=str(tmp_path / "beat"), BRIDGE_JOURNAL__ROLL_INTERVAL="1")
    names = ("host-a", "host-b")
    folders = {name: tmp_path / name / "journal" for name in names}
    hosts = {name: _start_host(stack, name, folders[name]) for name in names}
    ids: list[str] = []
    with producer(stack) as p:
        for round_ in range(4):
            ids += p.send_batch("orders", [f"r{round_}-{i}" for i in range(5)])
            time.sleep(0.5)
        # Both deliver while both run; the roll holds a lease, so one host takes every roll while it lives
        rolled = wait_until(
            lambda: [name for name in names if list(folders[name].rglob("*.parquet"))], 60, what="a roll"
        )
        first = rolled[0]
        hosts.pop(first).stop(timeout=5)
        # and when that host is gone, the other takes the rolls, into its own folder
        ids += p.send_batch("orders", [f"late-{i}" for i in range(20)])
    (other,) = hosts
    wait_until(lambda: list(folders[other].rglob("*.parquet")), 90, what=f"{other}'s journal files")
    assert len(receive_all(stack.primary, "orders", 40)) == 40
    hosts[other].stop(timeout=5)

    # When ``bridge report`` runs with a journal folder of its own
    for key, value in stack.env().items():
        if key.startswith("BRIDGE_"):
            monkeypatch.setenv(key, value)
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app, ["report", "--out", str(out), "--json", "--journal", str(out / "journal")]
    )

    # Then it reconciles every message of both hosts: all accepted, all delivered, none lost
    assert result.exit_code == 0, result.output
    orders = json.loads(result.stdout)["entities"]["orders"]
    assert (orders["accepted"], orders["delivered"], orders["lost"]) == (len(ids), len(ids), 0), orders
