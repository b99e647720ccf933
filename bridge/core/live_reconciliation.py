"""The report's reconciliation rows from the live ledger's running totals, without reading the journal
again (``bridge report --from-ledger``).

The live ledger keeps, per entity, the sums of ``bridge.ledger.figures.COUNTS`` over every message it has
read, each entity's first and last event time and its quarantines without a MessageId, and in its state
every message still open or lost as a suppressed duplicate. What the batch report adds to those counts
needs the outbox snapshot: an open message is *pending* while it waits in the outbox (in the snapshot, or
accepted after the journal position the snapshot was taken against) and *lost* otherwise; with no
snapshot it is pending, and in a drained run it is lost. ``reconcile`` applies the batch report's rule
(``bridge.ledger.tables.classify``) to the held messages, so both give the same row; the agreement is
tested on the same journals.

Pure: everything comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

LOST_IDS_LISTED = 1000
"""Lost MessageIds listed per entity (the batch report's ``lost`` table holds all)."""


@dataclass(frozen=True)
class HeldMessage:
    """A message of the live ledger's state that the reconciliation needs: open, or a suppressed
    duplicate never handled."""

    entity: str
    message_id: str
    accepted_at: float | None
    accepted_pos: tuple[int, int] | None
    """The acceptance's journal stream id (ms, seq)."""
    is_open: bool
    suppressed_unhandled: bool


@dataclass(frozen=True)
class OutboxCheck:
    """What is known about the outbox: the snapshot's MessageIds and the journal position per entity it
    was taken against (``checked``), or that the run is drained, or nothing."""

    checked: bool = False
    drained: bool = False
    in_outbox: Collection[tuple[str, str]] = frozenset()
    watermarks: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def waiting(self, message: HeldMessage) -> bool:
        """An open message still in the outbox, or too recent to judge."""
        if self.drained:
            return False
        if not self.checked:
            return True
        if (message.entity, message.message_id) in self.in_outbox:
            return True
        mark = self.watermarks.get(message.entity)
        return mark is None or message.accepted_pos is None or message.accepted_pos > mark


def reconcile(
    counts: Mapping[str, Mapping[str, int]],
    entity_events: Mapping[str, Mapping[str, Any]],
    event_totals: Mapping[str, int],
    held: Iterable[HeldMessage],
    check: OutboxCheck,
) -> dict[str, dict[str, Any]]:
    """Per entity with events: the batch report's reconciliation row (``bridge.core.ledger.SUMMARY_KEYS``
    and ``EXTRA_KEYS`` but ``journal_overflow``, ``events``, ``first_event_at``, ``last_event_at``) and its
    ``lost_ids``, oldest acceptance first.

    ``counts``: the running ``COUNTS`` per entity; ``entity_events``: first and last event time and
    ``quarantined_without_id``; ``event_totals``: events per entity."""
    pending_outbox: dict[str, int] = {}
    lost: dict[str, list[HeldMessage]] = {}
    for message in held:
        waiting = message.is_open and check.waiting(message)
        if waiting:
            pending_outbox[message.entity] = pending_outbox.get(message.entity, 0) + 1
        if (message.is_open and not waiting) or message.suppressed_unhandled:
            lost.setdefault(message.entity, []).append(message)
    # every count in every row, 0 where an entity has none (an entity whose events name no message)
    names = sorted({name for entity_counts in counts.values() for name in entity_counts} - {"open"})
    rows: dict[str, dict[str, Any]] = {}
    for entity, record in entity_events.items():
        if entity.startswith("~"):
            continue
        mine = counts.get(entity, {})
        row: dict[str, Any] = {name: int(mine.get(name, 0)) for name in names}
        row["quarantined_without_id"] = int(record.get("quarantined_without_id") or 0)
        row["events"] = int(event_totals.get(entity, 0))
        row["first_event_at"] = record.get("first_event_at")
        row["last_event_at"] = record.get("last_event_at")
        row["pending_outbox"] = pending_outbox.get(entity, 0)
        row["pending"] = row["pending_outbox"] + int(mine.get("pending_backlog", 0))
        row["quarantined"] = int(mine.get("quarantined_messages", 0)) + row["quarantined_without_id"]
        gone = sorted(lost.get(entity, []), key=lambda m: (m.accepted_at is not None, m.accepted_at or 0.0))
        row["lost"] = len(gone)
        row["lost_ids"] = [m.message_id for m in gone[:LOST_IDS_LISTED]]
        rows[entity] = row
    return rows
