"""The ledger's rules that need no data engine: billing model, failover timeline, the summary's shape.

The Spark job (``bridge.ledger``) reduces millions of events to small tables; what it then does with
those small tables lives here, pure and tested as tables.

Billing follows the operation model of Microsoft's "Paired namespace implementation details and cost
implications" (``docs/references.md``): every copy Service Bus accepts is one send and, when an
application receives it, one receive; a message that goes through a backlog queue costs four operations
(send to the backlog, the syphon's receive from the backlog, the syphon's send to the destination, the
application's receive there); every ping is an operation (two in ``schedule`` mode), and so is every
restore barrier sent to a backlog queue; and an idle syphon still pays for its receive calls (a long poll
that returns nothing). The baseline "without replication" is two operations (send, receive) per delivered
message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

OPERATION_KINDS: tuple[str, ...] = (
    "send",
    "backlog_send",
    "backlog_receive",
    "syphon_send",
    "receive",
    "receive_implied",
    "ping",
    "barrier_send",
    "syphon_poll",
)
"""Kinds of billable operation in the report, priced separately (``journal.prices``)."""

DEFAULT_PRICE_PER_MILLION = 1.0
"""A round placeholder for every kind: set your tier's price per million operations in ``journal.prices``."""

SUMMARY_KEYS: tuple[str, ...] = (
    "accepted",
    "delivered",
    "pending",
    "dead_lettered",
    "quarantined",
    "handled",
    "lost",
    "broker_duplicates",
    "suppressed_duplicates",
)
"""The counts ``bridge report --json`` always prints, summed over entities and per entity."""

LABELS: dict[str, str] = {
    "accepted": "accepted",
    "delivered": "delivered",
    "pending": "pending",
    "dead_lettered": "dead-lettered",
    "quarantined": "quarantined",
    "handled": "handled",
    "lost": "lost",
    "unexpected": "unexpected",
    "broker_duplicates": "extra copies",
    "suppressed_duplicates": "suppressed copies",
    "journal_overflow": "journal overflow",
}
"""A person's name for each count: the column headings of the HTML report and the terminal table."""

EXTRA_KEYS: tuple[str, ...] = (
    "pending_outbox",
    "pending_backlog",
    "unexpected",
    "suppressed_unhandled",
    "journal_overflow",
    "accepted_events",
)
"""Further per-entity counts (``unexpected``: delivered or handled with no acceptance in the journal;
``suppressed_unhandled``: lost, completed by a receiver as a duplicate of an id no receiver handled)."""


def placeholder_kinds(operations: Iterable[Operations], priced: Iterable[str]) -> list[str]:
    """The kinds billed in ``operations`` whose price nobody set (``priced``: the kinds the settings or the
    command line priced): their cost is the placeholder's, not money, and the report says so."""
    given = set(priced)
    return sorted({op.kind for op in operations if op.kind not in given})


