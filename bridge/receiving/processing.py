"""What happens to received copies: claim in the window, hand to the handler, remember, settle, count.

The decisions are ``bridge.core.receiving``; this module does the I/O in the order that makes them safe:

1. pings are completed and counted, never handed;
2. the other copies are claimed in the window in one script call per batch;
3. claimed copies go to the handler (contiguous chunks of the batch on the handler pool, so a batch costs
   one thread hand-off per chunk rather than one per message);
4. the done marks of the copies whose handler returned are written (one script call, which also counts
   and journals them as ``handled``), the events so far are counted, and only then are those copies
   completed; a Redis failure there is retried, never skipped (a copy whose done mark could not be stored
   is not completed: it is abandoned when the receiver gives up, and handed again); a copy whose handler
   raised has its in-flight mark dropped and is abandoned, or dead-lettered with the error on its last
   delivery;
5. duplicates are completed; copies another receiver is handling wait (``parked``) and are claimed again
   with the next batch; under back-pressure (window full) they wait too and the link stops receiving;
   while the lock watch cannot renew this process's in-flight marks (``LockWatch.paused``) nothing is
   claimed or handed at all: the copies wait;
6. the rest of the batch's events are counted (``record``, where every lifecycle event but ``handled``
   leaves; at most two calls per batch).

Session entities go through ``process_session_batch``: one copy at a time, in sequence-number order, and a
copy given up (handler error, waited too long, done mark not stored) ends the batch so the session's later
messages are not handed before it.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bridge.core.received import ReceivedMessage
from bridge.core.receiving import (
    Action,
    Claim,
    Decision,
    EventKind,
    ReceiverEvent,
    Renewal,
    after_claim,
    after_handler_error,
    count_events,
    is_ping,
    session_order,
)
from bridge.errors import BackpressureError, NamespaceError, StateStoreUnavailableError
from bridge.journal.emit import ReceiverJournal
from bridge.observability import receiver_spans, tracing
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.renewal import LockWatch
from bridge.receiving.window import DedupWindow
from bridge.servicebus.receiving import Delivery, EntityLink

logger = logging.getLogger(__name__)

Handler = Callable[[ReceivedMessage], object]
"""A handler as the engine calls it: returns when the message is handled, raises when it is not."""

DEFAULT_MAX_DELIVERY_COUNT = 10
"""Service Bus's default MaxDeliveryCount, used when the entity's cannot be read."""
REDIS_FAILURES = (StateStoreUnavailableError, BackpressureError)
"""What the window's calls raise when Redis cannot do it now (unreachable, loading, read-only, full)."""
PAUSED_POLL = 0.2
"""Seconds between two looks at whether a pause of the intake (``LockWatch.paused``) ended."""
RETRY_FIRST, RETRY_MAX = 0.02, 0.5
"""Seconds between two tries of a window call that must succeed (doubling up to the second figure)."""
SETTLEMENTS = frozenset((Action.COMPLETE, Action.ABANDON, Action.DEAD_LETTER))
"""The actions that settle a copy (their values are Service Bus's operation names); any other abandons."""


@dataclass
class Copy:
    """One received copy on its way through the receiver; ``first_seen`` is when it was received."""

    link: EntityLink
    delivery: Delivery
    first_seen: float

    @property
    def message_id(self) -> str | None:
        """The copy's MessageId (None: no id, nothing to deduplicate by)."""
        return self.delivery.message_id


