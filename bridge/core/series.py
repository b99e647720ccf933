"""Time series of the ledger report: the bucket size, the outbox's depth over time, and the bands drawn
behind the charts (a namespace that was failing, an entity that was failed over).

Spark reduces the journal to counts per time bucket (``bridge.ledger.tables.series``); what those counts
mean over time is decided here, pure and tested as tables. Times are epoch seconds; a bucket ``i`` covers
``[origin + i * step, origin + (i + 1) * step)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

NICE_STEPS: tuple[int, ...] = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
"""Bucket sizes in seconds a person reads at a glance (a 7-day outage still fits in a few hundred)."""

MOST_BUCKETS = 240
"""Points per line at most: about two CSS pixels each in a chart the width of a laptop's screen."""


def bucket_seconds(start: float, end: float, most: int = MOST_BUCKETS) -> int:
    """The smallest nice step that covers ``start``..``end`` in at most ``most`` buckets."""
    span = max(0.0, end - start)
    for step in NICE_STEPS:
        if span / step < most:
            return step
    return math.ceil(span / most / NICE_STEPS[-1]) * NICE_STEPS[-1]


def bucket_count(start: float, end: float, step: int) -> int:
    """How many buckets of ``step`` seconds from ``start`` hold ``end`` (at least one)."""
    return max(1, math.floor(max(0.0, end - start) / step) + 1)


def open_messages(accepted: Sequence[int], settled: Sequence[int]) -> list[int]:
    """Messages accepted and not yet settled (delivered, handled, dead-lettered or quarantined) at the end
    of each bucket: the outbox's depth as the journal tells it. Never below zero (a settlement whose
    acceptance is not in the journal does not make it negative)."""
    depth, out = 0, []
    for came, went in zip(accepted, settled, strict=True):
        depth = max(0, depth + came - went)
        out.append(depth)
    return out


@dataclass(frozen=True)
class Band:
    """A stretch of time shaded behind a chart: ``kind`` ``outage`` (a namespace was failing) or
    ``failover`` (an entity sent to its secondary or to the backlog), with what it was about."""

    kind: str
    label: str
    start: float
    end: float


def outage_bands(
    namespace: str, ok: Sequence[int], failed: Sequence[int], origin: float, step: int
) -> list[Band]:
    """The stretches during which ``namespace`` failed and took nothing: a band opens at the first bucket
    with failures and no success, and closes at the next bucket with a success (a send or a ping it
    accepted), or at the end of the journal. A bucket with both keeps an open band open: the namespace was
    still failing part of the time."""
    bands: list[Band] = []
    opened: float | None = None
    for index, (good, bad) in enumerate(zip(ok, failed, strict=True)):
        at = origin + index * step
        if opened is None and bad and not good:
            opened = at
        elif opened is not None and good and not bad:
            bands.append(Band("outage", namespace, opened, at))
            opened = None
    if opened is not None:
        bands.append(Band("outage", namespace, opened, origin + len(ok) * step))
    return bands


def failover_bands(entity: str, segments: Sequence[tuple[float, float, str, bool]]) -> list[Band]:
    """The failover timeline's segments (start, end, active role, failed over) in which ``entity`` was not
    on its primary as usual: on the secondary, or sending to the backlog queues."""
    bands = []
    for start, end, active, failed_over in segments:
        if failed_over:
            bands.append(Band("failover", f"{entity} in backlog", start, end))
        elif active != "primary":
            bands.append(Band("failover", f"{entity} on {active}", start, end))
    return bands
