"""Restore barriers in a shard's backlog ledger: what each ledger status means, and when one is lost.

A shard's ledger (``bridge.state.backlog``) maps each backlog queue it used to ``open`` (no barrier yet),
``wait:<token>`` (a barrier being sent, not confirmed) or ``sent:<token>`` (the barrier is in the queue;
the syphon deletes the field when it passes it). ``bridge.core.paired_plan`` sends a barrier to every
queue whose status says one is due (``barrier_due``).

A barrier can be missing from its queue altogether — Redis restored from a backup taken before the syphon
passed it, the queue purged — and the shard would wait for ever. So a token carries the time it was sent
and how many barriers it replaces (``barrier_token``): one the syphon has not passed ``timeout`` seconds
after it was sent is *lost* and a new one is due. That is safe for order: the new barrier lands behind every
message the shard ever sent to the queue, so reaching it in order proves what the lost one would have; the
old token, if its barrier turns up after all, passes nothing. ``read_barrier`` is what the status page, the
``bridge_restore_barriers`` gauge and ``bridge status`` show (docs/paired.md, "Lost restore barriers").

Pure: ``now`` comes in (Redis's clock, the one the send time was taken on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OPEN = "open"
"""A backlog ledger status: the shard sent (or is about to send) to the queue since its last barrier."""
WAITING_PREFIX = "wait:"
"""A backlog ledger status ``wait:<token>``: barrier ``token`` is being sent, not yet confirmed."""
SENT_PREFIX = "sent:"
"""A backlog ledger status ``sent:<token>``: barrier ``token`` is in the queue; the syphon will pass it."""
BarrierState = Literal["open", "sending", "waiting", "lost"]


@dataclass(frozen=True)
class BarrierStatus:
    """One backlog ledger field read at ``now``: ``open`` (no barrier yet), ``sending`` (its send not
    confirmed), ``waiting`` (in the queue, not passed yet) or ``lost`` (not passed within the timeout, or
    sent again after that: ``resends`` > 0). ``sent_at`` is when its current barrier was sent."""

    state: BarrierState
    sent_at: float | None = None
    resends: int = 0
    overdue: bool = False
    """Sent and not passed within the timeout: a new barrier is due."""


def barrier_token(nonce: str, now: float, resends: int) -> str:
    """A barrier token ``<nonce>.<send time, ms>.<resends>``: the ledger then tells how old it is."""
    return f"{nonce}.{int(now * 1000)}.{resends}"


def read_barrier(status: str, now: float, timeout: float) -> BarrierStatus:
    """What a ledger status says at ``now`` (a token without a send time counts as overdue)."""
    if status == OPEN or not status:
        return BarrierStatus("open")
    _, _, token = status.partition(":")
    parts = token.split(".")
    sent_at: float | None = None
    resends = 0
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        sent_at, resends = int(parts[1]) / 1000, int(parts[2])
    if status.startswith(WAITING_PREFIX):
        return BarrierStatus("sending", sent_at, resends)
    overdue = sent_at is None or now - sent_at >= timeout
    return BarrierStatus("lost" if overdue or resends else "waiting", sent_at, resends, overdue)


def barrier_due(status: str, now: float, timeout: float) -> bool:
    """A ledger status whose queue needs a (new) barrier: ``open``, a barrier send never confirmed, or a
    barrier not passed within ``timeout`` (lost)."""
    if status == OPEN or status.startswith(WAITING_PREFIX):
        return True
    return status.startswith(SENT_PREFIX) and read_barrier(status, now, timeout).overdue


def next_barrier_token(status: str, nonce: str, now: float, timeout: float) -> str:
    """The token of the barrier to send for a queue whose ledger says ``status``: a lost one's replacement
    counts one resend more; an unconfirmed one's keeps its count."""
    current = read_barrier(status, now, timeout)
    return barrier_token(nonce, now, current.resends + (1 if current.overdue else 0))
