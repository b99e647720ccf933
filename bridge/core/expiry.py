"""What is left of a message's TimeToLive when it leaves the outbox, or that nothing is.

An application's TimeToLive counts from when the bridge accepted the message (``Envelope.accepted_at``),
not from when a send worker got round to it: a message accepted with 60 s to live that waited ten minutes
in the outbox (an outage, a stopped worker) is expired, and one that waited 20 s has 40 s left. So every
send from the outbox — direct, to the backup, to both namespaces, aliased into a backlog queue — carries
the *remaining* TTL, and a message with nothing left is not sent: it goes to the local dead-letter stream
with the reason ``expired_before_delivery`` (docs/durability.md).

Scheduled messages: Service Bus counts a scheduled message's TTL from its ScheduledEnqueueTimeUtc, so the
TTL's clock starts at the later of acceptance and the scheduled time. A message sent before its scheduled
time keeps its full TTL; one whose scheduled time passed while it waited has what is left counted from
the scheduled time, as if it had been enqueued then.

Clocks: ``accepted_at`` is the ingress host's clock, ``now`` the send worker's (the delivery context's
clock, Redis's). The remaining TTL is off by their difference: a message may expire up to that skew early
or late. The TTL is never lengthened: a ``now`` before ``accepted_at`` (an ingress clock ahead) counts as
no wait at all. Pure: ``now`` is an argument.

Messages built ahead: active mode builds and packs a batch's messages with its read, while the batch
before it is in flight (``bridge.delivery.read_ahead``), with the TTL left at that read. They go only while
that is at most ``BUILT_TTL_SLACK`` above what is left at the send (``built_ttl_holds``); a batch that
waited longer (the batch before it was slow) builds its messages again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from bridge.core.aliasing import MIN_REMAINING_TTL, remaining_time_to_live

EXPIRED_BEFORE_DELIVERY = "expired_before_delivery"
"""The local dead-letter code (and reason prefix) of a message whose TTL ran out in the outbox."""
BUILT_TTL_SLACK = 0.5
"""Seconds a message built ahead of its send may carry above the TTL left at the send."""


@dataclass(frozen=True)
class Live:
    """Send it with ``time_to_live`` seconds (None: no TTL, the entity's default applies)."""

    time_to_live: float | None


@dataclass(frozen=True)
class Expired:
    """Its TTL ended at ``expired_at`` (epoch seconds), before delivery: dead-letter it locally."""

    expired_at: float
    time_to_live: float

    @property
    def reason(self) -> str:
        """The dead-letter and journal reason (starts with ``EXPIRED_BEFORE_DELIVERY``)."""
        return f"{EXPIRED_BEFORE_DELIVERY}: TTL of {self.time_to_live:g}s ended at {self.expired_at:.3f}"


DeliveryTtl: TypeAlias = Live | Expired


def delivery_ttl(
    time_to_live: float | None, accepted_at: float, scheduled_at: datetime | None, now: float
) -> DeliveryTtl:
    """The TTL a send at ``now`` carries for a message accepted at ``accepted_at``, or ``Expired``.

    The clock starts at ``accepted_at``, or at ``scheduled_at`` when that is later (module docstring).
    """
    if time_to_live is None:
        return Live(None)
    scheduled = None if scheduled_at is None else scheduled_at.timestamp()
    remaining = min(time_to_live, remaining_time_to_live(time_to_live, accepted_at, scheduled, now))
    if remaining < MIN_REMAINING_TTL:
        start = accepted_at if scheduled is None else max(accepted_at, scheduled)
        return Expired(expired_at=start + time_to_live, time_to_live=time_to_live)
    return Live(remaining)


def built_ttl_holds(built: float | None, left: float | None) -> bool:
    """A message built with TTL ``built`` may still go when ``left`` is what is left of its TTL now: at
    most ``BUILT_TTL_SLACK`` longer (None: no TTL)."""
    if built is None or left is None:
        return built == left
    return built - left <= BUILT_TTL_SLACK
