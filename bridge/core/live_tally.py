"""The live view's running tally (``bridge report --follow``): per-message flags folded in as events
arrive, and per-entity counts kept current as each message changes class. Pure: no Spark, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MessageFlags:
    """What the journal says about one message (used by the live view, which classifies as it goes)."""

    accepted: bool
    delivered: bool
    dead_lettered: bool
    quarantined: bool
    handled: bool


def is_open(flags: MessageFlags) -> bool:
    """Accepted and nothing terminal yet: still in the outbox, or lost if it is not there."""
    return flags.accepted and not (
        flags.delivered or flags.dead_lettered or flags.quarantined or flags.handled
    )


ACCEPTED, DELIVERED, DEAD_LETTERED, QUARANTINED, HANDLED = 1, 2, 4, 8, 16
"""Bits of what the journal has shown about one message so far."""

LIVE_KEYS = ("accepted", "delivered", "dead_lettered", "quarantined", "handled", "open")


class LiveTally:
    """Per-message flags folded in batch by batch (``bridge report --follow``), with per-entity counts kept
    current as messages change class. Memory grows with the messages seen (a dict entry each)."""

    def __init__(self) -> None:
        self.flags: dict[tuple[str, str], int] = {}
        self.accepted_at: dict[tuple[str, str], float] = {}
        self.copies: dict[tuple[str, str], int] = {}
        self.counts: dict[str, dict[str, int]] = {}

    def _entity(self, entity: str) -> dict[str, int]:
        return self.counts.setdefault(
            entity, dict.fromkeys((*LIVE_KEYS, "broker_duplicates", "suppressed_duplicates"), 0)
        )

    @staticmethod
    def _classes(bits: int) -> list[str]:
        names = [
            name
            for name, bit in (
                ("accepted", ACCEPTED),
                ("delivered", DELIVERED),
                ("dead_lettered", DEAD_LETTERED),
                ("quarantined", QUARANTINED),
                ("handled", HANDLED),
            )
            if bits & bit
        ]
        flags = MessageFlags(
            bool(bits & ACCEPTED),
            bool(bits & DELIVERED),
            bool(bits & DEAD_LETTERED),
            bool(bits & QUARANTINED),
            bool(bits & HANDLED),
        )
        return [*names, "open"] if is_open(flags) else names

    def add(
        self,
        entity: str,
        message_id: str,
        bits: int,
        *,
        accepted_at: float | None = None,
        copies: int = 0,
        suppressed: int = 0,
    ) -> None:
        """Fold in what one batch showed about one message."""
        key = (entity, message_id)
        counts = self._entity(entity)
        before = self.flags.get(key, 0)
        after = before | bits
        if after != before:
            for name in self._classes(before):
                counts[name] -= 1
            for name in self._classes(after):
                counts[name] += 1
            self.flags[key] = after
        if accepted_at is not None and (after & ACCEPTED):
            self.accepted_at[key] = min(accepted_at, self.accepted_at.get(key, accepted_at))
        if copies:
            old = self.copies.get(key, 0)
            self.copies[key] = old + copies
            counts["broker_duplicates"] += max(0, old + copies - 1) - max(0, old - 1)
        counts["suppressed_duplicates"] += suppressed
        if not self._classes(after).count("open"):
            self.accepted_at.pop(key, None)

    def overdue(self, now: float, grace: float) -> list[tuple[str, str]]:
        """Open messages accepted more than ``grace`` seconds before ``now``."""
        return [
            key
            for key, at in self.accepted_at.items()
            if now - at > grace and "open" in self._classes(self.flags.get(key, 0))
        ]
