"""The report's summary from its small collected tables: billing, the cost estimate, the notes and what
``--json`` prints. No Spark: the batch job (``bridge.ledger.job``) and the answer from a running live
ledger (``bridge.ledger.live_report``) both build their summary here, so it means the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.core.ledger import (
    CostEstimate,
    EventCount,
    billable_operations,
    estimate_cost,
    operation_cost,
    placeholder_kinds,
    summarize,
)
from bridge.journal.keys import is_entity

Rows = list[dict[str, Any]]
Entities = dict[str, dict[str, Any]]


@dataclass
class ReportInputs:
    """Where the job reads from and what it knows besides the journal."""

    journal: Path
    out: Path
    prices: Mapping[str, float]
    currency: str = "USD"
    priced: frozenset[str] = frozenset()
    """The operation kinds whose price the settings or the command line set; the others are placeholders."""
    snapshot: tuple[Path, Path] | None = None
    """(outbox ids, watermarks) Parquet files from ``bridge.ledger.live``; None: not checked."""
    drained: bool = False
    """No snapshot, but the outbox is known to be empty (a finished run): open messages are lost."""
    unchecked: Mapping[str, str] = field(default_factory=dict)
    live_depths: Mapping[str, int] = field(default_factory=dict)
    roll: Mapping[str, Any] = field(default_factory=dict)
    master: str = ""


def in_order(rows: Rows, *keys: str) -> Rows:
    """``rows`` sorted as Spark's ``orderBy(*keys)`` sorts (ascending, nulls first); equal keys keep the
    order of the remaining columns, so the result does not depend on how Spark's partitions came back."""
    names = [*keys, *(name for name in (rows[0] if rows else {}) if name not in keys)]
    return sorted(rows, key=lambda row: [(row[name] is not None, row[name]) for name in names])


def billing(count_rows: Rows, entities: Entities, inputs: ReportInputs) -> tuple[Rows, CostEstimate]:
    """The ``billing`` rows and the cost estimate over the delivered messages, from the ``event_counts``
    rows (entity, kind, namespace, path, result, events, units)."""
    counts = [
        EventCount(
            r["entity"], r["kind"], r["namespace"], r["path"], r["result"], int(r["events"]), int(r["units"])
        )
        for r in count_rows
    ]
    prices = dict(inputs.prices)
    operations = billable_operations(counts)
    delivered_total = sum(int(r.get("delivered") or 0) for r in entities.values())
    cost = estimate_cost(operations, delivered_total, prices, inputs.currency)
    placeholders = placeholder_kinds(operations, inputs.priced)
    billing_rows = [
        {
            "entity": op.entity,
            "namespace": op.namespace,
            "kind": op.kind,
            "operations": op.operations,
            "price_per_million": prices[op.kind],
            "estimated_cost": operation_cost(op.operations, op.kind, prices),
            "placeholder_price": op.kind in placeholders,
        }
        for op in operations
    ]
    return billing_rows, cost


def summary_of(
    inputs: ReportInputs,
    entities: Entities,
    count_rows: Rows,
    billing_rows: Rows,
    cost: CostEstimate,
) -> dict[str, Any]:
    """What ``--json`` prints (and ``summary.json`` holds), before the tables' and the HTML's paths."""
    entities = {name: record for name, record in sorted(entities.items()) if is_entity(name)}
    summary: dict[str, Any] = dict(summarize(entities))
    summary["outbox_checked"] = (inputs.snapshot is not None or inputs.drained) and not inputs.unchecked
    summary["outbox_assumed_drained"] = inputs.drained
    summary["events"] = sum(int(r["events"]) for r in count_rows)
    summary["entities"] = entities
    summary["cost"] = {
        **cost.as_dict(),
        "placeholder_prices": sorted({r["kind"] for r in billing_rows if r["placeholder_price"]}),
    }
    summary["operations"] = billing_rows
    summary["notes"] = notes(summary, inputs)
    summary["roll"] = dict(inputs.roll)
    summary["master"] = inputs.master
    return summary


def notes(summary: Mapping[str, Any], inputs: ReportInputs) -> list[str]:
    """What the reader must know to read the counts right (assumptions, missing events, odd messages)."""
    out = []
    if inputs.drained:
        out.append("the outbox was assumed drained (--drained): every open message counts as lost")
    elif inputs.snapshot is None:
        out.append("the live outbox was not checked: open messages count as pending, none as lost")
    for folder in inputs.roll.get("unreadable_folders", []):
        out.append(f"journal folder {folder} cannot be read from this host: its events are missing")
    for name, reason in sorted(inputs.unchecked.items()):
        out.append(f"{name}: outbox not checked ({reason}); its open messages count as pending")
    if summary.get("journal_overflow"):
        out.append(
            f"{summary['journal_overflow']} events found a full journal and are missing: counts may be "
            "short (raise journal.max_length or roll more often)"
        )
    if summary.get("suppressed_unhandled"):
        out.append(
            f"{summary['suppressed_unhandled']} messages were completed by a receiver as duplicates but "
            "never handled (their MessageId's fingerprint matched another id's): counted as lost"
        )
    if summary.get("unexpected"):
        out.append(f"{summary['unexpected']} messages were delivered or handled without an acceptance event")
    return out
