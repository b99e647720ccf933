"""A message a receiver completed as a duplicate without ever handling it is lost in ``bridge report``, and
in what ``bridge report --follow`` prints.

A receiver remembers a handled MessageId as a 14-byte fingerprint (``bridge.core.seen``) and journals its
``handled`` event in the same script. Two different ids may share a fingerprint; the second one's copies
are then completed as duplicates and its handler never runs. Its journal shows it accepted, sent, received
and suppressed, never handled: delivered, but lost to the application. A real collision of 112 bits cannot
be made, so the journal here is what a receiver writes for one (the events go the real way: appended to
a private Redis's journal streams, rolled into Parquet by the roll, then the Spark job).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from bridge.core import journal as J
from bridge.core.ledger import price_table
from bridge.embedded.redis_server import RedisServer
from bridge.journal.store import JournalStore
from bridge.ledger.follow import follow
from bridge.ledger.job import ReportInputs, run_report
from bridge.ledger.live import roll_now
from bridge.ledger.live_store import LedgerPaths
from bridge.redis.connection import sync_client
from bridge.settings import load_settings
from tests.integration.ledger.live_journal import FOLLOW_OPTIONS

T = 1_790_000_000.0
P = "ns1"


def events() -> list[J.JournalEvent]:
    """m1 handled; m2 a true duplicate (its second copy suppressed after it was handled); m3 suppressed
    as a duplicate of m1's fingerprint, never handled."""
    out: list[J.JournalEvent] = []
    for n, message_id in enumerate(("m1", "m2", "m3")):
        at = T + n
        out += [
            J.accepted(message_id, at, door="http", size=10),
            J.sent(message_id, at + 0.01, namespace=P, role="primary", path="direct", batch=f"b{n}"),
            J.received(message_id, at + 0.02, namespace=P, role="primary"),
        ]
    out += [
        J.handled("m1", T + 0.03),
        J.handled("m2", T + 1.03),
        J.received("m2", T + 1.5, namespace=P, role="primary"),
        J.duplicate_suppressed("m2", T + 1.51, namespace=P, role="primary"),
        J.duplicate_suppressed("m3", T + 2.03, namespace=P, role="primary"),
    ]
    return out


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """The events rolled into Parquet the real way (a private Redis's journal streams, then the roll)."""
    server = RedisServer(data_dir=tmp_path / "redis")
    server.start()
    try:
        client = sync_client(server.url)
        settings = load_settings(redis_url=server.url)
        JournalStore(client, settings.journal).append("orders", events())
        roll_now(client, settings, tmp_path / "journal", ["orders"])
        client.close()
    finally:
        server.close()
    return tmp_path / "journal"


def test_a_copy_suppressed_by_another_ids_fingerprint_is_lost(
    spark: Any, journal: Path, tmp_path: Path
) -> None:
    # Given a journal where m3 was completed as a duplicate and never handled
    # When the ledger reconciles it (the outbox known to be empty)
    inputs = ReportInputs(journal=journal, out=tmp_path / "report", prices=price_table(), drained=True)
    summary = run_report(spark, inputs)
    # Then m3 counts as lost, not as fine: the verdict fails, the lost table names it, a note says why
    orders = summary["entities"]["orders"]
    got = {key: orders[key] for key in ("delivered", "handled", "suppressed_duplicates", "lost")}
    assert got == {"delivered": 3, "handled": 2, "suppressed_duplicates": 2, "lost": 1}
    assert orders["suppressed_unhandled"] == 1 and orders["lost_ids"] == ["m3"]
    assert summary["lost"] == 1 and summary["suppressed_unhandled"] == 1
    lost = pq.read_table(tmp_path / "report" / "tables" / "lost").to_pylist()
    assert [row["message_id"] for row in lost] == ["m3"]
    assert any("never handled" in note for note in summary["notes"])


def test_follow_prints_the_suppressed_copy_as_lost_as_the_report_does(
    spark: Any, journal: Path, tmp_path: Path
) -> None:
    # Given the same journal, when `bridge report --follow` draws the live ledger over it
    console = Console(file=io.StringIO(), width=250)
    ledger = follow(
        spark,
        journal,
        LedgerPaths(tmp_path / "ledger"),
        FOLLOW_OPTIONS,
        duration=600,
        on_update=lambda published: int(published["events"]) >= len(events()),
        console=console,
    )

    # Then what it prints counts m3 as lost and says why, as the batch report does
    assert ledger["events"] == len(events())
    printed = console.file.getvalue()
    orders = dict(zip(printed_cells(printed, "entity"), printed_cells(printed, "orders"), strict=True))
    assert (orders["lost"], orders["delivered"], orders["handled"], orders["overdue"]) == ("1", "3", "2", "0")
    assert orders["suppressed copies"] == "2"
    assert "note: orders: 1 messages were completed by a receiver as duplicates but never handled" in printed


def printed_cells(printed: str, first: str) -> list[str]:
    """The cells of the drawn table's row that starts with ``first``."""
    for line in printed.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│┃").split("│" if "│" in line else "┃")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{printed}")