class CopyProcessor:
    """Takes received copies through the steps in the module docstring."""

    def __init__(
        self,
        *,
        window: DedupWindow,
        counters: ReceiverCounterStore,
        handler: Handler,
        pool: ThreadPoolExecutor,
        max_handlers: int,
        watch: LockWatch,
        busy_wait: float,
        max_lock_renewal: float,
        clock: Callable[[], float],
        wait: Callable[[float], bool],
        stopping: Callable[[], bool],
        journal: ReceiverJournal | None = None,
    ) -> None:
        self.window = window
        self.counters = counters
        self.journal = journal
        self.handler = handler
        self.pool = pool
        self.max_handlers = max_handlers
        self.watch = watch
        self.busy_wait = busy_wait
        self.max_lock_renewal = max_lock_renewal
        self.clock = clock
        self.wait = wait
        self.stopping = stopping
        self.max_delivery_counts: dict[str, int] = {}
        self.backpressure = False
        """Set when the last claim found the window full (the link pauses receiving)."""

    # ---- the batch path ------------------------------------------------------------------------------------
    def process_batch(self, link: EntityLink, new: Sequence[Delivery], parked: Sequence[Copy]) -> list[Copy]:
        """Take ``new`` copies (and the ``parked`` ones again) one step further; the copies still waiting."""
        now = self.clock()
        events = [ReceiverEvent(EventKind.RECEIVED, link.role, d.message_id) for d in new]
        self.watch.track(link, new)
        copies = list(parked)
        settled: list[Delivery] = []
        for delivery in new:
            copy = Copy(link, delivery, now)
            if is_ping(delivery.content_type):
                self._settle(copy, Decision(Action.COMPLETE))
                settled.append(delivery)
                events.append(self._event(EventKind.PING_DROPPED, copy))
            else:
                copies.append(copy)
        waiting = self._claim_and_handle(copies, events, settled)
        self.watch.untrack(settled)
        self.record(events)
        return waiting

    def _claim_and_handle(
        self, copies: list[Copy], events: list[ReceiverEvent], settled: list[Delivery]
    ) -> list[Copy]:
        if self.watch.paused:
            return copies  # this process cannot renew its marks: no claim, no handler call until it can
        keyed = [c for c in copies if c.message_id]
        try:
            claims = self.window.claim([c.message_id for c in keyed if c.message_id])
        except REDIS_FAILURES as error:
            logger.warning("cannot claim %d copies in the window, they wait: %s", len(keyed), error)
            self.backpressure = True
            return copies
        now, stopping = self.clock(), self.stopping()
        handle = [c for c in copies if not c.message_id]
        waiting: list[Copy] = []
        full: list[Copy] = []
        for copy, claim in zip(keyed, claims, strict=True):
            decision = after_claim(claim, now - copy.first_seen, self.busy_wait, stopping)
            if claim is Claim.FULL:
                full.append(copy)
            if decision.action is Action.HANDLE:
                handle.append(copy)
            elif decision.action is Action.WAIT:
                waiting.append(copy)
            else:
                self._settle(copy, decision)
                settled.append(copy.delivery)
                if decision.action is Action.COMPLETE:
                    events.append(self._event(EventKind.DUPLICATE_SUPPRESSED, copy))
        self.backpressure = bool(full)
        events.extend(self._event(EventKind.BACKPRESSURE, c) for c in full)
        # The marks are renewed from the claim until the done mark is written or the mark released.
        ids = [c.message_id for c in handle if c.message_id]
        self.watch.handling(ids)
        try:
            results = self._run_handlers(handle)
            self._finish(results, events)
        finally:
            self.watch.handled(ids)
        settled.extend(c.delivery for c, _ in results)
        return waiting

    def _run_handlers(self, copies: list[Copy]) -> list[tuple[Copy, BaseException | None]]:
        if not copies:
            return []
        size = math.ceil(len(copies) / min(self.max_handlers, len(copies)))
        chunks = [copies[i : i + size] for i in range(0, len(copies), size)]
        futures = [self.pool.submit(self._run_chunk, chunk) for chunk in chunks]
        return [result for future in futures for result in future.result()]

    def _run_chunk(self, chunk: list[Copy]) -> list[tuple[Copy, BaseException | None]]:
        return [(copy, self._call(copy)) for copy in chunk]

    def _call(self, copy: Copy) -> BaseException | None:
        try:
            if tracing.enabled():
                self._traced(copy)
            else:
                self.handler(copy.delivery.message)
        except BaseException as exc:  # any failure of the application's code means "not handled"
            logger.info("handler failed for %s: %s", copy.message_id, type(exc).__name__)
            return exc
        return None

    def _traced(self, copy: Copy) -> None:
        """The handler inside a ``process <entity>`` span (``bridge.observability.receiver_spans``)."""
        delivery = copy.delivery
        attributes: dict[str, str | int | bool] = {
            "bridge.namespace.role": delivery.role,
            "server.address": copy.link.server_address,
        }
        if delivery.subscription:
            attributes["messaging.destination.subscription.name"] = delivery.subscription
        receiver_spans.process(delivery.entity, delivery.message, self.handler, attributes)

    def _finish(self, results: list[tuple[Copy, BaseException | None]], events: list[ReceiverEvent]) -> bool:
        """Remember, count and settle the copies whose handler ran; False when the copies whose handler
        returned could not be remembered (they were given back, not completed)."""
        ok = [c for c, error in results if error is None]
        failed = [(c, error) for c, error in results if error is not None]
        remembered = self._remember(ok)
        failed_ids = [c.message_id for c, _ in failed if c.message_id]
        self.watch.handled(failed_ids)  # before the release: a renewal must not set a released mark again
        try:
            self.window.release(failed_ids)
        except REDIS_FAILURES as error:
            logger.warning("could not drop in-flight marks (they expire): %s", error)
        self.record(events)
        events.clear()
        for copy in ok:
            self._settle(copy, Decision(Action.COMPLETE if remembered else Action.ABANDON))
        for copy, exc in failed:
            self._fail(copy, exc, events)
        return remembered

    def _remember(self, copies: list[Copy]) -> bool:
        """Store the done marks of ``copies``, whose handler returned, with their ``handled`` count and
        journal events (one script call); True once stored.

        A Redis failure is retried, never skipped: a copy completed without its done mark would let another
        copy of it be handed again, and leave the journal without its ``handled`` event. The copies' locks
        are renewed meanwhile (the lock watch; a session's lock by the SDK). The retries end, and the copies
        are not completed, when the receiver stops or the locks' renewal runs out (``max_lock_renewal``):
        Service Bus then delivers them again and the handler is called again (at-least-once).

        Their in-flight marks are renewed until the done marks are stored (the lock watch). An id whose mark
        the script found another receiver's was lost while its handler ran: reported, then settled as usual.
        """
        ids = [c.message_id for c in copies if c.message_id]
        if not ids:
            return True
        self.watch.finishing(ids)
        give_up_at = min(c.first_seen for c in copies) + self.max_lock_renewal
        delay, failures = RETRY_FIRST, 0
        while True:
            try:
                remembered = self.window.done(ids, time.time())
            except REDIS_FAILURES as error:
                if failures == 0:
                    logger.warning("cannot remember %d handled messages yet, retrying: %s", len(ids), error)
                failures += 1
            else:
                if failures:
                    logger.warning("remembered %d handled messages after %d retries", len(ids), failures)
                self.watch.lost(remembered.taken, Renewal.TAKEN)
                self.watch.handled(ids)
                return True
            if self.stopping() or self.clock() >= give_up_at:
                logger.error(
                    "gave up remembering %d handled messages: they are given back, not completed, and will "
                    "be handed again", len(ids),
                )  # fmt: skip
                self.watch.handled(ids)
                return False
            self.wait(delay)
            delay = min(RETRY_MAX, delay * 2)

    def _fail(self, copy: Copy, exc: BaseException, events: list[ReceiverEvent]) -> None:
        events.append(self._event(EventKind.HANDLER_ERROR, copy, type(exc).__name__))
        limit = self.max_delivery_counts.get(copy.link.role, DEFAULT_MAX_DELIVERY_COUNT)
        decision = after_handler_error(exc, copy.delivery.delivery_count, limit)
        if self._settle(copy, decision) and decision.action is Action.DEAD_LETTER:
            events.append(self._event(EventKind.DEAD_LETTERED, copy, decision.reason))

    # ---- the session path ----------------------------------------------------------------------------------
    def process_session_batch(self, link: EntityLink, deliveries: Sequence[Delivery]) -> bool:
        """Hand a session's copies one at a time, in sequence-number order (``session_order``); False when
        one was given up (abandoned, failed, or its done mark not stored): the caller then releases the
        session so the rest come back after it, in order."""
        deliveries = [deliveries[i] for i in session_order([d.sequence_number for d in deliveries])]
        events = [ReceiverEvent(EventKind.RECEIVED, link.role, d.message_id) for d in deliveries]
        self.watch.track(link, deliveries)
        try:
            for delivery in deliveries:
                copy = Copy(link, delivery, self.clock())
                if is_ping(delivery.content_type):
                    self._settle(copy, Decision(Action.COMPLETE))
                    events.append(self._event(EventKind.PING_DROPPED, copy))
                elif not self._one_in_order(copy, events):
                    return False
            return True
        finally:
            self.watch.untrack(deliveries)
            self.record(events)

    def _one_in_order(self, copy: Copy, events: list[ReceiverEvent]) -> bool:
        delay, counted_full = 0.02, False
        while self.watch.paused:  # this process cannot renew its marks: no claim, no handler call
            if self.stopping():
                self._settle(copy, Decision(Action.ABANDON))
                return False
            self.watch.wait_open(PAUSED_POLL)
        while copy.message_id:
            try:
                (claim,) = self.window.claim([copy.message_id])
            except REDIS_FAILURES as error:
                logger.warning("cannot claim %s in the window: %s", copy.message_id, error)
                claim = Claim.BUSY
            decision = after_claim(claim, self.clock() - copy.first_seen, self.busy_wait, self.stopping())
            if decision.action is Action.HANDLE:
                break
            if decision.action is not Action.WAIT:
                self._settle(copy, decision)
                if decision.action is Action.COMPLETE:
                    events.append(self._event(EventKind.DUPLICATE_SUPPRESSED, copy))
                return decision.action is Action.COMPLETE
            if claim is Claim.FULL and not counted_full:
                events.append(self._event(EventKind.BACKPRESSURE, copy))
                counted_full = True
            self.wait(delay)
            delay = min(0.5, delay * 2)
            while self.watch.paused and not self.stopping():
                self.watch.wait_open(PAUSED_POLL)
        ids = [copy.message_id] if copy.message_id else []
        self.watch.handling(ids)
        try:
            failure = self._call(copy)
            remembered = self._finish([(copy, failure)], events)
        finally:
            self.watch.handled(ids)
        return failure is None and remembered

    # ---- settling and counting -----------------------------------------------------------------------------
    def _settle(self, copy: Copy, decision: Decision) -> bool:
        """Apply ``decision`` to the copy (in its settlement span when tracing); False when Service Bus did
        not take it (the copy comes back)."""
        try:
            if tracing.enabled():
                action = decision.action if decision.action in SETTLEMENTS else Action.ABANDON
                apply = functools.partial(self._apply, copy, decision)
                receiver_spans.settle(copy.link, copy.delivery, action.value, apply)
            else:
                self._apply(copy, decision)
        except NamespaceError as error:
            # A lost lock or a namespace failure: the copy is delivered again later; a done one is then
            # recognised as a duplicate, a failed one handed again.
            logger.info("%s of %s on %s failed: %s", decision.action, copy.message_id, copy.link.role, error)
            return False
        return True

    @staticmethod
    def _apply(copy: Copy, decision: Decision) -> None:
        link, delivery = copy.link, copy.delivery
        if decision.action is Action.COMPLETE:
            link.complete(delivery)
        elif decision.action is Action.DEAD_LETTER:
            link.dead_letter(delivery, decision.reason or "handler_error", decision.description or "")
            logger.warning(
                "dead-lettered %s on %s: %s: %s",
                copy.message_id, link.role, decision.reason, decision.description,
            )  # fmt: skip
        else:
            link.abandon(delivery)

    @staticmethod
    def _event(kind: EventKind, copy: Copy, detail: str | None = None) -> ReceiverEvent:
        return ReceiverEvent(kind, copy.link.role, copy.message_id, detail)

    def record(self, events: Sequence[ReceiverEvent]) -> None:
        """Count and journal ``events`` (best effort: they settle nothing); the one place the receiver's
        lifecycle events leave, but for ``handled``, which the done marks' script writes with them."""
        if not events:
            return
        try:
            self.counters.add(count_events(events))
        except REDIS_FAILURES as error:
            logger.warning("receiver counters not updated (%d events): %s", len(events), error)
        if self.journal is not None:
            # Journal times are epoch seconds (latency against the ingress time); ``clock`` is monotonic.
            try:
                self.journal.record(events, time.time())
            except REDIS_FAILURES as error:  # a full Redis (the journal logs the other failures itself)
                logger.warning("receiver journal events not written (%d events): %s", len(events), error)
