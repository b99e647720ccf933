"""The live ledger (``bridge ledger``): the streaming path gives the batch report's figures.

One journal with known answers (``live_journal``: an active-mode duplicate, a dead-lettered message, a
paired failover with its restore barrier and ping, a journal gap) goes through the batch report and
through the streaming query one file per micro-batch, and every figure both show must be equal.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bridge.core import journal as J
from bridge.core.journal_files import to_row
from bridge.core.ledger import price_table
from bridge.journal.roll import file_path, table_of, write_durably
from bridge.ledger import figures, service, stream
from bridge.ledger.job import ReportInputs, run_report
from bridge.ledger.live_store import LedgerPaths, current
from tests.integration.ledger.live_journal import T, write_journal

LONG = pytest.mark.timeout(1500)
"""A micro-batch of the live ledger takes a few seconds on an idle 2-core machine, tens of seconds on a
loaded one; these tests wait for every batch."""

COMPARED = (
    "accepted",
    "accepted_events",
    "delivered",
    "pending_backlog",
    "dead_lettered",
    "quarantined_messages",
    "handled",
    "unexpected",
    "broker_duplicates",
    "duplicated_messages",
    "suppressed_duplicates",
    "suppressed_unhandled",
)


def options(**overrides: float) -> dict[str, float]:
    base = {
        "interval": 0.5,
        "linger": 3600.0,
        "latency_minutes": 1_000_000.0,
        "overdue_after": 300.0,
        "listed": 100,
        "max_files": 1,
    }
    return {**base, **overrides}


def run_live(spark: Any, journal: Path, root: Path, events: int, **overrides: float) -> dict[str, Any]:
    """Run the live ledger until it has read ``events`` events; its last publication."""

    def done(ledger: dict[str, Any]) -> bool:
        return int(ledger["events"]) >= events

    ledger = service.run(
        spark, journal, LedgerPaths(root), options(**overrides), duration=900, on_publish=done
    )
    assert ledger["events"] == events, ledger
    return ledger


def batch_report(spark: Any, journal: Path, out: Path) -> dict[str, Any]:
    inputs = ReportInputs(journal=journal, out=out, prices=price_table(), master="local[2]")
    return run_report(spark, inputs)


@LONG
def test_the_live_ledger_agrees_with_the_batch_report(spark: Any, tmp_path: Path) -> None:
    # Given a journal whose files arrive one per micro-batch, the last events first
    journal = tmp_path / "journal"
    events = write_journal(journal, files=2, reverse=True)
    assert_agreement(spark, tmp_path, events, linger=3600.0)


def assert_agreement(
    spark: Any, tmp_path: Path, events: int, linger: float, root: Path | None = None
) -> dict[str, Any]:
    """Run both paths on ``tmp_path / "journal"`` (the live one from ``root``, by default a new folder);
    check they agree and hold the known answers."""
    # When both paths read it
    live = run_live(spark, tmp_path / "journal", root or tmp_path / "ledger", events, linger=linger)
    return assert_same_as_batch(spark, tmp_path, live)


def assert_same_as_batch(spark: Any, tmp_path: Path, live: dict[str, Any]) -> dict[str, Any]:
    """Check the live ledger's publication ``live`` against the batch report of ``tmp_path / "journal"``
    (written by ``write_journal``) and the known answers."""
    journal = tmp_path / "journal"
    summary = batch_report(spark, journal, tmp_path / "report")
    tables = tmp_path / "report" / "tables"
    batch = {row["entity"]: row for row in pq.read_table(tables / "reconciliation").to_pylist()}

    # Then every count is the same, entity by entity
    assert set(live["entities"]) == set(batch) == {"orders", "payments"}
    for entity, row in batch.items():
        mine = live["entities"][entity]
        assert {k: mine[k] for k in COMPARED} == {k: row[k] for k in COMPARED}, entity
        assert mine["pending"] == row["pending"], entity
        assert mine["journal_overflow"] == row["journal_overflow"], entity
        billed = sum(op["operations"] for op in summary["operations"] if op["entity"] == entity)
        assert mine["operations"] == billed, entity
        story = summary["entities"][entity]["failover"]
        assert mine["failovers"] == story["failovers"] + story["swaps"], entity
    # the known answers, so that two equally wrong paths cannot agree unnoticed
    orders, payments = live["entities"]["orders"], live["entities"]["payments"]
    assert (orders["accepted"], orders["handled"], orders["broker_duplicates"]) == (4, 3, 1)
    assert (orders["dead_lettered"], orders["unexpected"], orders["journal_overflow"]) == (1, 1, 1)
    assert (payments["accepted"], payments["pending_backlog"], payments["failovers"]) == (2, 1, 1)
    # latency per minute: the same percentiles from the same samples
    batch_latency = sorted(
        (r["entity"], r["measure"], r["minute"], r["count"], r["p50_ms"], r["p99_ms"])
        for r in pq.read_table(tables / "latency_per_minute").to_pylist()
    )
    live_latency = sorted(
        (r["entity"], r["measure"], r["minute"], r["count"], r["p50_ms"], r["p99_ms"])
        for r in live["latency"]
    )
    assert live_latency == batch_latency
    assert {r["minute"] for r in live["latency"]} == {int(T // 60 * 60), int(T // 60 * 60) + 60}
    # the open message is overdue (its acceptance is months before this test ran)
    assert [m["message_id"] for m in orders["overdue_ids"]] == ["a3"]
    assert live["verdict"] == "overdue"
    return live


@pytest.mark.slow
@LONG
def test_a_message_leaves_the_state_once_settled_and_lingered(spark: Any, tmp_path: Path) -> None:
    # Given the journal in order, four files per entity, and 10 s of linger
    events = write_journal(tmp_path / "journal", files=4)

    # When both paths read it, they agree although settled messages left the live state on the way
    assert_agreement(spark, tmp_path, events, linger=10.0)

    # Then only the open (a3), the one waiting in a backlog queue (p2) and the one settled within the
    # last 10 s of journal time (a5) are held
    folder, totals = current(LedgerPaths(tmp_path / "ledger"))
    assert folder is not None
    held = pq.read_table(folder / "messages").to_pylist()
    assert sorted(row["message_id"] for row in held) == ["a3", "a5", "p2"]
    assert totals["clock"] == pytest.approx(T + 66)
    assert set(figures.FACT_COLUMNS) <= set(held[0])


@LONG
def test_a_restart_from_the_checkpoint_counts_nothing_twice(spark: Any, tmp_path: Path) -> None:
    # Given a live ledger that read the first files of the journal and stopped
    journal, staging, root = tmp_path / "journal", tmp_path / "staging", tmp_path / "ledger"
    events = write_journal(staging, files=2)
    files = sorted(staging.rglob("*.parquet"), key=lambda p: p.stat().st_mtime)
    first, rest = files[:2], files[2:]
    for path in first:
        _move(path, staging, journal)
    read_first = sum(pq.read_metadata(p).num_rows for p in journal.rglob("*.parquet"))
    run_live(spark, journal, root, read_first)
    # ... and that crashed after committing its last micro-batch but before Spark recorded it: Spark runs
    # that batch again on restart
    commits = sorted((root / "checkpoint" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink()  # Hadoop's checksum of that record

    # When the rest of the journal arrives and the ledger starts again from its folder
    for path in rest:
        _move(path, staging, journal)
    run_live(spark, journal, root, events)

    # Then it agrees with the batch report as if it had never stopped
    assert_agreement(spark, tmp_path, events, linger=3600.0, root=root)


@LONG
def test_a_stop_lets_the_micro_batch_in_flight_commit(spark: Any, tmp_path: Path) -> None:
    # Given a live ledger reading a journal one file per micro-batch, the JVM's stderr in a file
    journal, root = tmp_path / "journal", tmp_path / "ledger"
    events = write_journal(journal, files=2)
    tracker = spark.sparkContext.statusTracker()
    asked: list[int] = []

    def stop_mid_batch(ledger: dict[str, Any]) -> bool:
        committed = int(current(LedgerPaths(root))[1]["batch_id"])
        if tracker.getActiveJobsIds():
            asked.append(committed)
        return bool(asked) or int(ledger["events"]) >= events

    jvm = spark.sparkContext._jvm
    stderr = jvm.java.lang.System.err
    printed = tmp_path / "jvm-stderr.txt"
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(str(printed)), True))
    try:
        # When the ledger is stopped while a micro-batch runs Spark jobs
        service.run(spark, journal, LedgerPaths(root), options(), duration=900, on_publish=stop_mid_batch)
    finally:
        jvm.java.lang.System.setErr(stderr)

    # Then that batch was not interrupted: it committed, and the stream thread died of nothing
    assert asked, "no micro-batch was running when the ledger published"
    assert int(current(LedgerPaths(root))[1]["batch_id"]) > asked[0]
    assert "Exception in thread" not in printed.read_text()


def _move(path: Path, source: Path, target: Path) -> None:
    destination = target / path.relative_to(source)
    destination.parent.mkdir(parents=True, exist_ok=True)
    mtime = path.stat().st_mtime
    path.rename(destination)
    os.utime(destination, (mtime, mtime))


@pytest.mark.slow
@LONG
def test_bad_and_partial_input_is_named_and_no_data_is_never_nothing_lost(spark: Any, tmp_path: Path) -> None:
    journal, root = tmp_path / "journal", tmp_path / "ledger"
    journal.mkdir()

    # Given an empty journal, the ledger says it knows nothing
    empty = service.run(spark, journal, LedgerPaths(root), options(), duration=60, on_publish=lambda _: True)
    assert (empty["verdict"], empty["events"], empty["entities"]) == ("no data", 0, {})

    # When the journal arrives with a truncated file, a file that is no Parquet at all, and a message whose
    # copy a host with a slow clock journaled half a second before another host journaled its acceptance
    events = write_journal(journal, files=2)
    good = sorted(journal.rglob("*.parquet"))[0]
    truncated = good.with_name("j-orders-truncated.parquet")
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage = good.with_name("j-orders-garbage.parquet")
    garbage.write_bytes(b"not a journal file")
    skewed = [
        to_row("orders", "1790000100000-0", J.accepted("s1", T + 100, door="http", size=10)),
        to_row(
            "orders",
            "1790000100000-1",
            J.sent("s1", T + 99.5, namespace="ns1", role="primary", path="direct", batch="x"),
        ),
    ]
    rolled = file_path(journal, "orders", "1790000100000-0", "1790000100000-1")
    write_durably(table_of(skewed, time.time()), rolled)
    ledger = run_live(spark, journal, root, events + 2)

    # Then it counts what it could read and names what it could not
    assert sorted(Path(u["path"]).name for u in ledger["unreadable"]) == [garbage.name, truncated.name]
    assert any(r.startswith(f"could not read {truncated}") for r in ledger["reasons"])
    assert ledger["entities"]["orders"]["accepted"] == 5
    assert ledger["entities"]["orders"]["clock_skewed"] == 1
    assert any("clocks disagree" in reason for reason in ledger["reasons"])
    assert ledger["verdict"] == "overdue"  # a3 is still overdue: that outranks "incomplete"


@LONG
def test_the_deduplication_state_lives_in_rocksdb_and_a_batch_without_rows_commits_nothing(
    spark: Any, tmp_path: Path
) -> None:
    # Given a journal that a ledger started on a new folder reads in one micro-batch
    journal, paths = tmp_path / "journal", LedgerPaths(tmp_path / "ledger")
    events = write_journal(journal, files=1)
    running = stream.start(spark, journal, paths, options(max_files=1000))
    try:
        # When it has read everything, and Spark ran the batch that only moves the watermark
        running.query.processAllAvailable()
        rows = {int(p["batchId"]): int(p["numInputRows"]) for p in running.query.recentProgress}
    finally:
        running.stop()
    with_rows = [batch for batch, n in rows.items() if n]
    assert [batch for batch, n in rows.items() if not n and batch > max(with_rows)], rows

    # Then the last committed version is the last batch with rows, with every event counted
    assert (current(paths)[1]["batch_id"], current(paths)[1]["events"]) == (max(with_rows), events)
    # And the de-duplication's state is in RocksDB, as the checkpoint records for every restart
    metadata = json.loads((paths.checkpoint / "offsets" / "0").read_text().splitlines()[1])
    assert metadata["conf"][stream.STATE_STORE] == stream.ROCKSDB_STATE_STORE


def test_the_ledger_session_records_no_python_call_site_per_column(spark: Any) -> None:
    # Given the ledger's session (the builder users get)
    from pyspark.errors.utils import is_debugging_enabled

    from bridge.ledger.spark import DEBUGGING

    # Then PySpark's DataFrame debugging, five Py4J calls and a walk of the Python stack for every Column
    # function (a third of a live micro-batch), is off in the session and as PySpark reads it
    assert spark.conf.get(DEBUGGING) == "false"
    assert is_debugging_enabled() is False
