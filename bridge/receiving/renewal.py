"""``LockWatch``: keeps what a slow handler holds alive — message locks and in-flight marks — and stops the
receiver taking new work while it cannot.

Most handlers finish in milliseconds and renewing every message would cost a management call per message
for nothing, so the watch only acts on what is still unsettled late: a copy not settled by a third of its
lock time is registered with the SDK's ``AutoLockRenewer`` (which renews it until it is settled or
``max_lock_renewal`` passes), and the in-flight marks of ids whose handler is still running — from the
claim until the done mark is written or the mark released — are extended every third of ``inflight_ttl``.
Copies that wait for another copy's handler, or under back-pressure, are covered the same way. The watch
is one thread per receiver process, waking every half second; each time it also sends the heartbeat that
keeps the scope's attended clock running (``bridge.receiving.scripts``: the clock the marks' deadlines are
on, which stands still while no receiver reaches Redis, so an outage does not age the marks).

**Fencing.** The renewal answers per id whether the mark was still this process's (``Renewal``). A mark
found lost — another receiver's mark, another receiver's done mark, or no mark at all — means another
receiver may hand the id while this handler still runs (a thread cannot be stopped): it is logged at ERROR
with the MessageId and counted (``inflight_marks_lost`` in the receiver counters, so
``bridge_receiver_messages_total{counter="inflight_marks_lost"}``), and the copy is settled as
usual when its handler returns (the done mark is written, counted once whoever writes it first, and the
copy completed: the message was handled, and abandoning it would only bring back a copy that is by then a
duplicate). The done-mark script reports a mark lost to another owner too (``lost``).

**Pause.** While the renewal fails (Redis unreachable, or refusing writes) and this process holds marks,
the watch tries again every tick, not every third of ``inflight_ttl``, and ``paused`` is true: the
processor claims nothing and calls no handler, and the links stop receiving, until a renewal succeeds
(or no mark is held any more); then work resumes by itself. Both edges are logged at WARNING.

A crash stops the watch with everything else: locks then expire (Service Bus redelivers) and in-flight
marks expire (other copies may be handed), which is what makes a crash safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bridge.core.receiving import Renewal
from bridge.errors import BackpressureError, StateStoreUnavailableError
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.window import DedupWindow
from bridge.servicebus.receiving import Delivery, EntityLink, LockRenewer

logger = logging.getLogger(__name__)

TICK = 0.5
"""Seconds between two looks at what is held (and between two heartbeats)."""
MIN_RENEW_AFTER = 0.5
REDIS_FAILURES = (StateStoreUnavailableError, BackpressureError)

_LOST_BECAUSE = {
    Renewal.TAKEN: "another receiver holds its mark now",
    Renewal.HANDLED: "another receiver's handler of it returned",
    Renewal.GONE: "its mark was gone (set again now)",
}


@dataclass
class _Held:
    link: EntityLink
    delivery: Delivery
    renew_at: float


@dataclass(eq=False)
class _Running:
    """One id whose handler runs (or whose done mark is being written): when its mark was last renewed."""

    since: float
    finishing: bool = False
    lost: bool = False


class LockWatch:
    """Registers late copies for lock renewal, extends the in-flight marks of running handlers, and pauses
    the receiver's intake while it cannot (see the module docstring)."""

    def __init__(
        self,
        renewer: LockRenewer,
        window: DedupWindow,
        inflight_ttl: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        *,
        counters: ReceiverCounterStore | None = None,
    ) -> None:
        self.renewer = renewer
        self.window = window
        self.counters = counters
        self.renew_marks_every = inflight_ttl / 3
        self.clock = clock
        self.wall = wall
        self.entity = window.keys.entity
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._handling: dict[str, _Running] = {}
        self._open = threading.Event()
        self._open.set()
        self._failing_since: float | None = None
        self._failures = 0
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

    # ---- what the processor asks ---------------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        """True while this process must take no new work (its marks cannot be renewed)."""
        return not self._open.is_set()

    def wait_open(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the pause to end; True when not paused."""
        return self._open.wait(timeout)

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
                self._handling[message_id] = _Running(now)

    def finishing(self, message_ids: Sequence[str]) -> None:
        """The done marks of these ids are being written (a renewal may find them done by this process)."""
        with self._lock:
            for message_id in message_ids:
                running = self._handling.get(message_id)
                if running is not None:
                    running.finishing = True

    def handled(self, message_ids: Sequence[str]) -> None:
        """These ids need their marks no more (done mark written, mark released, or given up)."""
        with self._lock:
            for message_id in message_ids:
                self._handling.pop(message_id, None)

    def lost(self, message_ids: Sequence[str], how: Renewal) -> None:
        """The marks of these running ids were found lost (``how``) by the processor: report each once."""
        with self._lock:
            fresh = []
            for message_id in message_ids:
                running = self._handling.get(message_id)
                if running is None or not running.lost:
                    fresh.append(message_id)
                if running is not None:
                    running.lost = True
        self._report_lost([(message_id, how) for message_id in fresh])

    # ---- the thread ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self.tick()
            except Exception:  # the watch must outlive any one failure; the next tick tries again
                logger.exception("lock watch tick failed")

    def tick(self) -> None:
        """One look: register late copies with the lock renewer, extend old in-flight marks (all of them,
        after a failed try), send the heartbeat; pause or resume the intake."""
        now = self.clock()
        due: dict[int, tuple[EntityLink, list[Delivery]]] = {}
        with self._lock:
            for key, held in list(self._held.items()):
                if held.renew_at <= now:
                    due.setdefault(id(held.link), (held.link, []))[1].append(held.delivery)
                    del self._held[key]
            running = {m: r for m, r in self._handling.items() if not r.lost}
            retrying = self._failing_since is not None
            marks = [m for m, r in running.items() if retrying or now - r.since >= self.renew_marks_every]
        for link, deliveries in due.values():
            logger.debug("renewing the locks of %d copies on %s", len(deliveries), link.role)
            self.renewer.register(link, deliveries)
        try:
            renewals = self.window.renew(marks)
        except REDIS_FAILURES as error:
            self._renewal_failed(bool(running), error)
            return
        self._renewed(now, [(m, running[m], r) for m, r in zip(marks, renewals, strict=True)])

    def _renewal_failed(self, holding: bool, error: Exception) -> None:
        if not holding:
            logger.debug("receiver heartbeat failed: %s", error)
            self._resume("no in-flight mark is held any more")
            return
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = self.clock()
            self._open.clear()
            logger.warning(
                "%s (owner %s): cannot renew the in-flight marks of running handlers: %s; no new work "
                "until they are renewed (tried every %.1fs)", self.entity, self.window.owner, error, TICK,
            )  # fmt: skip

    def _resume(self, why: str) -> None:
        if self._failing_since is None:
            return
        failed_for = self.clock() - self._failing_since
        logger.warning(
            "%s (owner %s): %s after %d failed tries (%.1fs): taking new work again",
            self.entity, self.window.owner, why, self._failures, failed_for,
        )  # fmt: skip
        self._failing_since, self._failures = None, 0
        self._open.set()

    def _renewed(self, now: float, results: list[tuple[str, _Running, Renewal]]) -> None:
        lost: list[tuple[str, Renewal]] = []
        stray: list[str] = []
        late: list[str] = []
        with self._lock:
            for message_id, running, renewal in results:
                if self._handling.get(message_id) is not running:
                    # Handled meanwhile: a mark this renewal set again for it is nobody's to keep.
                    if renewal is Renewal.GONE:
                        stray.append(message_id)
                    continue
                if renewal is Renewal.HANDLED and running.finishing:
                    continue  # its own done mark, written meanwhile
                running.since = now
                if renewal is Renewal.LATE:
                    late.append(message_id)
                elif renewal.lost:
                    if renewal is not Renewal.GONE:
                        running.lost = True  # not ours: nothing to renew any more
                    lost.append((message_id, renewal))
        self._resume("in-flight marks renewed again")
        for message_id in late:
            logger.warning(
                "%s (owner %s): the in-flight mark of %s was renewed late (its life had run out; nobody had "
                "claimed the id)", self.entity, self.window.owner, message_id,
            )  # fmt: skip
        self._report_lost(lost)
        if stray:
            try:
                self.window.release(stray)
            except REDIS_FAILURES as error:
                logger.info("could not drop %d marks set again (they expire): %s", len(stray), error)

    def _report_lost(self, lost: Sequence[tuple[str, Renewal]]) -> None:
        for message_id, how in lost:
            logger.error(
                "%s (owner %s): lost the in-flight mark of %s while its handler runs: %s; another receiver "
                "may hand it meanwhile", self.entity, self.window.owner, message_id, _LOST_BECAUSE[how],
            )  # fmt: skip
        if lost and self.counters is not None:
            try:
                self.counters.add({"inflight_marks_lost": len(lost)})
            except REDIS_FAILURES as error:
                logger.warning("could not count %d lost in-flight marks: %s", len(lost), error)
