"""``bridge report`` as a command: the JSON contract (it rolls the live journal first), and the same job on
a Spark standalone cluster started from the pyspark installation on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from bridge.cli.main import app
from bridge.core import journal as J
from bridge.core.ledger import SUMMARY_KEYS, price_table
from bridge.journal import keys
from bridge.journal.store import JournalStore
from bridge.ledger.follow import LiveRoll, follow
from bridge.ledger.job import ReportInputs, run_report
from bridge.ledger.live_store import LedgerPaths
from bridge.outbox import keys as outbox_keys
from bridge.redis.connection import sync_client
from bridge.settings import JournalSettings, load_settings

from .test_report import T, orders_events, payments_events


def test_report_rolls_the_live_journal_and_prints_the_json_contract(
    spark: Any, redis_url: str, redis_client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a journal still in Redis: m1 delivered, m2 still in the outbox, m3 gone without a trace
    store = JournalStore(sync_client(redis_url), JournalSettings())
    store.append(
        "orders",
        [
            J.accepted("m1", T, door="http", size=10),
            J.sent("m1", T + 0.01, namespace="ns1", role="primary", path="direct", batch="b"),
            J.accepted("m2", T + 1, door="http", size=10),
            J.accepted("m3", T + 2, door="http", size=10),
        ],
    )
    redis_client.xadd(outbox_keys.outbox("orders", 0), {"v": "1", "id": "m2", "b": "x"})
    monkeypatch.setenv("BRIDGE_REDIS_URL", redis_url)
    monkeypatch.delenv("BRIDGE_CONFIG", raising=False)
    out = tmp_path / "report"

    # When ``bridge report --out DIR --json`` runs (in this process: it reuses the test session's Spark)
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--json", "--price", "ping=0.5"])

    # Then one JSON object on stdout with the contract's keys, the live journal rolled into DIR/journal
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(SUMMARY_KEYS) <= set(summary)
    assert {
        key: summary["entities"]["orders"][key] for key in ("accepted", "delivered", "pending", "lost")
    } == {
        "accepted": 3,
        "delivered": 1,
        "pending": 1,
        "lost": 1,
    }
    assert summary["entities"]["orders"]["lost_ids"] == ["m3"]
    assert redis_client.xlen(keys.journal("orders")) == 0
    assert list((out / "journal").rglob("*.parquet"))
    assert (out / "report.html").is_file()
    assert pq.read_table(out / "tables" / "reconciliation").num_rows == 1


def test_follow_rolls_the_live_journal_before_each_publication(
    spark: Any, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given a message's events still in Redis's journal stream only, and no journal file
    store = JournalStore(sync_client(redis_url), JournalSettings())
    store.append(
        "orders",
        [
            J.accepted("f1", T, door="http", size=10),
            J.sent("f1", T + 0.01, namespace="ns1", role="primary", path="direct", batch="b"),
            J.handled("f1", T + 0.02),
        ],
    )
    journal = tmp_path / "journal"
    options = {"interval": 0.5, "linger": 3600.0, "latency_minutes": 1e6, "overdue_after": 300.0}
    roll = LiveRoll(load_settings(redis_url=redis_url), journal)

    # When `--follow` draws the live ledger with the command's roll
    ledger = follow(
        spark,
        journal,
        LedgerPaths(tmp_path / "ledger"),
        {**options, "listed": 100, "max_files": 200},
        roll=roll.roll,
        duration=600,
        on_update=lambda published: int(published["events"]) >= 3,
    )

    # Then the roll moved the events into the folder and the ledger counted them
    assert redis_client.xlen(keys.journal("orders")) == 0
    orders = ledger["entities"]["orders"]
    assert (orders["accepted"], orders["delivered"], orders["handled"], ledger["verdict"]) == (1, 1, 1, "ok")


def test_report_refuses_an_unknown_price_kind_before_starting_spark(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRIDGE_REDIS_URL", redis_url)

    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path), "--price", "sends=1"])

    assert result.exit_code == 2
    assert "unknown operation kind 'sends'" in result.output


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_a_report_on_no_journal_is_an_error_naming_the_folder(
    folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a journal folder that is not there, or holds no rolled file (a typo, another host's folder)
    journal = tmp_path / "journal"
    if folder == "empty":
        (journal / "date=2026-01-01").mkdir(parents=True)
    out = tmp_path / "report"

    # When an offline report is asked of it
    result = CliRunner().invoke(app, ["report", "--offline", "--journal", str(journal), "--out", str(out)])

    # Then an error naming the folder and what to do, exit 1, before Spark starts, and nothing written
    assert result.exit_code == 1, result.output
    assert f"the journal folder {journal} " in result.stderr
    assert "BRIDGE_JOURNAL__DIRECTORY" in result.stderr and "lost" not in result.stdout
    assert not out.exists() and journal.exists() == (folder == "empty")


def test_a_report_on_a_journal_of_no_events_is_an_error(spark: Any, tmp_path: Path) -> None:
    # Given a rolled file with no rows in it
    from bridge.errors import EmptyJournalError
    from bridge.ledger.spark import JOURNAL_SCHEMA

    journal = tmp_path / "journal" / "date=2026-01-01" / "hour=00"
    journal.mkdir(parents=True)
    spark.createDataFrame([], JOURNAL_SCHEMA).drop("date", "hour").write.parquet(str(journal / "empty"))
    inputs = ReportInputs(journal=tmp_path / "journal", out=tmp_path / "report", prices=price_table())

    # Then the job refuses to report "lost = 0" about messages it never saw
    with pytest.raises(EmptyJournalError, match="holds no events"):
        run_report(spark, inputs)
    assert not (tmp_path / "report" / "report.html").exists()


@pytest.fixture
def journal_folder(tmp_path: Path, redis_url: str) -> Path:
    """The known-answers journal, rolled into a folder."""
    from bridge.journal.roll import roll

    store = JournalStore(sync_client(redis_url), JournalSettings())
    store.append("orders", orders_events())
    store.append("payments", payments_events())
    folder = tmp_path / "journal"
    assert roll(store, folder, chunk=10, lease_ttl=30).events == len(orders_events()) + len(payments_events())
    return folder


@pytest.mark.slow  # a master, a worker, an executor and a second driver JVM: 1-3 minutes on 2 cores
def test_the_same_report_on_a_standalone_cluster(
    spark: Any, standalone_cluster: str, journal_folder: Path, tmp_path: Path
) -> None:
    # Given the tables of local[2] (this process's session)
    local = run_report(
        spark, ReportInputs(journal=journal_folder, out=tmp_path / "local", prices=price_table())
    )

    # When the command runs the same job against the cluster (its own driver; executors on the worker)
    env = dict(os.environ, JAVA_HOME=os.environ["JAVA_HOME"], SPARK_LOCAL_IP="127.0.0.1")
    command = [
        sys.executable, "-m", "bridge.cli.main", "report", "--offline", "--json",
        "--journal", str(journal_folder), "--out", str(tmp_path / "cluster"), "--master", standalone_cluster,
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)

    # Then it reports the same, and the cluster did the work
    assert done.returncode == 0, done.stderr[-3000:]
    remote = json.loads(done.stdout)
    assert remote["master"] == standalone_cluster
    for key in (*SUMMARY_KEYS, "entities", "cost"):
        if key == "entities":
            for name, record in local["entities"].items():
                for field in (*SUMMARY_KEYS, "pending_backlog", "failover", "latency"):
                    assert remote["entities"][name][field] == record[field], (name, field)
        else:
            assert remote[key] == local[key], key
    for table in ("lost", "duplicates", "latency", "billing", "failover"):
        assert _sorted_rows(tmp_path / "cluster" / "tables" / table) == _sorted_rows(
            tmp_path / "local" / "tables" / table
        ), table
    executors = list((tmp_path).glob("app-*/*/stderr"))
    assert executors, "no executor ran on the worker"


def _sorted_rows(folder: Path) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in pq.read_table(folder).to_pylist())
