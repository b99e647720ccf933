"""The status page's charts from the stored samples (``bridge.core.history``): one time axis, a line per
entity and measure, and the outage and failover bands drawn behind every chart.

Pure: the samples come in sorted or not, the JSON-ready series go out. A missing slot longer than
``GAP_FACTOR`` intervals becomes a row of nulls, which a chart draws as a break in its lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bridge.core.history import (
    GAP_FACTOR,
    ROLES,
    EntitySample,
    Sample,
    failed_over,
    failover_label,
    histogram_delta,
    quantile,
    rate,
    state_bands,
)

ENTITY_SERIES: tuple[str, ...] = (
    "accepted", "sent", "handled", "depth", "oldest_age", "latency_p50", "latency_p99", "failovers",
)  # fmt: skip
"""Per entity, the lines the page draws (rates per second, depth in messages, ages in seconds)."""

REDIS_SERIES: tuple[str, ...] = ("used_memory", "maxmemory", "aof_ok")


def _entity_row(before: EntitySample | None, now: EntitySample, seconds: float) -> dict[str, float | None]:
    delta = histogram_delta(before.latency, now.latency) if before is not None else []
    return {
        "accepted": rate(before.accepted if before else None, now.accepted, seconds),
        "sent": rate(before.sent if before else None, now.sent, seconds),
        "handled": rate(before.handled if before else None, now.handled, seconds),
        "depth": float(now.depth),
        "oldest_age": now.oldest_age,
        "latency_p50": quantile(0.5, delta),
        "latency_p99": quantile(0.99, delta),
    }


def _availability(sample: Sample, role: str) -> float | None:
    """The share of entities that see ``role``'s namespace available (None: no entity uses it)."""
    seen = [e.up[role] for e in sample.entities.values() if role in e.up]
    return sum(seen) / len(seen) if seen else None


class _Columns:
    """The series under construction: one value per row, every series as long as ``times``."""

    def __init__(self, entities: Sequence[str]) -> None:
        self.times: list[float] = []
        self.entities: dict[str, dict[str, list[float | None]]] = {
            name: {key: [] for key in ENTITY_SERIES} for name in entities
        }
        self.namespaces: dict[str, list[float | None]] = {role: [] for role in ROLES}
        self.redis: dict[str, list[float | None]] = {key: [] for key in REDIS_SERIES}

    def gap(self, at: float) -> None:
        self.times.append(at)
        for columns in (*self.entities.values(), self.namespaces, self.redis):
            for values in columns.values():
                values.append(None)

    def add(self, at: float, rows: Mapping[str, Mapping[str, float | None]], sample: Sample) -> None:
        self.times.append(at)
        for name, columns in self.entities.items():
            row = rows.get(name, {})
            for key, values in columns.items():
                values.append(row.get(key))
        for role, values in self.namespaces.items():
            values.append(_availability(sample, role))
        for key, values in self.redis.items():
            values.append(None if sample.redis is None else sample.redis.get(key))


def build_series(
    samples: Sequence[Sample], interval: float, names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The page's chart data: ``times``, per entity ``ENTITY_SERIES``, per role the share of entities that
    see the namespace available, Redis's memory and durability, and the bands (``outage``: some entity
    saw that namespace down; ``failover``: an entity off its primary). ``names`` labels roles with their
    namespace names."""
    ordered = sorted(samples, key=lambda s: s.at)
    entities = sorted({name for s in ordered for name in s.entities})
    columns = _Columns(entities)
    failovers = dict.fromkeys(entities, 0)
    previous: Sample | None = None
    for sample in ordered:
        seconds = sample.at - previous.at if previous is not None else 0.0
        if previous is not None and seconds > GAP_FACTOR * interval:
            columns.gap(previous.at + interval)
        rows: dict[str, dict[str, float | None]] = {}
        for name, now in sample.entities.items():
            before = previous.entities.get(name) if previous is not None else None
            rows[name] = dict(_entity_row(before, now, seconds))
            if before is not None and failed_over(now) and not failed_over(before):
                failovers[name] += 1
            rows[name]["failovers"] = float(failovers[name])
        columns.add(sample.at, rows, sample)
        previous = sample
    end = ordered[-1].at + interval if ordered else 0.0
    bands = _bands(ordered, names or {}, end)
    return {
        "interval": interval,
        "times": columns.times,
        "entities": columns.entities,
        "namespaces": columns.namespaces,
        "redis": columns.redis,
        "bands": [asdict(band) for band in bands],
    }


def role_label(role: str, names: Mapping[str, str]) -> str:
    """``primary (sb-east)``: a namespace named by its role and, when known, its name."""
    name = names.get(role)
    return f"{role} ({name})" if name else role


def _bands(ordered: Sequence[Sample], names: Mapping[str, str], end: float) -> list[Any]:
    times = [s.at for s in ordered]
    bands = []
    for role in ROLES:
        down = [any(role in e.up and not e.up[role] for e in s.entities.values()) for s in ordered]
        bands += state_bands("outage", f"{role_label(role, names)} down", times, down, end)
    entities = sorted({name for s in ordered for name in s.entities})
    for name in entities:
        # One band per stretch with the same label: on the secondary, then in the backlog, are two.
        labels = [
            failover_label(name, s.entities[name])
            if name in s.entities and failed_over(s.entities[name])
            else None
            for s in ordered
        ]
        for label in sorted({x for x in labels if x is not None}):
            bands += state_bands("failover", label, times, [x == label for x in labels], end)
    return bands
