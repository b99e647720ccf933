"""When the syphon polls, renews and waits (paired mode, ``docs/paired.md``): pure timing decisions, no I/O.

A syphon run holds the leases of some backlog queues for ``syphon_run_budget`` seconds. Each queue is
long-polled (``syphon_receive_wait``, cut to what is left of the budget), the leases are renewed every
third of their TTL by a keeper thread, and the locks of a batch still being worked on are renewed before
a send once half of their lock time has passed or less than one attempt deadline of it is left. A run
polls only while at least one paired entity may receive: when every one of them is failed over (or its
FailoverInterval timer runs) the backlog can only wait, and an idle poll would be a billed operation for
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bridge.core.paired import PairedState

LEASE_RENEWALS_PER_TTL = 3
"""The keeper renews a lease three times per TTL, so two missed renewals still keep it."""


def receive_wait(remaining: float, long_poll: float) -> float:
    """The next receive's long poll: ``syphon_receive_wait``, at most the budget left (0: stop)."""
    return max(0.0, min(long_poll, remaining))


def lease_renew_interval(lease_ttl: float) -> float:
    """Seconds between two renewals of a held lease."""
    if lease_ttl <= 0:
        raise ValueError("lease TTL must be positive")
    return lease_ttl / LEASE_RENEWALS_PER_TTL


def lease_ttl_ms(lease_ttl: float) -> int:
    """The lease TTL as whole milliseconds (``SET ... PX``), at least 1."""
    return max(1, round(lease_ttl * 1000))


def lock_renewal_due(received_at: float, locked_until: float | None, now: float, margin: float = 0.0) -> bool:
    """The batch's message locks should be renewed before the next send: half of the lock time since
    receipt (or the last renewal) has passed, or less than ``margin`` is left (the next send may take up
    to one attempt deadline, and a message whose lock ran out cannot be completed after it was sent).

    ``locked_until`` is the earliest lock expiry of the batch's unsettled messages (None: unknown, never
    renewed). All three times are on one clock: the syphon's monotonic clock, ``received_at`` when the
    call that took the locks started, ``locked_until`` that plus ``LockSpan.shortest``.
    """
    if locked_until is None:
        return False
    return now >= received_at + (locked_until - received_at) / 2 or locked_until - now < margin


@dataclass(frozen=True)
class LockSpan:
    """How long the message locks one call took (a receive, a receive of deferred messages, a renewal) last,
    in seconds of the syphon's own monotonic clock: at least ``shortest`` from when the call *started* (a
    lock cannot begin before it was asked for), at most ``longest`` from when it *returned* (nor after the
    answer arrived). The first bounds when to renew, the second how long a later run must wait."""

    shortest: float
    longest: float


def lock_span(
    call: float, lock_duration: float | None, left: tuple[float, float] | None, assumed: float
) -> LockSpan | None:
    """The ``LockSpan`` of a call that took ``call`` seconds.

    With the queue's LockDuration known (``lock_duration``), that is all it takes: no clock but the syphon's
    own monotonic one is involved, so a host clock off Service Bus's changes nothing. Without it, the
    locks' own expiries stand in: ``left`` is (earliest, latest) expiry minus the syphon's clock when the call
    returned (Service Bus's clock against the syphon's, so skew between them enters), with ``assumed`` (the
    LockDuration the bridge provisions) as a cap on the first and a floor on the second. None when the
    locks' expiries are not known either.
    """
    if lock_duration is not None:
        return LockSpan(lock_duration, lock_duration)
    if left is None:
        return None
    earliest, latest = left
    return LockSpan(max(0.0, min(call + earliest, assumed)), max(latest, assumed))


def may_poll(states: Iterable[PairedState]) -> bool:
    """At least one paired entity is healthy, so a backlog message could be delivered now."""
    return any(state.healthy for state in states)
