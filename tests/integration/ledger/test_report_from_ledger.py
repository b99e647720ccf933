"""``bridge report --from-ledger``: the running live ledger's answer is the batch report's, or none.

The journal with known answers (``live_journal``: an active-mode duplicate, a dead-lettered message, a
paired failover with its restore and a message still in a backlog queue, a journal gap), plus one message
a receiver completed as a duplicate of an id nobody handled, goes through the live ledger; the answer
from its committed state is compared with the batch report on the same files, with the outbox unchecked,
drained and checked against a snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bridge.core import journal as J
from bridge.core.journal_files import to_row
from bridge.core.ledger import EXTRA_KEYS, SUMMARY_KEYS, price_table
from bridge.errors import LedgerBehindError
from bridge.journal.roll import file_path, table_of, write_durably
from bridge.ledger import live_report
from bridge.ledger.job import ReportInputs, run_report
from bridge.ledger.live import Snapshot
from bridge.ledger.live_store import LedgerPaths
from tests.integration.ledger.live_journal import P, T, write_journal
from tests.integration.ledger.test_live_ledger import LONG, run_live

RECORD_KEYS = (*SUMMARY_KEYS, *EXTRA_KEYS, "events", "quarantined_without_id", "outbox_checked")


def _suppressed_unhandled(journal: Path) -> int:
    """One message delivered twice whose second copy a receiver suppressed, never handled (its id's
    fingerprint matched another's): lost although delivered."""
    events = [
        J.accepted("s1", T + 30, door="http", size=10),
        J.sent("s1", T + 30.1, namespace=P, role="primary", path="direct", batch="d1"),
        J.received("s1", T + 30.2, namespace=P, role="primary"),
        J.duplicate_suppressed("s1", T + 30.2, namespace=P, role="primary"),
    ]
    rows = [to_row("orders", f"{int(e.at * 1000)}-{i + 100}", e) for i, e in enumerate(events)]
    first, last = (f"{r['stream_ms']}-{r['stream_seq']}" for r in (rows[0], rows[-1]))
    write_durably(table_of(rows, time.time()), file_path(journal, "orders", first, last))
    return len(rows)


def _snapshot(folder: Path, *ids: str) -> tuple[Path, Path]:
    """An outbox snapshot holding ``ids`` of orders, taken after every event of the journal."""
    mark = (int((T + 100) * 1000), 0)
    snap = Snapshot(watermarks={"orders": mark, "payments": mark}, message_ids=[("orders", i) for i in ids])
    folder.mkdir(parents=True)
    return snap.write(folder)


def _same(mine: dict[str, Any], batch: dict[str, Any], case: str) -> None:
    for key in (*SUMMARY_KEYS, *EXTRA_KEYS, "events"):
        assert mine[key] == batch[key], (case, key)
    assert set(mine["entities"]) == set(batch["entities"]), case
    for name, record in batch["entities"].items():
        ours = mine["entities"][name]
        assert {k: ours[k] for k in RECORD_KEYS} == {k: record[k] for k in RECORD_KEYS}, (case, name)
        assert sorted(ours["lost_ids"]) == sorted(record["lost_ids"]), (case, name)
        for key in ("first_event_at", "last_event_at"):
            assert ours[key] == pytest.approx(record[key], abs=1e-6), (case, name, key)
        story = record["failover"]
        assert ours["failovers"] == story["failovers"] + story["swaps"], (case, name)
    assert mine["operations"] == batch["operations"], case
    assert mine["cost"] == batch["cost"], case


@LONG
def test_the_answer_from_the_ledger_is_the_batch_reports_or_none(spark: Any, tmp_path: Path) -> None:
    # Given a live ledger that has read the whole journal
    journal = tmp_path / "journal"
    events = write_journal(journal, files=2) + _suppressed_unhandled(journal)
    paths = LedgerPaths(tmp_path / "ledger")
    # (10 s of linger: every settled message has left the state by the end, s1 too unless the state
    # holds a suppressed duplicate never handled for what it is, lost)
    run_live(spark, journal, paths.root, events, linger=10.0)
    base = ReportInputs(journal=journal, out=tmp_path / "out", prices=price_table(), master="local[2]")
    cases = {
        "unchecked": base,
        "drained": replace(base, drained=True),
        "in the outbox": replace(base, snapshot=_snapshot(tmp_path / "snapshot-a3", "a3")),
        "not in the outbox": replace(base, snapshot=_snapshot(tmp_path / "snapshot-none")),
    }
    answers = {}
    for case, inputs in cases.items():
        # When the batch report and the ledger answer on the same files
        batch = run_report(spark, replace(inputs, out=tmp_path / f"batch-{case}"))
        started = time.monotonic()
        mine = live_report.answer(paths, replace(inputs, out=tmp_path / f"ledger-{case}"), wait=0)
        elapsed = time.monotonic() - started
        # Then they agree on every count, every lost id, billing and cost
        _same(mine, batch, case)
        assert mine["source"]["journal_files"] == len(live_report.journal_files(journal))
        assert Path(mine["html"]).read_text().count("lost") > 0
        assert elapsed < 30, elapsed  # no Spark job: a bound far above its time, so a Spark call shows
        answers[case] = mine
    # and hold the known answers: a3 is open (pending unless drained or gone from the outbox), s1 lost as
    # a suppressed duplicate in every case, p2 in the backlog queue
    orders = {case: answer["entities"]["orders"] for case, answer in answers.items()}
    for case, lost in (("unchecked", ["s1"]), ("drained", ["a3", "s1"]), ("in the outbox", ["s1"]),
                       ("not in the outbox", ["a3", "s1"])):  # fmt: skip
        assert sorted(orders[case]["lost_ids"]) == lost, case
        assert orders[case]["pending_outbox"] == (0 if "a3" in lost else 1), case
    assert answers["drained"]["entities"]["payments"]["pending_backlog"] == 1
    assert any("batch report" in note for note in answers["drained"]["notes"])

    # When a journal file arrives that the ledger (stopped) has not read
    row = to_row("orders", f"{int((T + 200) * 1000)}-0", J.accepted("late", T + 200, door="http", size=10))
    write_durably(table_of([row], time.time()), file_path(journal, "orders", "1-0", "1-0"))
    out = tmp_path / "behind"
    # Then the ledger does not answer: it says how far behind it is, and writes nothing
    with pytest.raises(LedgerBehindError, match=r"has not read 1 of \d+ journal files"):
        live_report.answer(paths, replace(base, out=out), wait=0.3)
    assert not out.exists()


def test_a_folder_without_a_ledger_gets_a_clear_error_and_nothing_written(tmp_path: Path) -> None:
    # Given a journal and no live ledger
    journal = tmp_path / "journal"
    write_journal(journal, files=1)
    out = tmp_path / "out"
    env = {**os.environ, "BRIDGE_JOURNAL__DIRECTORY": str(journal)}
    # When the report is asked from the ledger
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "report", "--from-ledger", "--offline", "--out", str(out),
         "--dir", str(tmp_path / "no-ledger"), "--wait", "0", "--json"],
        check=False, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # Then it fails with one line that says what to do, prints no summary, and writes no report
    assert done.returncode == 1, done
    assert "LedgerBehindError" in done.stderr and "bridge ledger" in done.stderr, done.stderr
    assert done.stdout == ""
    assert not (out / "summary.json").exists() and not (out / "report.html").exists()
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout)
