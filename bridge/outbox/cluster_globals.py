"""What a Cluster writer keeps about the bridge's global keys, so one dead master stalls only its own slots.

On a Cluster the entity set (``bridge:{bridge}:entities``) and the totals (``bridge:{bridge}:stats``)
live in the ``{bridge}`` slot, on one master, apart from every entity's slot. Touched after every write,
they made every write wait for, and then fail with, that one master. This state lets a write skip them:

- **Listing** (``bridge.outbox.entities``): a write lists its entity after its ``XADD``. An entity this
  process listed, or wrote to after listing it, less than half of ``workers.entity_idle`` ago cannot have
  been retired since (retirement needs ``entity_idle`` seconds without a write), so it is not listed again.
  Entities named in the settings are watched by every process whatever the set says, so a failed listing
  refuses nothing for them. A new entity not in the settings cannot be accepted while the ``{bridge}``
  slot is down: its write is refused (503), since an entry must never sit in an unlisted entity.
- **Totals**: the Cluster's total bound is approximate already (checked against the last value this process
  saw); what a failed ``HINCRBY`` did not add is kept and added by the next one that goes through.
- After a failure the global keys are left alone for ``PAUSE`` seconds: a dead master costs each write a
  connection timeout otherwise.

Pure: no I/O, ``now`` is the caller's monotonic clock (``bridge.outbox.store`` does the round trips).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

PAUSE = 1.0
"""Seconds the global keys are left alone after a failure."""


@dataclass
class ClusterGlobals:
    """Listing times, totals not added yet, and the pause after a failure (see the module docstring)."""

    configured: Collection[str]
    relist_after: float
    """Seconds after which an entity is listed again (half of ``workers.entity_idle``)."""
    keep: int = 100_000
    """Listing times kept at most (many short-lived entities): the oldest go first."""
    listed_at: dict[str, float] = field(default_factory=dict)
    unsent: tuple[int, int] = (0, 0)
    paused_until: float = 0.0

    def paused(self, now: float) -> bool:
        """True while a recent failure keeps the writes off the global keys."""
        return now < self.paused_until

    def failed(self, now: float) -> None:
        """A round trip to the ``{bridge}`` slot failed."""
        self.paused_until = now + PAUSE

    def to_list(self, stored: Iterable[str], now: float) -> list[str]:
        """The entities just written to that must be listed (not listed recently by this process)."""
        return sorted(e for e in stored if now - self.listed_at.get(e, float("-inf")) >= self.relist_after)

    def listed(self, entities: Iterable[str], now: float) -> None:
        """``entities`` are in the set as of ``now`` (the time taken before their write)."""
        for entity in entities:
            self.listed_at[entity] = now
        if len(self.listed_at) > self.keep:
            oldest = sorted(self.listed_at.items(), key=lambda item: item[1])
            for entity, _ in oldest[: len(self.listed_at) - self.keep]:
                del self.listed_at[entity]

    def must_refuse(self, entity: str) -> bool:
        """An unlisted entity whose write cannot stand: it is not in the settings."""
        return entity not in self.configured

    def add(self, messages: int, size: int) -> tuple[int, int]:
        """What to add to the totals now: this write's and what earlier failures left."""
        self.unsent = (self.unsent[0] + messages, self.unsent[1] + size)
        return self.unsent

    def added(self) -> None:
        """The totals took everything ``add`` returned."""
        self.unsent = (0, 0)
