"""Journals rolled on several worker hosts, each into its own folder, reconciled by one ``bridge report``.

Real parts: ``bridge worker`` processes (Celery, prefork), a beat that schedules the roll every second,
one journal folder per worker "host", the local namespaces through the SDK, and ``bridge report`` (in this
process, reusing the session's Spark) with a folder of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.worker_support import make_stack, producer, receive_all

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(240)


def _host_run(stack: LocalStack, name: str, folder: Path, bodies: list[str]) -> list[str]:
    """One host: a worker rolling into ``folder`` (when beat's roll task comes to it), until the messages
    are delivered and some journal files are there; then the host is stopped."""
    env = {"BRIDGE_JOURNAL__DIRECTORY": str(folder), "BRIDGE_JOURNAL__ROLL_INTERVAL": "1"}
    worker = stack.start_worker(name, concurrency=1, **env)
    with producer(stack) as p:
        ids = p.send_batch("orders", bodies)
    wait_until(lambda: list(folder.rglob("*.parquet")), 60, what=f"{name}'s journal files")
    worker.stop(timeout=5)
    return ids


def test_one_report_reconciles_the_journals_of_two_worker_hosts(
    spark: Any, make_stack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two worker hosts, one after the other, each rolling the journal into its own folder
    stack: LocalStack = make_stack({"orders": {"replication": "none"}})
    # One beat for both: the roll goes to whichever worker takes the task, into that worker's folder
    stack.start_beat(BRIDGE_JOURNAL__DIRECTORY=str(tmp_path / "beat"), BRIDGE_JOURNAL__ROLL_INTERVAL="1")
    first, second = tmp_path / "host-a" / "journal", tmp_path / "host-b" / "journal"
    ids = _host_run(stack, "host-a", first, [f"a{i}" for i in range(20)])
    ids += _host_run(stack, "host-b", second, [f"b{i}" for i in range(20)])
    assert len(receive_all(stack.primary, "orders", 40)) == 40

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
