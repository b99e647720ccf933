"""``bridge ledger --master spark://...``: the live ledger on a Spark standalone cluster (a master and a
worker started from the pyspark installation on loopback) publishes the batch report's figures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ledger.live_journal import write_journal
from tests.integration.ledger.test_live_ledger import assert_same_as_batch


@pytest.mark.slow  # a master, a worker, an executor and a second driver JVM: minutes on 2 cores
@pytest.mark.timeout(900)
def test_the_live_ledger_on_a_standalone_cluster(spark: Any, standalone_cluster: str, tmp_path: Path) -> None:
    # Given a small journal (one file per entity) on storage the worker sees at the same path
    events = write_journal(tmp_path / "journal", files=1)
    folder = tmp_path / "ledger"

    # When `bridge ledger` runs against the cluster: its driver here, the micro-batches' tasks on the worker
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", BRIDGE_JOURNAL__LIVE_LEDGER__INTERVAL="1")
    command = [
        sys.executable, "-m", "bridge.cli.main", "ledger", "--offline", "--master", standalone_cluster,
        "--journal", str(tmp_path / "journal"), "--dir", str(folder),
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.sql.shuffle.partitions=2",
    ]  # fmt: skip
    log = tmp_path / "ledger.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        live = _published(folder, events, proc, log, deadline=time.monotonic() + 600)
        # SIGTERM ends it as Ctrl-C does: the query stops and the command says its last verdict
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    # Then its publication holds the batch report's figures, and the cluster did the work
    assert_same_as_batch(spark, tmp_path, live)
    assert "bridge ledger: overdue" in log.read_text()
    assert list(tmp_path.glob("app-*/*/stderr")), "no executor ran on the worker"


def _published(
    folder: Path, events: int, proc: subprocess.Popen[bytes], log: Path, deadline: float
) -> dict[str, Any]:
    """The ledger's publication once it has read ``events`` events."""
    path = folder / "ledger.json"
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        if path.exists():
            ledger: dict[str, Any] = json.loads(path.read_text())
            if int(ledger["events"]) >= events:
                assert ledger["events"] == events, ledger
                return ledger
        time.sleep(1)
    raise AssertionError(f"no publication of {events} events: {log.read_text()[-3000:]}")
