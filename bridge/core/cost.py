"""A tally of billable Service Bus operations, so the cost of replication is visible (``docs/paired.md``).

Every send, ping and syphon receive call is a billed operation on Service Bus (Standard tier bills per
operation; ``docs/references.md``). A message that goes through a backlog queue costs four
operations end to end instead of two (send to backlog, receive from backlog, send to primary, receive from
primary), and an idle syphon still pays for its polls: with 10 backlog queues and a 15-minute long poll
that is 40 receive calls an hour. The end-to-end model over journaled events, the implied receives
included, is ``bridge.core.ledger.billable_operations``.

``CostTally`` is an immutable value: workers add to a local one and the adapter flushes it to a Redis hash
with HINCRBY per field (``to_fields``); ``bridge status`` and the ledger read it back with ``from_fields``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import StrEnum

from bridge.core.hash_fields import FieldMap, decode_fields


class Operation(StrEnum):
    """A kind of billable operation; the value is the ``CostTally`` field and Redis hash field."""

    PRIMARY_SEND = "primary_sends"
    BACKUP_SEND = "backup_sends"
    BACKLOG_SEND = "backlog_sends"
    PING = "pings"
    SYPHON_RECEIVE = "syphon_receives"
    SYPHON_SEND = "syphon_sends"
    PROBE = "probes"
    BARRIER = "barrier_sends"


@dataclass(frozen=True)
class CostTally:
    """Counts of billable operations.

    ``syphon_receives`` counts receive *calls* (an empty long poll is billed too), not messages received.
    A batch send counts one operation per message, as Service Bus bills it. ``primary_sends`` and
    ``backup_sends`` are the workers' sends of outbox messages; the syphon's sends to the primary are
    ``syphon_sends`` only. ``probes`` are the operations that measure a namespace carrying no traffic for
    the entity (``bridge.delivery.probe``: schedule and cancel, two per probe). ``barrier_sends`` are the
    restore barriers of ordered paired mode (one per backlog queue used, per outbox shard, per restore).
    """

    primary_sends: int = 0
    backup_sends: int = 0
    backlog_sends: int = 0
    pings: int = 0
    syphon_receives: int = 0
    syphon_sends: int = 0
    probes: int = 0
    barrier_sends: int = 0

    def add(self, operation: Operation, count: int = 1) -> CostTally:
        """A tally with ``count`` more of ``operation``."""
        if count < 0:
            raise ValueError("count must not be negative")
        name = operation.value
        return replace(self, **{name: getattr(self, name) + count})

    def __add__(self, other: CostTally) -> CostTally:
        return CostTally(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total(self) -> int:
        """All billable operations the bridge itself performed."""
        return sum(getattr(self, f.name) for f in fields(self))

    def to_fields(self) -> dict[str, str]:
        """Every counter as a string (HINCRBY deltas or a full HSET)."""
        return {f.name: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_fields(cls, data: FieldMap) -> CostTally:
        """Inverse of ``to_fields``; unknown fields are ignored, missing ones are 0."""
        decoded = decode_fields(data)
        return cls(**{f.name: int(decoded.get(f.name, "0")) for f in fields(cls)})
