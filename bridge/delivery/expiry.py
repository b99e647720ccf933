"""The outbox wait counted against each message's TTL before a mode sends it (``bridge.core.expiry``).

``settle_unexpired`` hands a replication mode only the entries with TTL left, each with its envelope's
``time_to_live`` set to what is left at ``now``, so whatever the mode builds from it (a direct send, a
send to the backup or to both namespaces, an aliased backlog message) carries the remaining TTL. The
expired entries are settled ``DeadLetter`` with code and reason ``expired_before_delivery`` and are never
sent. The settlements come back one per entry, in batch order, as the drainer applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from bridge.core.decisions import DeadLetter, Settlement
from bridge.core.expiry import EXPIRED_BEFORE_DELIVERY, Expired, delivery_ttl
from bridge.errors import InvariantError
from bridge.outbox.reader import OutboxEntry

if TYPE_CHECKING:  # the drainer builds messages ahead with ``with_remaining_ttl``: no import cycle
    from bridge.delivery.modes.base import Sender, SendPort


def with_remaining_ttl(entry: OutboxEntry, now: float) -> OutboxEntry | Expired:
    """``entry`` with the TTL it has left at ``now``, or ``Expired``."""
    envelope = entry.envelope
    if envelope is None:
        raise InvariantError("an undecodable entry reached the TTL check (quarantined before)")
    ttl = delivery_ttl(envelope.time_to_live, envelope.accepted_at, envelope.scheduled_enqueue_time_utc, now)
    if isinstance(ttl, Expired):
        return ttl
    if ttl.time_to_live == envelope.time_to_live:
        return entry
    return replace(entry, envelope=replace(envelope, time_to_live=ttl.time_to_live))


def settle_unexpired(
    sender: Sender, port: SendPort, entries: Sequence[OutboxEntry], now: float
) -> list[Settlement]:
    """Send the entries with TTL left through ``sender``; dead-letter the expired ones (module docstring)."""
    checked = [with_remaining_ttl(entry, now) for entry in entries]
    live = [c for c in checked if isinstance(c, OutboxEntry)]
    sent = iter(sender.settle(port, live) if live else [])
    return [
        DeadLetter(c.reason, code=EXPIRED_BEFORE_DELIVERY) if isinstance(c, Expired) else next(sent)
        for c in checked
    ]