def price_table(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Price per million operations for every kind: the placeholder, replaced by ``overrides``.

    Raises ``ValueError`` for an unknown kind or a negative price (a typo would silently price nothing).
    """
    table = dict.fromkeys(OPERATION_KINDS, DEFAULT_PRICE_PER_MILLION)
    for kind, price in (overrides or {}).items():
        if kind not in table:
            raise ValueError(f"unknown operation kind {kind!r} (known: {', '.join(OPERATION_KINDS)})")
        if price < 0:
            raise ValueError(f"price of {kind!r} must not be negative")
        table[kind] = float(price)
    return table


# ---- billing ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EventCount:
    """Events of one kind with the same entity, namespace, path and result, and the operations they
    stand for (the sum of their ``count`` fields, 1 where absent)."""

    entity: str
    kind: str
    namespace: str | None
    path: str | None
    result: str | None
    events: int
    units: int


@dataclass(frozen=True)
class Operations:
    """Billable operations of one kind on one namespace for one entity (or journal scope)."""

    entity: str
    namespace: str
    kind: str
    operations: int


def billable_operations(counts: Iterable[EventCount]) -> list[Operations]:
    """The billing model (module docstring) applied to event counts, one row per entity, namespace and kind.

    Application receives are what receivers journaled (``received``); an entity with no receiver events
    gets one implied receive per copy that reached its destination (``receive_implied``), so the model
    holds for traffic whose consumers are not bridge receivers.
    """
    rows = list(counts)
    measured = {row.entity for row in rows if row.kind == "received"}
    totals: dict[tuple[str, str, str], int] = {}

    def add(entity: str, namespace: str | None, kind: str, n: int) -> None:
        if n:
            key = (entity, namespace or "?", kind)
            totals[key] = totals.get(key, 0) + n

    for row in rows:
        if row.kind == "sent":
            if row.path == "barrier":
                add(row.entity, row.namespace, "barrier_send", row.events)
                continue
            if row.path == "backlog":
                add(row.entity, row.namespace, "backlog_send", row.events)
            elif row.path == "syphon":
                add(row.entity, row.namespace, "syphon_send", row.events)
            else:
                add(row.entity, row.namespace, "send", row.events)
            if row.path != "backlog" and row.entity not in measured:
                add(row.entity, row.namespace, "receive_implied", row.events)
        elif row.kind == "syphoned":
            add(row.entity, row.namespace, "backlog_receive", row.events)
        elif row.kind == "received":
            add(row.entity, row.namespace, "receive", row.events)
        elif row.kind == "ping":
            add(row.entity, row.namespace, "ping", row.units)
        elif row.kind == "syphon_receive" and row.result == "empty":
            add(row.entity, row.namespace, "syphon_poll", row.units)
    return [Operations(e, ns, kind, n) for (e, ns, kind), n in sorted(totals.items())]


@dataclass(frozen=True)
class CostEstimate:
    """Operations and estimated cost, and the same traffic's cost without replication."""

    operations: int
    cost: float
    baseline_operations: int
    baseline_cost: float
    currency: str

    @property
    def resilience_ratio(self) -> float | None:
        """Cost with replication over cost without it (None when nothing was delivered)."""
        if self.baseline_cost > 0:
            return self.cost / self.baseline_cost
        if self.baseline_operations > 0:
            return self.operations / self.baseline_operations
        return None

    def as_dict(self) -> dict[str, object]:
        """The JSON form (``cost`` in the report)."""
        return {
            "operations": self.operations,
            "estimated_cost": round(self.cost, 6),
            "baseline_operations": self.baseline_operations,
            "baseline_cost": round(self.baseline_cost, 6),
            "resilience_ratio": None if self.resilience_ratio is None else round(self.resilience_ratio, 4),
            "currency": self.currency,
        }


def operation_cost(operations: int, kind: str, prices: Mapping[str, float]) -> float:
    """The estimated cost of ``operations`` of ``kind``."""
    return operations * prices[kind] / 1_000_000


def estimate_cost(
    operations: Iterable[Operations], delivered: int, prices: Mapping[str, float], currency: str = "USD"
) -> CostEstimate:
    """Total operations and cost, against the baseline of one send and one receive per delivered message."""
    rows = list(operations)
    total_ops = sum(row.operations for row in rows)
    total_cost = sum(operation_cost(row.operations, row.kind, prices) for row in rows)
    baseline_ops = 2 * delivered
    baseline_cost = delivered * (prices["send"] + prices["receive"]) / 1_000_000
    return CostEstimate(total_ops, total_cost, baseline_ops, baseline_cost, currency)


# ---- failover timeline --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimelineEvent:
    """An entity-level event of the failover story (``role_swapped``, ``failover_engaged``, ...)."""

    at: float
    kind: str
    from_role: str | None = None
    to_role: str | None = None
    reason: str | None = None
    queue: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class Segment:
    """A stretch of time during which the entity's active namespace and backlog state did not change."""

    start: float
    end: float
    active: str
    failed_over: bool

    @property
    def seconds(self) -> float:
        """The segment's length."""
        return max(0.0, self.end - self.start)


@dataclass
class Timeline:
    """Who was active when, and how long the entity spent on the secondary and in the backlog."""

    segments: list[Segment] = field(default_factory=list)
    swaps: int = 0
    failovers: int = 0
    rotation_changes: int = 0
    seconds_on_secondary: float = 0.0
    seconds_failed_over: float = 0.0
    first_failover_at: float | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON form (``failover`` of an entity in the report)."""
        return {
            "swaps": self.swaps,
            "failovers": self.failovers,
            "rotation_changes": self.rotation_changes,
            "seconds_on_secondary": round(self.seconds_on_secondary, 3),
            "seconds_failed_over": round(self.seconds_failed_over, 3),
            "segments": [
                {"start": s.start, "end": s.end, "active": s.active, "failed_over": s.failed_over}
                for s in self.segments
            ],
        }


def failover_timeline(events: Sequence[TimelineEvent], start: float, end: float) -> Timeline:
    """Segments from ``start`` to ``end``: the active role (roles start on the primary unless the first
    swap says otherwise) and whether paired failover was engaged (sends going to the backlog)."""
    ordered = sorted(events, key=lambda e: e.at)
    first_swap = next((e for e in ordered if e.kind == "role_swapped" and e.from_role), None)
    active = first_swap.from_role if first_swap and first_swap.from_role else "primary"
    failed_over = False
    timeline = Timeline()
    cursor = min([start, *(e.at for e in ordered)]) if ordered else start
    stop = max([end, *(e.at for e in ordered)]) if ordered else end

    def close(until: float) -> None:
        if until > cursor or not timeline.segments:
            timeline.segments.append(Segment(cursor, until, active, failed_over))

    for event in ordered:
        if event.kind == "role_swapped" and event.to_role and event.to_role != active:
            close(event.at)
            cursor, active = event.at, event.to_role
            timeline.swaps += 1
        elif event.kind == "failover_engaged" and not failed_over:
            close(event.at)
            cursor, failed_over = event.at, True
            timeline.failovers += 1
            if timeline.first_failover_at is None:
                timeline.first_failover_at = event.at
        elif event.kind == "failover_ended" and failed_over:
            close(event.at)
            cursor, failed_over = event.at, False
        elif event.kind == "backlog_rotation_changed":
            timeline.rotation_changes += 1
    close(stop)
    merged: list[Segment] = []
    for segment in timeline.segments:
        if segment.seconds == 0 and len(timeline.segments) > 1:
            continue
        if merged and (merged[-1].active, merged[-1].failed_over) == (segment.active, segment.failed_over):
            merged[-1] = Segment(merged[-1].start, segment.end, segment.active, segment.failed_over)
        else:
            merged.append(segment)
    timeline.segments = merged
    timeline.seconds_on_secondary = sum(s.seconds for s in merged if s.active == "secondary")
    timeline.seconds_failed_over = sum(s.seconds for s in merged if s.failed_over)
    return timeline


# ---- the summary ----------------------------------------------------------------------------------------
def summarize(entities: Mapping[str, Mapping[str, object]]) -> dict[str, int]:
    """``SUMMARY_KEYS`` and ``EXTRA_KEYS`` summed over entities (missing counts are 0)."""
    totals: dict[str, int] = {}
    for key in (*SUMMARY_KEYS, *EXTRA_KEYS):
        totals[key] = sum(int(str(entity.get(key) or 0)) for entity in entities.values())
    return totals
