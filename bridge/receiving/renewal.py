"""``LockWatch``: keeps what a slow handler holds alive — message locks and in-flight marks.

Most handlers finish in milliseconds and renewing every message would cost a management call per message
for nothing, so the watch only acts on what is still unsettled late: a copy not settled by a third of its
lock time is registered with the SDK's ``AutoLockRenewer`` (which renews it until it is settled or
``max_lock_renewal`` passes), and the in-flight marks of ids whose handler is still running are extended
every third of ``inflight_ttl``. Copies that wait for another copy's handler, or under back-pressure, are
covered the same way. The watch is one thread per receiver process, waking every half second.

A crash stops the watch with everything else: locks then expire (Service Bus redelivers) and in-flight
marks expire (other copies may be handled), which is what makes a crash safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bridge.errors import StateStoreUnavailableError
from bridge.receiving.window import DedupWindow
from bridge.servicebus.receiving import Delivery, EntityLink, LockRenewer

logger = logging.getLogger(__name__)

TICK = 0.5
"""Seconds between two looks at what is held."""
MIN_RENEW_AFTER = 0.5


@dataclass
class _Held:
    link: EntityLink
    delivery: Delivery
    renew_at: float


class LockWatch:
    """Registers late copies for lock renewal and extends the in-flight marks of running handlers."""

    def __init__(
        self,
        renewer: LockRenewer,
        window: DedupWindow,
        inflight_ttl: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.renewer = renewer
        self.window = window
        self.renew_marks_every = inflight_ttl / 3
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._handling: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="receiver-locks", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (renewals already registered with the SDK stop with the renewer)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    # ---- what the processor tells it -----------------------------------------------------------------------
    def track(self, link: EntityLink, deliveries: Sequence[Delivery]) -> None:
        """``deliveries`` are held from now on (until ``untrack``)."""
        now, wall = self.clock(), self.wall()
        with self._lock:
            for delivery in deliveries:
                left = None if delivery.locked_until is None else delivery.locked_until - wall
                after = float("inf") if left is None else max(MIN_RENEW_AFTER, left / 3)
                self._held[id(delivery)] = _Held(link, delivery, now + after)

    def untrack(self, deliveries: Sequence[Delivery]) -> None:
        """``deliveries`` are settled (or given back)."""
        with self._lock:
            for delivery in deliveries:
                self._held.pop(id(delivery), None)

    def handling(self, message_ids: Sequence[str]) -> None:
        """The handler of these ids starts now (their in-flight marks were just set)."""
        now = self.clock()
        with self._lock:
            for message_id in message_ids:
                self._handling[message_id] = now

    def handled(self, message_ids: Sequence[str]) -> None:
        """The handler of these ids returned."""
        with self._lock:
            for message_id in message_ids:
                self._handling.pop(message_id, None)

    # ---- the thread ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self.tick()
            except Exception:  # the watch must outlive any one failure; the next tick tries again
                logger.exception("lock watch tick failed")

    def tick(self) -> None:
        """One look: register late copies with the lock renewer, extend old in-flight marks."""
        now = self.clock()
        due: dict[int, tuple[EntityLink, list[Delivery]]] = {}
        with self._lock:
            for key, held in list(self._held.items()):
                if held.renew_at <= now:
                    due.setdefault(id(held.link), (held.link, []))[1].append(held.delivery)
                    del self._held[key]
            marks = [m for m, since in self._handling.items() if now - since >= self.renew_marks_every]
            for message_id in marks:
                self._handling[message_id] = now
        for link, deliveries in due.values():
            logger.debug("renewing the locks of %d copies on %s", len(deliveries), link.role)
            self.renewer.register(link, deliveries)
        if marks:
            try:
                self.window.renew(marks)
            except StateStoreUnavailableError as error:
                logger.warning("cannot extend %d in-flight marks: %s", len(marks), error)
