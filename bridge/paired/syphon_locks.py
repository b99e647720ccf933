"""The lock times of one syphon run (``bridge.paired.syphon``): when its batches' locks end, when to renew
them, and the marker that makes a later run wait for the locks of a run that died.

Lock times are measured on this process's monotonic clock from the queue's LockDuration (read once per run
with the administration client), never by comparing Service Bus's ``locked_until`` with this host's clock:
a lock began no earlier than the call that took it started and no later than it returned (``LockSpan``).
Without the LockDuration the locks' own expiries stand in, against the delivery context's clock (Redis's),
bounded by the provisioned minute: docs/replication.md, "Clocks".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from bridge.core.outcomes import describe_error
from bridge.core.syphon_timing import LockSpan, lock_renewal_due, lock_span
from bridge.delivery.context import DeliveryContext
from bridge.errors import NamespaceError
from bridge.paired.queue_lock import ASSUMED_LOCK, queue_lock_duration
from bridge.servicebus.messages import ReceivedMessage
from bridge.state.aside import AsideStore

log = logging.getLogger(__name__)

LOCK_MARGIN = 2.0
"""Seconds added to a lock's expiry before a later run may assume it ended (in-flight calls; the marker's
expiry is Redis's clock, the lock's Service Bus's: they only need to agree on how long a second is)."""


class Batch:
    """Messages received in one call: which are unsettled, which were set aside before, lock times.

    ``lock_from`` and ``locked_until`` are on the syphon's monotonic clock: when the calls that took the
    locks started, and the earliest their locks may end (None: unknown, never renewed)."""

    def __init__(
        self, messages: Sequence[ReceivedMessage], window: tuple[float, float] | None, from_aside: bool
    ) -> None:
        self.messages = list(messages)
        self.from_aside = from_aside
        self.unsettled = set(range(len(messages)))
        self.set_aside: set[int] = set()
        self.lock_from: float = 0.0 if window is None else window[0]
        self.locked_until: float | None = None if window is None else window[1]


class RunLocks:
    """The locks one run holds on ``queue``: noted as calls return them, renewed when due, marked in Redis."""

    def __init__(
        self, ctx: DeliveryContext, queue: str, aside: AsideStore, monotonic: Callable[[], float]
    ) -> None:
        self.ctx = ctx
        self.queue = queue
        self.aside = aside
        self.monotonic = monotonic
        """The clock lock times are measured on (``Batch``): this process's, immune to any host's skew."""
        self._lock_duration: float | None = None
        self._lock_read = False
        self._window: tuple[float, float] | None = None

    def note(self, messages: Sequence[ReceivedMessage], started: float) -> None:
        """``messages`` came locked from a call that started at ``started`` (monotonic): the next batch
        renews by them, and a marker outlives them."""
        ended = self.monotonic()
        span = self._span([m.locked_until_utc for m in messages], ended - started)
        if span is None:
            return
        until = started + span.shortest
        window = self._window
        self._window = (
            (started, until) if window is None else (min(window[0], started), min(window[1], until))
        )
        self._mark(ended + span.longest)

    def take_window(self) -> tuple[float, float] | None:
        """The lock window of the messages noted since the last batch, for the next ``Batch``."""
        window, self._window = self._window, None
        return window

    def queue_lock(self) -> float | None:
        """The queue's LockDuration, read once per run (``queue_lock_duration``)."""
        if not self._lock_read:
            self._lock_read = True
            self._lock_duration = queue_lock_duration(self.ctx.settings, self.queue)
        return self._lock_duration

    def renew_if_due(self, batch: Batch) -> bool:
        """Renew the unsettled messages' locks when half their time has passed or less than one attempt
        deadline is left (``lock_renewal_due``); True when they were renewed."""
        now = self.monotonic()
        margin = self.ctx.pool.attempt_deadline
        if not batch.unsettled or not lock_renewal_due(batch.lock_from, batch.locked_until, now, margin):
            return False
        messages = [batch.messages[i] for i in sorted(batch.unsettled)]
        try:
            expiries = self.ctx.pool.queues.renew_locks("secondary", self.queue, messages)
        except NamespaceError as error:
            log.info("renewing locks in %s failed: %s", self.queue, describe_error(error))
            return False
        ended = self.monotonic()
        span = self._span(list(expiries), ended - now)
        batch.lock_from = now
        batch.locked_until = None if span is None else now + span.shortest
        if span is not None:
            self._mark(ended + span.longest)
        return True

    def _span(self, expiries: Sequence[datetime | None], call: float) -> LockSpan | None:
        """The ``LockSpan`` of a call that took ``call`` seconds and returned locks ending at ``expiries``."""
        if not expiries:
            return None
        known = [t.timestamp() for t in expiries if t is not None]
        now = self.ctx.clock()
        left = (min(known) - now, max(known) - now) if known else None
        return lock_span(call, self.queue_lock(), left, ASSUMED_LOCK)

    def _mark(self, until: float) -> None:
        """This run holds locks until ``until`` (monotonic) at the latest: a marker with that much PX."""
        self.aside.note_locks(self.queue, until - self.monotonic() + LOCK_MARGIN)
