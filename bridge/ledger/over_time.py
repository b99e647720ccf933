"""The report's time series: per entity, messages accepted and delivered per second, the outbox's depth and
the latency percentiles over time, with the namespaces' outages and the entity's failovers as bands.

Spark counts per time bucket (``bridge.ledger.tables.series`` and ``namespace_health``); the driver collects
those few rows and ``bridge.core.series`` turns them into lines and bands. The same lines are written as the
``series`` table (one row per entity and bucket).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bridge.core.series import (
    Band,
    bucket_count,
    bucket_seconds,
    failover_bands,
    open_messages,
    outage_bands,
)
from bridge.ledger import tables


@dataclass
class EntitySeries:
    """One entity's lines, a value per bucket (rates per second; latencies in ms, None where nothing was
    delivered)."""

    accepted: list[float]
    delivered: list[float]
    open: list[int]
    p50_ms: list[float | None]
    p99_ms: list[float | None]


@dataclass
class OverTime:
    """Every entity's lines on one time axis, and the bands drawn behind them."""

    origin: float
    step: int
    buckets: int
    entities: dict[str, EntitySeries] = field(default_factory=dict)
    outages: list[Band] = field(default_factory=list)
    failovers: dict[str, list[Band]] = field(default_factory=dict)

    def times(self) -> list[float]:
        """Each bucket's start, epoch seconds."""
        return [self.origin + i * self.step for i in range(self.buckets)]

    def rows(self) -> list[dict[str, Any]]:
        """The ``series`` table: one row per entity and bucket."""
        out = []
        for name, lines in sorted(self.entities.items()):
            for i, at in enumerate(self.times()):
                out.append(
                    {
                        "entity": name,
                        "start": at,
                        "seconds": self.step,
                        "accepted_per_s": lines.accepted[i],
                        "delivered_per_s": lines.delivered[i],
                        "open_messages": lines.open[i],
                        "p50_ms": lines.p50_ms[i],
                        "p99_ms": lines.p99_ms[i],
                    }
                )
        return out


def compute(
    messages: DataFrame,
    events: DataFrame,
    entities: Sequence[str],
    span: tuple[float, float],
    roles: Mapping[str, str],
) -> OverTime:
    """Collect the per-bucket counts over ``span`` (the journal's first and last event) and make lines."""
    origin, end = span
    step = bucket_seconds(origin, end)
    result = OverTime(origin, step, bucket_count(origin, end, step))
    accepted, delivered, settled = tables.series(messages, origin, step)
    rows = _collect_together(accepted=accepted, delivered=delivered, settled=settled)
    counts = {
        "accepted": _by_entity(rows["accepted"], "n"),
        "delivered": _by_entity(rows["delivered"], "n"),
        "settled": _by_entity(rows["settled"], "n"),
        "p50_ms": _by_entity(rows["delivered"], "p50_ms"),
        "p99_ms": _by_entity(rows["delivered"], "p99_ms"),
    }
    for name in entities:

        def line(measure: str, empty: Any = 0, *, entity: str = name) -> list[Any]:
            values = counts[measure].get(entity, {})
            return [values.get(i, empty) for i in range(result.buckets)]

        result.entities[name] = EntitySeries(
            accepted=[n / step for n in line("accepted")],
            delivered=[n / step for n in line("delivered")],
            open=open_messages(line("accepted"), line("settled")),
            p50_ms=line("p50_ms", None),
            p99_ms=line("p99_ms", None),
        )
    health: dict[str, dict[int, tuple[int, int]]] = {}
    for row in tables.namespace_health(events, origin, step).collect():
        health.setdefault(row["namespace"], {})[row["bucket"]] = (int(row["ok"]), int(row["failed"]))
    for namespace, buckets in sorted(health.items(), key=lambda item: (roles.get(item[0], "~"), item[0])):
        ok = [buckets.get(i, (0, 0))[0] for i in range(result.buckets)]
        failed = [buckets.get(i, (0, 0))[1] for i in range(result.buckets)]
        label = f"{roles[namespace]} ({namespace})" if namespace in roles else namespace
        result.outages += outage_bands(label, ok, failed, origin, step)
    return result


def add_failovers(result: OverTime, failover_rows: Sequence[Mapping[str, Any]]) -> None:
    """Each entity's failover bands, from the failover timeline's segments."""
    for name in result.entities:
        segments = [
            (r["start"], r["end"], r["active"], bool(r["failed_over"]))
            for r in failover_rows
            if r["entity"] == name
        ]
        result.failovers[name] = failover_bands(name, segments)


def _collect_together(**frames: DataFrame) -> dict[str, list[Any]]:
    """Each frame's rows, in one Spark job: the frames are tagged with their name and unioned (the
    columns a frame lacks are null)."""
    names = [column for frame in frames.values() for column in frame.columns]
    columns = list(dict.fromkeys(names))
    tagged = [
        frame.select(F.lit(name).alias("_frame"), *_columns(frame, columns)) for name, frame in frames.items()
    ]
    union = tagged[0]
    for frame in tagged[1:]:
        union = union.unionByName(frame)
    out: dict[str, list[Any]] = {name: [] for name in frames}
    for row in union.collect():
        out[row["_frame"]].append(row)
    return out


def _columns(frame: DataFrame, columns: Sequence[str]) -> list[Column]:
    """``columns`` from ``frame``, null (typed as elsewhere: double) where ``frame`` has none."""
    return [F.col(c) if c in frame.columns else F.lit(None).cast("double").alias(c) for c in columns]


def _by_entity(rows: Sequence[Any], column: str) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for row in rows:
        if row["bucket"] is not None:
            out.setdefault(row["entity"], {})[int(row["bucket"])] = row[column]
    return out
