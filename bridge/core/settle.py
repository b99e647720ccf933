"""What the drainer does with one sent batch: the settle plan, decided from the modes' settlements.

A replication mode settles every entry of a batch (``bridge.core.decisions``); ``plan_settlement`` turns
those settlements and the tenure's state into one ``SettlePlan`` that the drainer carries out
(``ShardSettling.apply``) and nothing else:

- ``changes``: the shared-state changes the settlements carry, each once, in order; applied first.
- ``alerts``: configuration errors to log loudly, every one the settlements carry.
- ``behind``: every entry accepted and nothing changed, so the journal and the acknowledgements are
  written behind the drainer (``bridge.delivery.settler``); otherwise the batch is settled in line.
- ``fates``: one per entry, in batch order: ``Acknowledge``, ``DeadLetterEntry`` (with its reason),
  ``HoldKey`` (the first hold of a key this tenure does not hold yet) or ``StayPending`` (a ``Retry``, or
  a key that is held already; where the entry already landed is remembered).
- ``stop``: the first ``Retry`` of the batch stops the shard until ``stop.until``. A retry that waits for a
  namespace path with an abandoned send this tenure inherited (``bridge.core.abandoned``) waits at least
  until that wait ends; the tenure's own abandoned sends hold nothing back, since its retry carries them.
  ``backoff`` False is a planned wait (a restore barrier): not counted, nothing kept in Redis. A backoff
  may end early when a namespace is seen back (``bridge.core.backoff.resume_at``), never before
  ``stop.floor``.

The order guarantees live in the drainer: the journal (with the dead-letter events) is written before any
entry is acknowledged or moved (docs/durability.md), and the acknowledgements go after the moves.
Pure: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from bridge.core.abandoned import Waits, retry_floor
from bridge.core.decisions import Ack, Change, DeadLetter, Hold, Retry, Settlement, Target
from bridge.core.roles import Role
from bridge.errors import InvariantError


@dataclass(frozen=True)
class Acknowledge:
    """A namespace accepted the entry: acknowledge it (``XACK`` + ``XDEL``)."""


@dataclass(frozen=True)
class DeadLetterEntry:
    """The message can never be delivered: move the entry to the local dead-letter stream."""

    reason: str
    code: str = "message_permanent"


@dataclass(frozen=True)
class HoldKey:
    """Hold the entry's key (its entries stay pending) until ``until``, ``retry_after`` seconds from now."""

    key: str
    until: float
    retry_after: float
    reason: str
    awaits: tuple[Role, ...] = ("primary",)
    """The namespaces whose return, seen for the entity, decides the key again sooner (``Hold.awaits``)."""


@dataclass(frozen=True)
class StayPending:
    """The entry stays pending; ``delivered_to`` (not empty) is where it already landed: remember it."""

    delivered_to: tuple[Target, ...] = ()


Fate: TypeAlias = Acknowledge | DeadLetterEntry | HoldKey | StayPending
"""What happens to one entry of the batch."""


@dataclass(frozen=True)
class Stop:
    """The shard stops until ``until`` (``retry_after`` seconds from now); ``backoff`` counts a failure.

    ``floor``: the earliest a backoff may end when a namespace is seen back before it ran out
    (``bridge.core.backoff.resume_at``): the end of an inherited abandoned send's wait, else now.
    """

    until: float
    retry_after: float
    backoff: bool
    reason: str
    floor: float | None = None
    pending: tuple[Target, ...] = ()
    """Where the retried entry still has to go (``Retry.pending``): what the backoff waits for
    (``bridge.core.seen_back.backoff_awaits``)."""


@dataclass(frozen=True)
class SettlePlan:
    """The drainer's plan for one sent batch (see the module docstring)."""

    now: float
    changes: tuple[Change, ...]
    alerts: tuple[str, ...]
    fates: tuple[Fate, ...]
    stop: Stop | None = None

    @property
    def behind(self) -> bool:
        """Every entry accepted and nothing to change: journal and acknowledgements go behind the drainer."""
        return not self.changes and all(isinstance(f, Acknowledge) for f in self.fates)


def plan_settlement(
    settlements: Sequence[Settlement],
    keys: Sequence[str],
    *,
    held: Collection[str],
    waits: Waits,
    own_waits: Collection[tuple[Role, str]],
    entity: str,
    now: float,
) -> SettlePlan:
    """The plan for a batch whose entries were settled with ``settlements`` (one per entry, in order).

    ``keys`` are the entries' order keys (a ``Hold`` holds one), ``held`` the keys the tenure holds
    already; ``waits`` the shard's waits after abandoned sends and ``own_waits`` those this tenure started
    (the others were inherited and hold a retry back).
    """
    if len(keys) != len(settlements):
        raise InvariantError(f"{len(settlements)} settlements for {len(keys)} entries")
    changes: list[Change] = []
    alerts: list[str] = []
    for settlement in settlements:
        changes.extend(c for c in settlement.changes if c not in changes)
        alerts.extend(settlement.alerts)
    fates = _fates(settlements, keys, held, now)
    first_retry = next((s for s in settlements if isinstance(s, Retry)), None)
    stop = None if first_retry is None else _stop(first_retry, waits, own_waits, entity, now)
    return SettlePlan(now, tuple(changes), tuple(alerts), fates, stop)


def _fates(
    settlements: Sequence[Settlement], keys: Sequence[str], held: Collection[str], now: float
) -> tuple[Fate, ...]:
    fates: list[Fate] = []
    holding = set(held)
    for settlement, key in zip(settlements, keys, strict=True):
        if isinstance(settlement, Ack):
            fates.append(Acknowledge())
        elif isinstance(settlement, DeadLetter):
            fates.append(DeadLetterEntry(settlement.reason, settlement.code))
        elif isinstance(settlement, Hold):
            if key in holding:
                fates.append(StayPending())
            else:
                holding.add(key)
                retry_after = settlement.retry_after
                fates.append(
                    HoldKey(key, now + retry_after, retry_after, settlement.reason, settlement.awaits)
                )
        elif isinstance(settlement, Retry):
            fates.append(StayPending(settlement.delivered_to))
        else:
            raise InvariantError(f"unexpected decision {settlement!r}")
    return tuple(fates)


def _stop(
    retry: Retry, waits: Waits, own_waits: Collection[tuple[Role, str]], entity: str, now: float
) -> Stop:
    inherited = {path: until for path, until in waits.items() if path not in own_waits}
    floor = retry_floor(inherited, retry.pending, entity, now)
    retry_after = max(retry.retry_after, floor)
    return Stop(now + retry_after, retry_after, retry.backoff, retry.reason, now + floor, retry.pending)
