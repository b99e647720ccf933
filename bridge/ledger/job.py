"""``bridge report``'s Spark job: rolled journal in, Parquet tables and one HTML report out.

``run_report`` takes a Spark session (built by ``bridge.ledger.spark.build_session``, or a test's) and
writes ``<out>/tables/<name>/`` for every table of ``bridge.ledger.tables`` plus ``billing`` and
``failover`` (computed by ``bridge.core.ledger`` from small collected tables), then ``<out>/report.html``,
and returns the summary that ``--json`` prints. Heavy tables (``lost``, ``duplicates``) are written by the
executors; the small ones are collected once and written by the driver with pyarrow.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bridge.core.ledger import CostEstimate, TimelineEvent, failover_timeline
from bridge.errors import EmptyJournalError
from bridge.journal.keys import is_entity
from bridge.ledger import figures, html, over_time, tables
from bridge.ledger.spark import empty_snapshot, read_journal, read_rolled, read_snapshot, uri
from bridge.ledger.summary import Entities, ReportInputs, Rows, billing, in_order, summary_of

LOST_IDS_IN_JSON = 1000
"""Lost MessageIds listed per entity in the JSON (all of them are in the ``lost`` table)."""

Progress = Callable[[str], None]
__all__ = ["ReportInputs", "check_journal", "run_report"]


def _seconds(column: str) -> Any:
    return (F.unix_micros(column) / 1_000_000.0).alias(column)


def _write_rows(rows: Sequence[Mapping[str, Any]], folder: Path, schema: pa.Schema | None = None) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(list(rows), schema=schema) if rows or schema else pa.table({})
    pq.write_table(table, folder / "part-0.parquet")


def _write_frame(frame: DataFrame, folder: Path) -> None:
    frame.coalesce(1).write.mode("overwrite").parquet(uri(folder))


JOURNAL_HINT = (
    "point --journal (or journal.directory, BRIDGE_JOURNAL__DIRECTORY) at the folder the beat rolls the "
    "journal into"
)


def check_journal(directory: Path) -> None:
    """Refuse a folder with no rolled journal in it (``EmptyJournalError``, naming the folder): a report on
    nothing would say "lost = 0" about messages it never saw."""
    if not directory.is_dir():
        raise EmptyJournalError(f"the journal folder {directory} does not exist; {JOURNAL_HINT}")
    if not any(directory.rglob("*.parquet")):
        raise EmptyJournalError(f"the journal folder {directory} holds no Parquet files; {JOURNAL_HINT}")


def run_report(spark: SparkSession, inputs: ReportInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Compute every table, write them and the HTML report; return the summary.

    A journal folder with no events is an ``EmptyJournalError``, and nothing is written."""
    step = progress or (lambda _stage: None)
    check_journal(inputs.journal)
    out = inputs.out
    table_dir = out / "tables"
    step("reading the journal")
    events = read_journal(spark, inputs.journal).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _report(spark, inputs, events, table_dir, step)
    finally:
        events.unpersist()


