"""The status page's rolling history: time slots, what one sample holds, and the series drawn from samples.

One process per time slot (``bridge.state.history``) stores a raw *sample*: per entity the counters it can
read (messages accepted into the outbox, sends, messages handled, a histogram of delivery latencies, all
cumulative since the bridge started) and the gauges of that moment (outbox depth and oldest age, active
role, backlog, each namespace's availability), plus Redis's memory and durability. Rates, percentiles,
the failover count and the outage and failover bands are decided here when the history is read, from
consecutive samples: a sample depends on no other, so a slot that nobody sampled (every serve process was
down) is a gap in the lines, never a wrong number. Times are epoch seconds on Redis's clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.core.series import Band

LATENCY_BOUNDS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the delivery-latency buckets; one more bucket holds everything above."""

GAP_FACTOR = 2.5
"""Two samples further apart than this many intervals have a gap between them (no line drawn across)."""

ROLES: tuple[str, ...] = ("primary", "secondary")


def slot_of(now: float, interval: float) -> int:
    """The time slot ``now`` falls in: slot ``n`` starts at ``n * interval``."""
    return math.floor(now / interval)


def latency_bucket(seconds: float) -> int:
    """The index of the latency bucket that counts ``seconds`` (``len(LATENCY_BOUNDS)``: above all)."""
    for index, bound in enumerate(LATENCY_BOUNDS):
        if seconds <= bound:
            return index
    return len(LATENCY_BOUNDS)


def window_start(now: float, window: float) -> float:
    """The oldest sample time a history of ``window`` seconds keeps at ``now`` (older ones are trimmed)."""
    return now - window


def entry_age(entry_id: str, now: float) -> float | None:
    """Seconds since an outbox entry was written (its stream id starts with the write's milliseconds)."""
    millis = entry_id.partition("-")[0]
    return max(0.0, now - int(millis) / 1000.0) if millis.isdigit() else None


def latency_counts(ages: Sequence[float | None]) -> dict[int, int]:
    """How many of ``ages`` fall in each latency bucket (only buckets with some)."""
    counts: dict[int, int] = {}
    for age in ages:
        if age is None:
            continue
        index = latency_bucket(age)
        counts[index] = counts.get(index, 0) + 1
    return counts


@dataclass(frozen=True)
class EntitySample:
    """One entity at one moment: counters (cumulative) and gauges."""

    accepted: int | None
    """Messages ever written to the outbox (None: the server cannot tell, Redis before 7.0)."""
    sent: int
    handled: int
    depth: int
    oldest_age: float
    latency: tuple[int, ...]
    """Per latency bucket, deliveries ever counted there."""
    active: str
    backlog: bool
    up: Mapping[str, bool] = field(default_factory=dict)
    """Per configured role: whether the namespace is available for this entity."""


@dataclass(frozen=True)
class Sample:
    """Everything sampled in one slot."""

    at: float
    entities: Mapping[str, EntitySample]
    redis: Mapping[str, float] | None = None
    """``used_memory``, ``maxmemory``, ``aof_ok`` (1: AOF on and its last write succeeded, else 0)."""

    def as_json(self) -> dict[str, Any]:
        """The compact form stored in Redis (short keys: a sample is stored hundreds of times)."""
        return {
            "t": self.at,
            "e": {
                name: {
                    "a": e.accepted,
                    "s": e.sent,
                    "h": e.handled,
                    "d": e.depth,
                    "o": round(e.oldest_age, 3),
                    "l": list(e.latency),
                    "r": e.active,
                    "b": int(e.backlog),
                    "u": {role: int(up) for role, up in e.up.items()},
                }
                for name, e in self.entities.items()
            },
            "x": dict(self.redis) if self.redis is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sample:
        """The inverse of ``as_json``."""
        entities = {
            name: EntitySample(
                accepted=e.get("a"),
                sent=int(e.get("s", 0)),
                handled=int(e.get("h", 0)),
                depth=int(e.get("d", 0)),
                oldest_age=float(e.get("o", 0.0)),
                latency=tuple(int(n) for n in e.get("l", ())),
                active=str(e.get("r", "primary")),
                backlog=bool(e.get("b", 0)),
                up={role: bool(up) for role, up in e.get("u", {}).items()},
            )
            for name, e in data.get("e", {}).items()
        }
        return cls(at=float(data["t"]), entities=entities, redis=data.get("x"))


def rate(before: float | None, after: float | None, seconds: float) -> float | None:
    """Per-second increase of a counter; a counter that went down was reset, so ``after`` is all new."""
    if before is None or after is None or seconds <= 0:
        return None
    grown = after - before if after >= before else after
    return grown / seconds


def quantile(q: float, counts: Sequence[int]) -> float | None:
    """The ``q`` quantile of latencies bucketed as ``LATENCY_BOUNDS`` (linear within a bucket, as
    Prometheus's ``histogram_quantile``); None without observations. Above the last bound: that bound."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(LATENCY_BOUNDS):
                return LATENCY_BOUNDS[-1]
            low = LATENCY_BOUNDS[index - 1] if index else 0.0
            return low + (LATENCY_BOUNDS[index] - low) * (rank - seen) / count
        seen += count
    return LATENCY_BOUNDS[-1]


def histogram_delta(before: Sequence[int], after: Sequence[int]) -> list[int]:
    """Per-bucket growth between two cumulative histograms (a shrunk bucket was reset: all of it new)."""
    width = max(len(before), len(after))
    old = list(before) + [0] * (width - len(before))
    new = list(after) + [0] * (width - len(after))
    return [b - a if b >= a else b for a, b in zip(old, new, strict=True)]


def trend(values: Sequence[float | None]) -> str:
    """An arrow for where ``values`` went from first to last known: up, down or flat."""
    known = [v for v in values if v is not None]
    if len(known) < 2 or known[-1] == known[0]:
        return "\u2192"
    return "\u2191" if known[-1] > known[0] else "\u2193"


def state_bands(
    kind: str, label: str, times: Sequence[float], flags: Sequence[bool], end: float
) -> list[Band]:
    """The stretches in which ``flags`` held: each opens at the first sample with the flag and closes at
    the next sample without it, or at ``end`` when it still holds."""
    bands: list[Band] = []
    opened: float | None = None
    for at, flag in zip(times, flags, strict=True):
        if flag and opened is None:
            opened = at
        elif not flag and opened is not None:
            bands.append(Band(kind, label, opened, at))
            opened = None
    if opened is not None:
        bands.append(Band(kind, label, opened, end))
    return bands


def failed_over(sample: EntitySample) -> bool:
    """The entity sends elsewhere than its primary as usual: on the secondary or to the backlog."""
    return sample.backlog or sample.active != "primary"


def failover_label(entity: str, sample: EntitySample) -> str:
    """What a failover band says: ``orders on secondary``, ``payments in backlog``."""
    return f"{entity} in backlog" if sample.backlog else f"{entity} on {sample.active}"
