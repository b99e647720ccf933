"""The live ledger's rules that need no data engine: its running totals, overdue messages and verdict.

The streaming job (``bridge.ledger.stream``) hands over, per micro-batch, the per-entity counts of the
changed messages before and after the batch (``bridge.ledger.figures.COUNTS``); ``add_counts`` keeps the
running totals. ``verdict`` turns the totals, the open messages and what could not be read into what an
operator reads: ``ok``, ``overdue``, ``incomplete`` or ``no data`` — never "nothing lost" about a journal
it never read. Pure: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Counts = dict[str, dict[str, int]]

VERDICTS = ("ok", "overdue", "incomplete", "no data")
"""``ok``: every accepted message reached an end or is younger than the threshold, and every journal
file was read; ``overdue``: some accepted messages are older than the threshold with no end (the live
form of "lost": held by an outage, or lost); ``incomplete``: none overdue, but some files or events
could not be read; ``no data``: the ledger has read no event, so it can say nothing."""

FAILOVER_KINDS = ("failover_engaged", "role_swapped")
"""The events that count as a failover of an entity (a paired failover engaging, a passive role swap)."""


def add_counts(totals: Counts, after: Counts, before: Counts) -> Counts:
    """``totals`` plus ``after`` minus ``before``, per entity and count (a micro-batch's changed messages)."""
    out = {entity: dict(counts) for entity, counts in totals.items()}
    for sign, part in ((1, after), (-1, before)):
        for entity, counts in part.items():
            row = out.setdefault(entity, {})
            for name, value in counts.items():
                row[name] = row.get(name, 0) + sign * int(value)
    return out


EventKey = tuple[str, str, str | None, str | None, str | None]


def add_event_counts(
    totals: Mapping[EventKey, tuple[int, int]], rows: Iterable[tuple[EventKey, int, int]]
) -> dict[EventKey, tuple[int, int]]:
    """``totals`` of (events, units) per (entity, kind, namespace, path, result) plus a batch's ``rows``."""
    out = dict(totals)
    for key, events, units in rows:
        old = out.get(key, (0, 0))
        out[key] = (old[0] + events, old[1] + units)
    return out


@dataclass(frozen=True)
class EventFigures:
    """Per entity, what the event counts say beside billing: events, failovers, journal overflow."""

    events: dict[str, int]
    failovers: dict[str, int]
    overflow: dict[str, int]


def event_figures(rows: Iterable[Sequence[Any]]) -> EventFigures:
    """``EventFigures`` of event-count rows (entity, kind, namespace, path, result, events, units)."""
    out = EventFigures({}, {}, {})
    for entity, kind, _namespace, _path, _result, events, units in rows:
        out.events[entity] = out.events.get(entity, 0) + int(events)
        if kind in FAILOVER_KINDS:
            out.failovers[entity] = out.failovers.get(entity, 0) + int(events)
        if kind == "journal_overflow":
            out.overflow[entity] = out.overflow.get(entity, 0) + int(units)
    return out


def add_entity_events(
    totals: dict[str, dict[str, Any]], entity: str, first: float | None, last: float | None, no_id: int
) -> None:
    """Fold one batch's group of ``entity``'s events into its running record: the first and last event
    time and the quarantines without a MessageId."""
    record = totals.setdefault(
        entity, {"first_event_at": None, "last_event_at": None, "quarantined_without_id": 0}
    )
    if first is not None and (record["first_event_at"] is None or first < record["first_event_at"]):
        record["first_event_at"] = first
    if last is not None and (record["last_event_at"] is None or last > record["last_event_at"]):
        record["last_event_at"] = last
    record["quarantined_without_id"] = int(record["quarantined_without_id"]) + no_id


@dataclass(frozen=True)
class OpenMessage:
    """An accepted message with no end in the journal yet."""

    entity: str
    message_id: str
    accepted_at: float


@dataclass(frozen=True)
class Unreadable:
    """A journal file the ledger could not read, and why."""

    path: str
    error: str


@dataclass
class LedgerInput:
    """What one publication of the live ledger is made of."""

    counts: Counts
    open_messages: Sequence[OpenMessage]
    events: int
    failovers: Mapping[str, int] = field(default_factory=dict)
    operations: Mapping[str, int] = field(default_factory=dict)
    overflow: Mapping[str, int] = field(default_factory=dict)
    unreadable: Sequence[Unreadable] = ()
    clock: float | None = None
    """The newest event time the ledger has read (the journal's clock, not this host's)."""


def overdue(open_messages: Iterable[OpenMessage], now: float, after: float) -> list[OpenMessage]:
    """Open messages accepted more than ``after`` seconds before ``now``, oldest first."""
    late = [m for m in open_messages if now - m.accepted_at > after]
    return sorted(late, key=lambda m: (m.accepted_at, m.entity, m.message_id))


def verdict(data: LedgerInput, now: float, overdue_after: float, listed: int = 100) -> dict[str, Any]:
    """The published ledger: per entity its counts, overdue count and oldest ``listed`` overdue ids, and
    the overall verdict with the reasons behind it."""
    late = overdue(data.open_messages, now, overdue_after)
    entities: dict[str, dict[str, Any]] = {}
    for name in sorted(set(data.counts) | {m.entity for m in late}):
        counts = data.counts.get(name, {})
        mine = [m for m in late if m.entity == name]
        entities[name] = {
            **{key: int(value) for key, value in sorted(counts.items())},
            "pending": int(counts.get("open", 0)) + int(counts.get("pending_backlog", 0)),
            "overdue": len(mine),
            "overdue_ids": [_listed(m, now) for m in mine[:listed]],
            "failovers": int(data.failovers.get(name, 0)),
            "operations": int(data.operations.get(name, 0)),
            "journal_overflow": int(data.overflow.get(name, 0)),
        }
    reasons = _reasons(data, len(late), overdue_after)
    if data.events == 0:
        word = "no data"
    elif late:
        word = "overdue"
    elif data.unreadable or any(data.overflow.values()):
        word = "incomplete"
    else:
        word = "ok"
    return {
        "verdict": word,
        "reasons": reasons,
        "overdue": len(late),
        "overdue_after": overdue_after,
        "events": data.events,
        "journal_clock": data.clock,
        "unreadable": [{"path": u.path, "error": u.error} for u in data.unreadable],
        "entities": entities,
    }


def _reasons(data: LedgerInput, late: int, overdue_after: float) -> list[str]:
    reasons = []
    if data.events == 0:
        reasons.append("no journal event read yet: nothing can be said about lost messages")
    if late:
        reasons.append(f"{late} accepted messages have no end after {overdue_after:g} s")
    for item in data.unreadable:
        reasons.append(f"could not read {item.path}: {item.error}")
    for name, n in sorted(data.overflow.items()):
        if n:
            reasons.append(f"{name}: {n} events found a full journal and are missing")
    for name, counts in sorted(data.counts.items()):
        if counts.get("suppressed_unhandled"):
            reasons.append(
                f"{name}: {counts['suppressed_unhandled']} messages were completed by a receiver as "
                "duplicates but never handled (their MessageId's fingerprint matched another id's): lost"
            )
        if counts.get("clock_skewed"):
            reasons.append(
                f"{name}: {counts['clock_skewed']} messages were sent or handled before their acceptance by "
                "the journal's times: the hosts' clocks disagree (their latencies are below the truth)"
            )
    return reasons


def _listed(message: OpenMessage, now: float) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "accepted_at": message.accepted_at,
        "age": round(now - message.accepted_at, 3),
    }
