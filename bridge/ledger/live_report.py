"""``bridge report --from-ledger``: the report's reconciliation, billing and cost answered from a running
live ledger's committed state, in a second or two and without Spark.

The live ledger (``bridge ledger``) keeps the counts the batch report would compute, current per
micro-batch. This module answers only when that state covers the journal as it is now: every Parquet
file of the journal folder was read by a committed micro-batch (``live_store.files_read``), so the
answer is the batch report's on the same files. Until then it waits up to ``wait`` seconds, then fails
with ``LedgerBehindError`` naming how many files are still unread; nothing is written.

The answer holds what the ledger keeps for every message: the reconciliation per entity (lost ids
included), the event counts, billing and the cost estimate, and the failovers counted. Latency by path,
the failover segments, the time series and the ``lost``/``duplicates`` tables need every message's facts,
which the ledger lets go once a message settled: they come from the batch report (``bridge report``
without ``--from-ledger``), and the answer's notes say so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bridge.core.live_ledger import event_figures
from bridge.core.live_reconciliation import HeldMessage, OutboxCheck, reconcile
from bridge.errors import LedgerBehindError
from bridge.ledger import html, live_store
from bridge.ledger.live_store import LedgerPaths
from bridge.ledger.summary import ReportInputs, billing, in_order, summary_of

LEFT_TO_THE_BATCH_REPORT = (
    "answered from the live ledger: latency by path, the failover segments, the time series and the "
    "lost/duplicates tables are the batch report's (bridge report without --from-ledger)"
)


@dataclass(frozen=True)
class Coverage:
    """How much of the journal folder a committed state holds."""

    batch_id: int
    files: int
    unread: list[Path]


def journal_files(journal: Path) -> list[Path]:
    """The journal's Parquet files as Spark lists them (names starting ``.`` or ``_`` are not data)."""
    if not journal.is_dir():
        return []
    return sorted(p.resolve() for p in journal.rglob("*.parquet") if not p.name.startswith((".", "_")))


def coverage(paths: LedgerPaths, journal: Path) -> Coverage:
    """Which journal files the last committed micro-batch's state does not hold yet."""
    _, totals = live_store.current(paths)
    batch_id = int(totals["batch_id"])
    files = journal_files(journal)
    read = live_store.files_read(paths, batch_id) if batch_id >= 0 else set()
    return Coverage(batch_id, len(files), [f for f in files if f not in read])


def wait_for_coverage(
    paths: LedgerPaths, journal: Path, wait: float, sleep: Callable[[float], None] = time.sleep
) -> Coverage:
    """Poll ``coverage`` until every file is read, for up to ``wait`` seconds; ``LedgerBehindError``
    after that (or at once when the folder holds no ledger)."""
    if not live_store.current(paths)[0] and not paths.checkpoint.is_dir():
        raise LedgerBehindError(
            f"{paths.root} holds no live ledger: start `bridge ledger` (or `bridge up --ledger`), or run "
            "bridge report without --from-ledger"
        )
    deadline = time.monotonic() + wait
    while True:
        seen = coverage(paths, journal)
        if seen.files and not seen.unread:
            return seen
        if time.monotonic() >= deadline:
            what = (
                "no journal file" if not seen.files else f"{len(seen.unread)} of {seen.files} journal files"
            )
            raise LedgerBehindError(
                f"the live ledger in {paths.root} has not read {what} after {wait:g} s "
                f"(last committed micro-batch: {seen.batch_id}); is `bridge ledger` running on this "
                "journal? bridge report without --from-ledger reads the journal itself"
            )
        sleep(0.1)


def held_messages(folder: Path | None) -> list[HeldMessage]:
    """The state's open messages and suppressed duplicates never handled."""
    path = None if folder is None else folder / "messages"
    if path is None or not path.is_dir() or not any(path.glob("*.parquet")):
        return []
    columns = ["entity", "message_id", "accepted_at", "accepted_pos", "is_open", "is_suppressed_unhandled"]
    table = pq.read_table(path, columns=columns)
    table = table.filter(pc.or_(table["is_open"], table["is_suppressed_unhandled"]))
    accepted = table.column("accepted_at")
    if pa.types.is_timestamp(accepted.type):
        accepted = pc.divide(accepted.cast(pa.timestamp("us")).cast(pa.int64()), 1_000_000.0)
    out = []
    for row, at in zip(
        table.select(columns[:2] + columns[3:]).to_pylist(), accepted.to_pylist(), strict=True
    ):
        pos = row["accepted_pos"]
        out.append(
            HeldMessage(
                row["entity"],
                row["message_id"],
                None if at is None else float(at),
                None if pos is None else (int(pos["stream_ms"]), int(pos["stream_seq"])),
                bool(row["is_open"]),
                bool(row["is_suppressed_unhandled"]),
            )
        )
    return out


def outbox_check(inputs: ReportInputs) -> OutboxCheck:
    """The snapshot's files (``bridge.ledger.live.Snapshot.write``) as an ``OutboxCheck``."""
    if inputs.snapshot is None:
        return OutboxCheck(drained=inputs.drained)
    outbox, marks = (pq.read_table(p).to_pylist() for p in inputs.snapshot)
    return OutboxCheck(
        checked=True,
        drained=inputs.drained,
        in_outbox=frozenset((r["entity"], r["message_id"]) for r in outbox),
        watermarks={r["entity"]: (int(r["wm_ms"]), int(r["wm_seq"])) for r in marks},
    )


def answer(paths: LedgerPaths, inputs: ReportInputs, wait: float = 30.0) -> dict[str, Any]:
    """The summary (as ``bridge report --json`` prints it) from the ledger's state once it covers the
    journal; writes ``summary.json`` and ``report.html`` into ``inputs.out``."""
    seen = wait_for_coverage(paths, inputs.journal, wait)
    folder, totals = live_store.current(paths)
    count_rows = in_order(
        [
            dict(zip(("entity", "kind", "namespace", "path", "result", "events", "units"), row, strict=True))
            for row in totals["event_counts"]
        ],
        "entity",
        "kind",
    )
    figures = event_figures(totals["event_counts"])
    entities = reconcile(
        totals["counts"],
        totals.get("entity_events", {}),
        figures.events,
        held_messages(folder),
        outbox_check(inputs),
    )
    for name, record in entities.items():
        record["journal_overflow"] = figures.overflow.get(name, 0)
        record["failovers"] = figures.failovers.get(name, 0)
        record["live_outbox_depth"] = inputs.live_depths.get(name)
        record["outbox_checked"] = (
            inputs.snapshot is not None or inputs.drained
        ) and name not in inputs.unchecked
    billing_rows, cost = billing(count_rows, entities, inputs)
    summary = summary_of(inputs, entities, count_rows, billing_rows, cost)
    summary["notes"].append(LEFT_TO_THE_BATCH_REPORT)
    summary["source"] = {
        "ledger": str(paths.root),
        "batch_id": seen.batch_id,
        "journal_files": seen.files,
        "clock": totals.get("clock"),
    }
    inputs.out.mkdir(parents=True, exist_ok=True)
    report_path = inputs.out / "report.html"
    report_path.write_text(html.render(summary, [], billing_rows, []))
    summary["html"] = str(report_path)
    (inputs.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