def _report(
    spark: SparkSession, inputs: ReportInputs, events: DataFrame, table_dir: Path, step: Progress
) -> dict[str, Any]:
    if inputs.snapshot is not None:
        outbox, marks = read_snapshot(spark, *inputs.snapshot)
    else:
        outbox, marks = empty_snapshot(spark)
    step("classifying messages")
    facts = tables.message_facts(events)
    checked = inputs.snapshot is not None or inputs.drained
    messages = tables.classify(facts, outbox, marks, checked=checked, drained=inputs.drained)
    messages = messages.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        step("reconciliation")
        rec_rows, entities = _reconciliation(spark, inputs, messages, events, checked)
        step("lost and duplicated messages")
        _write_frame(tables.lost(messages), table_dir / "lost")
        _write_frame(tables.duplicates(messages), table_dir / "duplicates")
        step("latency percentiles")
        latency_rows = in_order(
            [row.asDict() for row in tables.latency(messages).collect()], "entity", "measure", "path"
        )
        per_minute = figures.latency_per_minute(figures.latency_samples(messages))
        _write_frame(per_minute, table_dir / "latency_per_minute")
        step("time series")
        roles = _roles(events)
        span = _span(rec_rows)
        series = None
        if span is not None:
            series = over_time.compute(messages, events, [n for n in entities if is_entity(n)], span, roles)
    finally:
        messages.unpersist()
    step("billable operations")
    count_rows, billing_rows, cost = _billing(events, entities, inputs)
    if not count_rows:
        raise EmptyJournalError(f"the journal folder {inputs.journal} holds no events; {JOURNAL_HINT}")
    step("failover timeline")
    timeline_rows, failover_rows = _failover(events, entities)
    if series is not None:
        over_time.add_failovers(series, failover_rows)
    _attach_latency(entities, latency_rows)
    step("writing tables")
    _write_rows(rec_rows, table_dir / "reconciliation")
    _write_rows(latency_rows, table_dir / "latency", _LATENCY_SCHEMA)
    _write_rows(count_rows, table_dir / "event_counts")
    _write_rows(billing_rows, table_dir / "billing", _BILLING_SCHEMA)
    _write_rows(failover_rows, table_dir / "failover", _FAILOVER_SCHEMA)
    _write_rows(timeline_rows, table_dir / "timeline_events")
    _write_rows(series.rows() if series else [], table_dir / "series", _SERIES_SCHEMA)
    summary = summary_of(inputs, entities, count_rows, billing_rows, cost)
    summary["namespaces"] = roles
    summary["tables"] = {p.name: str(p) for p in sorted(table_dir.iterdir()) if p.is_dir()}
    step("writing the HTML report")
    report_path = inputs.out / "report.html"
    report_path.write_text(html.render(summary, latency_rows, billing_rows, failover_rows, series))
    summary["html"] = str(report_path)
    (inputs.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _attach_latency(entities: dict[str, dict[str, Any]], latency_rows: list[dict[str, Any]]) -> None:
    """Each entity's latency rows in its summary entry (rows of names that are no entity are left out)."""
    for row in latency_rows:
        if row["entity"] in entities:
            entities[row["entity"]].setdefault("latency", []).append(
                {k: v for k, v in row.items() if k != "entity"}
            )


def _reconciliation(
    spark: SparkSession, inputs: ReportInputs, messages: DataFrame, events: DataFrame, checked: bool
) -> tuple[Rows, Entities]:
    """The ``reconciliation`` rows, and per entity its record for the summary (lost ids included)."""
    rec_frame = tables.reconciliation(messages, events)
    rec_rows = in_order(
        [
            row.asDict()
            for row in rec_frame.select(
                *[c for c in rec_frame.columns if c not in ("first_event_at", "last_event_at")],
                _seconds("first_event_at"),
                _seconds("last_event_at"),
            ).collect()
        ],
        "entity",
    )
    overflowed = {
        row["entity"]: int(row["journal_overflow"])
        for row in tables.overflow(read_rolled(spark, inputs.journal)).collect()
    }
    for row in rec_rows:
        row["journal_overflow"] = overflowed.get(row["entity"], 0)
    entities: Entities = {row["entity"]: dict(row) for row in rec_rows}
    for name, record in entities.items():
        record.pop("entity")
        record["live_outbox_depth"] = inputs.live_depths.get(name)
        record["outbox_checked"] = checked and name not in inputs.unchecked
        record["lost_ids"] = []
    if any(record["lost"] for record in entities.values()):
        lost_rows = tables.lost(messages).orderBy("entity", "accepted_at").select("entity", "message_id")
        for lost_row in lost_rows.limit(LOST_IDS_IN_JSON * max(1, len(entities))).collect():
            ids = entities[lost_row["entity"]]["lost_ids"]
            if len(ids) < LOST_IDS_IN_JSON:
                ids.append(lost_row["message_id"])
    return rec_rows, entities


def _billing(events: DataFrame, entities: Entities, inputs: ReportInputs) -> tuple[Rows, Rows, CostEstimate]:
    """The ``event_counts`` rows, the ``billing`` rows and the cost estimate over the delivered messages."""
    count_rows = in_order([row.asDict() for row in tables.event_counts(events).collect()], "entity", "kind")
    return (count_rows, *billing(count_rows, entities, inputs))


def _span(rec_rows: Rows) -> tuple[float, float] | None:
    """The journal's first and last event time over every entity (None when it has none)."""
    firsts = [r["first_event_at"] for r in rec_rows if r.get("first_event_at") is not None]
    lasts = [r["last_event_at"] for r in rec_rows if r.get("last_event_at") is not None]
    return (min(firsts), max(lasts)) if firsts and lasts else None


def _roles(events: DataFrame) -> dict[str, str]:
    """Each namespace's configured role (``primary`` / ``secondary``) as the journal recorded it, so the
    report names namespaces by role; a namespace seen in both roles (settings changed) keeps the first."""
    pairs = events.where(F.col("namespace").isNotNull() & F.col("role").isNotNull())
    roles: dict[str, str] = {}
    for row in sorted(pairs.select("namespace", "role").distinct().collect(), key=lambda r: r["role"]):
        roles.setdefault(row["namespace"], row["role"])
    return roles


def _failover(events: DataFrame, entities: Entities) -> tuple[Rows, Rows]:
    """The ``timeline_events`` and ``failover`` rows; each entity's record gets its ``failover``."""
    timeline_frame = tables.timeline_events(events)
    timeline_rows = in_order(
        [
            row.asDict()
            for row in timeline_frame.select(
                *[c for c in timeline_frame.columns if c != "time"], _seconds("time")
            ).collect()
        ],
        "entity",
        "time",
    )
    failover_rows: Rows = []
    for name, record in entities.items():
        story = [
            TimelineEvent(
                r["time"], r["kind"], r["from_role"], r["to_role"], r["reason"], r["queue"], r["result"]
            )
            for r in timeline_rows
            if r["entity"] == name
        ]
        start = record.get("first_event_at") or 0.0
        end = record.get("last_event_at") or start
        timeline = failover_timeline(story, start, end)
        record["failover"] = timeline.as_dict()
        for segment in timeline.segments:
            failover_rows.append(
                {
                    "entity": name,
                    "start": segment.start,
                    "end": segment.end,
                    "seconds": segment.seconds,
                    "active": segment.active,
                    "failed_over": segment.failed_over,
                }
            )
    return timeline_rows, failover_rows


_LATENCY_SCHEMA = pa.schema(
    [
        ("entity", pa.string()),
        ("path", pa.string()),
        ("measure", pa.string()),
        ("count", pa.int64()),
        ("p50_ms", pa.float64()),
        ("p95_ms", pa.float64()),
        ("p99_ms", pa.float64()),
        ("max_ms", pa.float64()),
    ]
)
_BILLING_SCHEMA = pa.schema(
    [
        ("entity", pa.string()),
        ("namespace", pa.string()),
        ("kind", pa.string()),
        ("operations", pa.int64()),
        ("price_per_million", pa.float64()),
        ("estimated_cost", pa.float64()),
        ("placeholder_price", pa.bool_()),
    ]
)
_FAILOVER_SCHEMA = pa.schema(
    [
        ("entity", pa.string()),
        ("start", pa.float64()),
        ("end", pa.float64()),
        ("seconds", pa.float64()),
        ("active", pa.string()),
        ("failed_over", pa.bool_()),
    ]
)
_SERIES_SCHEMA = pa.schema(
    [
        ("entity", pa.string()),
        ("start", pa.float64()),
        ("seconds", pa.int64()),
        ("accepted_per_s", pa.float64()),
        ("delivered_per_s", pa.float64()),
        ("open_messages", pa.int64()),
        ("p50_ms", pa.float64()),
        ("p99_ms", pa.float64()),
    ]
)
