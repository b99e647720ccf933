"""Moving one backlog queue's messages back to their entities on the primary (paired mode, docs/paired.md).

``BacklogSyphon`` works one backlog queue while its caller holds the queue's lease: it peek-locks batches
of ``syphon_batch_size``, restores each message (``from_backlog_message``: SessionId, remaining TTL,
schedule, PartitionKey, body and application properties as sent), and sends them to their ``x-ms-path``
on the primary. The decisions are the core's (``bridge.core.syphon``); this module does the I/O:

- A backlog message is completed only after the primary accepted its restored copy. A crash in between
  redelivers it after its lock expires: a duplicate with the same MessageId, never a loss.
- Expired in the backlog, not aliased, or its destination missing or refusing it for good: dead-lettered
  in the backlog queue with the reason (``<code>: <details>`` → reason ``<code>``, description the rest).
- Its destination failed over (or its FailoverInterval timer runs), a transient failure, or an earlier
  message of the same destination already set aside: the message is *set aside* — its sequence number is
  recorded (``bridge.state.aside``) and it is deferred — and so is every later message of that
  destination. It leaves the queue's receivable order, so the healthy entities' messages behind it are
  reached at once and it is not received (and billed) again on every poll.
- An outage of the primary: the rest of the batch is set aside, the run stops, and the next run retries.

Order: each poll first takes back, per healthy destination, its set-aside messages by sequence number
(``receive_deferred``, lowest first) and sends them in that order; only then does it receive new messages,
and a destination that still has messages set aside sets its new ones aside behind them. A set-aside number
whose message is not deferred (its settlement failed, so it is still locked, or the process died between
recording and deferring) stops that destination until the message comes round again and is set aside;
one that is gone (completed or dead-lettered by an earlier run) is forgotten. A run that finds an earlier
run's locks possibly still held (``AsideStore.locks_pending``: that run died) waits for them to expire,
because those messages reappear at their place in the queue later and nobody recorded them. Every run
first records again the deferred messages whose record a replaced Redis server lost (``aside_scan``).

Before each send the batch's locks are renewed when half of their lock time has passed or less than one
attempt deadline is left; lock times are this process's monotonic clock's, never Service Bus's
``locked_until`` against this host's clock (``bridge.paired.syphon_locks``). The batch's decisions are a
pure plan (``bridge.core.syphon_batch``): what settles first, what goes in one send, which restore
barriers pass, what is set aside when a run stops.

Every receive, receive-deferred and peek call is counted as a syphon receive (billed even when it returns
nothing), on the backlog queue's counters; every message the primary accepted as a syphon send, on its
destination's counters. What the code relies on from the SDK and Service Bus (deferral, receive by
sequence number, lock expiry) is in ``docs/servicebus-sdk.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from bridge.core.aliasing import Restored, UnaliasDecision
from bridge.core.cost import Operation
from bridge.core.error_classes import ErrorClass, classify
from bridge.core.outcomes import Outcome, describe_error
from bridge.core.paired import PairedState, backlog_queue_index
from bridge.core.syphon import Barrier, SyphonAction, SyphonDecision, plan_received, split_reason
from bridge.core.syphon_batch import (
    after_send,
    leftovers,
    passing_barriers,
    send_groups,
    settle_first,
    to_record,
)
from bridge.core.syphon_timing import may_poll, receive_wait
from bridge.delivery.context import DeliveryContext
from bridge.errors import NamespaceError
from bridge.journal.emit import SyphonJournal
from bridge.observability import send_spans
from bridge.paired.aside_scan import scan_deferred
from bridge.paired.entities import paired_entities
from bridge.paired.queue_lock import ASSUMED_LOCK
from bridge.paired.syphon_locks import LOCK_MARGIN, Batch, RunLocks
from bridge.servicebus.messages import (
    ReceivedMessage,
    RestoreDecision,
    RestoredMessage,
    barrier_of,
    from_backlog_message,
    message_id_of,
)
from bridge.state.aside import AsideStore
from bridge.state.backlog import BacklogLedger

log = logging.getLogger(__name__)


@dataclass
class QueueReport:
    """What a syphon did with one backlog queue in one run."""

    queue: str
    receives: int = 0
    received: int = 0
    sent: int = 0
    dead_lettered: int = 0
    set_aside: int = 0
    """Messages set aside (deferred, their numbers recorded) until their destination can take them."""
    lock_renewals: int = 0
    barriers: int = 0
    """Restore barriers reached in order (``bridge.state.backlog``)."""
    recovered: int = 0
    """Deferred messages whose set-aside record Redis had lost, recorded again (``aside_scan``)."""
    peeks: int = 0
    """Peeks of the scan for lost records (billed as syphon receives, not in ``receives``)."""
    stopped: str | None = None
    last_moved_at: float | None = None
    """``ctx.clock()`` time when the last message left the backlog (sent or dead-lettered)."""

    @property
    def progress(self) -> int:
        """Messages that left the backlog, and barriers passed."""
        return self.sent + self.dead_lettered + self.barriers


def _number(message: ReceivedMessage) -> int:
    # Every message a queue hands out has a sequence number; the SDK types it as optional.
    return int(message.sequence_number or 0)


Item = RestoreDecision | Barrier
"""What one received backlog message is: restored (or why not), or a restore barrier."""


def _core_decision(item: Item) -> UnaliasDecision | Barrier:
    if isinstance(item, RestoredMessage):
        return Restored(item.fields, item.destination)
    return item


def _destination(item: Item) -> str | None:
    return item.destination if isinstance(item, RestoredMessage | Barrier) else None


def _item(message: ReceivedMessage, now: float) -> Item:
    return barrier_of(message) or from_backlog_message(message, now)


def _outcomes(failed: Mapping[int, NamespaceError]) -> dict[int, Outcome]:
    """The outcome of each failed position; one error shared by several messages is classified once."""
    by_error: dict[int, Outcome] = {}
    for error in failed.values():
        if id(error) not in by_error:
            by_error[id(error)] = Outcome.from_classification(classify(error), describe_error(error))
    return {position: by_error[id(error)] for position, error in failed.items()}


class BacklogSyphon:
    """Syphons one backlog queue of the secondary while the caller holds its lease (``holds``)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        queue: str,
        holds: Callable[[], bool],
        aside: AsideStore | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ctx = ctx
        self.queue = queue
        self.holds = holds
        self.aside = aside or AsideStore(ctx.redis)
        self.monotonic = monotonic
        """The clock receive calls are timed on (``RunLocks``): this process's, immune to any host's skew."""
        self.locks = RunLocks(ctx, queue, self.aside, monotonic)
        self.report = QueueReport(queue)
        self.paired = paired_entities(ctx.settings)
        self._states: dict[str, PairedState] = {}
        self._send_failed = False
        settings = ctx.settings
        self.journal = SyphonJournal(
            ctx.journal,
            settings.primary.namespace_name if settings.primary else "primary",
            settings.secondary.namespace_name if settings.secondary else "secondary",
            queue,
        )

    def run(self, until: float) -> QueueReport:
        """Move messages until ``until`` (a ``ctx.clock()`` time), the lease is lost, or the primary fails."""
        ctx, options = self.ctx, self.ctx.settings.paired
        pending = self.aside.locks_pending(self.queue)
        if pending is not None:
            self.report.stopped = f"waiting {pending:.1f}s for message locks of an earlier run"
            return self.report
        finished = False
        try:
            if not self._scan(until):
                return self.report
            while self.report.stopped is None:
                self._send_failed = False
                if not self.holds():
                    self.report.stopped = "lease lost"
                    break
                self._states = {}
                if not may_poll(self._state(entity) for entity in self.paired):
                    self.report.stopped = "every paired entity is failed over"
                    break
                moved_aside = self.move_aside(until)
                if self.report.stopped is not None:
                    break
                wait = receive_wait(until - ctx.clock(), options.syphon_receive_wait)
                if wait <= 0:
                    break
                if moved_aside or self.aside.destinations(self.queue):
                    # Set-aside messages wait for a destination to come back (a ping, at most one interval
                    # away): do not long-poll past it, and not at all while there was aside work just now.
                    wait = min(wait, options.ping_primary_interval, 1.0 if moved_aside else wait)
                messages = self._receive(wait)
                if messages is None:
                    break
                moved = self.move(messages) if messages else False
                if self._send_failed and not moved and not moved_aside and self.report.stopped is None:
                    # The primary refused for a passing reason and nothing went: try one interval later.
                    time.sleep(max(0.0, min(options.syphon_retry_interval, until - ctx.clock())))
            finished = True
        finally:
            self.journal.flush()
            self._close_link()
            if finished and self.holds():
                self.aside.clear_locks(self.queue)
        return self.report

    def _scan(self, until: float) -> bool:
        """Record again the deferred messages Redis lost (``aside_scan``); False: the run stops."""
        try:
            scan = scan_deferred(self.ctx, self.queue, until)
        except NamespaceError as error:
            self.report.stopped = f"scanning for deferred messages failed: {describe_error(error)}"
            return False
        # Peeks are billed (aside_scan counts them) but are no receive: retire_empty reads ``receives``.
        self.report.recovered, self.report.peeks = scan.recovered, scan.peeks
        if scan.recovered:
            self.aside.note_locks(self.queue, (self.locks.queue_lock() or ASSUMED_LOCK) + LOCK_MARGIN)
            self.report.stopped = f"{scan.recovered} set-aside records recovered; waiting for older locks"
        elif not scan.complete:
            self.report.stopped = f"scanning for lost set-aside records; resumes at {scan.resumes_at}"
        return self.report.stopped is None

    def _close_link(self) -> None:
        # No idle backlog link may keep credit between runs (``QueueReceivers.close_receiver``).
        try:
            self.ctx.pool.queues.close_receiver("secondary", self.queue)
        except NamespaceError as error:
            log.debug("closing the receiver of %s failed: %s", self.queue, describe_error(error))

    def _state(self, destination: str) -> PairedState:
        state = self._states.get(destination)
        if state is None:
            state = self._states[destination] = self.ctx.paired.get(destination)
        return state

    def _count_receive(self) -> None:
        self.report.receives += 1
        self.ctx.cost.add(self.queue, Operation.SYPHON_RECEIVE)

    def _receive(self, wait: float) -> list[ReceivedMessage] | None:
        ctx = self.ctx
        started = self.monotonic()
        try:
            messages = ctx.pool.queues.receive_batch(
                "secondary", self.queue, ctx.settings.paired.syphon_batch_size, wait
            )
        except NamespaceError as error:
            self.report.stopped = f"receive failed: {describe_error(error)}"
            return None
        finally:
            self._count_receive()
        self.locks.note(messages, started)
        self.report.received += len(messages)
        self.journal.receive_call(len(messages), ctx.clock())
        # A batch is not always in queue order: with prefetch 0 the SDK releases a message that reaches the
        # link between two receive calls, and the namespace hands it out again behind its successors. The
        # queue's sequence number is the order the workers sent them in (one key, one queue).
        return sorted(messages, key=_number)

    # ---- set-aside messages first ----------------------------------------------------------------------
    def move_aside(self, until: float) -> bool:
        """Send the set-aside messages of every healthy destination, in sequence order; True if some left."""
        moved_before = self.report.progress
        for destination in self.aside.destinations(self.queue):
            if not self._state(destination).healthy:
                continue
            while self.report.stopped is None and self.ctx.clock() < until and self.holds():
                numbers = self.aside.lowest(
                    self.queue, destination, self.ctx.settings.paired.syphon_batch_size
                )
                if not numbers:
                    break
                messages, waiting = self._take_deferred(destination, numbers)
                progressed = self.move(messages, from_aside=True) if messages else False
                if waiting or not progressed or len(messages) < len(numbers):
                    break
            if self.report.stopped is not None:
                break
        return self.report.progress > moved_before

    def _take_deferred(self, destination: str, numbers: Sequence[int]) -> tuple[list[ReceivedMessage], bool]:
        """The deferred messages ``numbers`` (a leading run of them), and whether one must be waited for."""
        pool = self.ctx.pool
        try:
            started = self.monotonic()
            try:
                got = pool.queues.receive_deferred("secondary", self.queue, numbers)
            finally:
                self._count_receive()
            if got is not None:
                self.locks.note(got, started)
                return sorted(got, key=_number), False
            # Some number names no deferred message: go one by one, in order, to find it.
            out: list[ReceivedMessage] = []
            for number in numbers:
                started = self.monotonic()
                try:
                    one = pool.queues.receive_deferred("secondary", self.queue, [number])
                finally:
                    self._count_receive()
                if one:
                    self.locks.note(one, started)
                    out.extend(one)
                    continue
                try:
                    peeked = pool.queues.peek("secondary", self.queue, number, 1)
                finally:
                    self._count_receive()
                if peeked and peeked[0].sequence_number == number:
                    # Still active or locked: it is set aside when it comes round; its successors wait.
                    log.info(
                        "set-aside message %d of %s in %s is not deferred yet",
                        number,
                        destination,
                        self.queue,
                    )
                    return out, True
                self.aside.remove(self.queue, destination, [number])  # settled by an earlier run
            return out, False
        except NamespaceError as error:
            log.info("taking set-aside messages of %s from %s failed: %s", destination, self.queue, error)
            if classify(error).error_class is ErrorClass.OUTAGE:
                self.report.stopped = f"secondary failed: {describe_error(error)}"
            return [], True

    # ---- one batch -------------------------------------------------------------------------------------
    def move(self, messages: Sequence[ReceivedMessage], from_aside: bool = False) -> bool:
        """Restore, send, settle one batch in order (``bridge.core.syphon_batch``); True when some message
        left the backlog."""
        ctx = self.ctx
        moved_before = self.report.progress
        batch = Batch(messages, self.locks.take_window(), from_aside)
        now = ctx.clock()
        restored = [_item(message, now) for message in messages]
        destinations = [_destination(item) for item in restored]
        held = set() if from_aside else set(self.aside.destinations(self.queue))
        plan = plan_received([_core_decision(r) for r in restored], self._state, held)
        self._settle_all(batch, restored, settle_first(plan))
        for destination, indexes in send_groups(plan, destinations).items():
            if self.report.stopped is not None:
                break
            self._send_group(batch, restored, destination, indexes)
        stopped = self.report.stopped is not None
        self._settle_all(batch, restored, passing_barriers(plan, destinations, batch.set_aside, stopped))
        self._settle_all(batch, restored, leftovers(batch.unsettled))
        moved = self.report.progress > moved_before
        if moved:
            self.report.last_moved_at = ctx.clock()
        self.journal.flush()
        return moved

    def _send_group(
        self, batch: Batch, restored: Sequence[Item], destination: str, indexes: list[int]
    ) -> None:
        ctx = self.ctx
        if self.locks.renew_if_due(batch):
            self.report.lock_renewals += 1
        items = [cast(RestoredMessage, restored[index]) for index in indexes]
        assert all(isinstance(item, RestoredMessage) for item in items)
        outgoing = [item.message for item in items]
        primary = ctx.settings.primary
        ids = [message_id_of(message) for message in outgoing]
        result = send_spans.syphon_send(
            ctx.pool.send, primary, self.queue, destination, outgoing, message_ids=ids
        )
        if result.accepted:
            ctx.cost.add(destination, Operation.SYPHON_SEND, len(result.accepted))
            # Journaled before any backlog message is completed (bridge.journal.emit).
            self.journal.sent(destination, [items[p].fields.message_id for p in result.accepted], ctx.clock())
        verdict = after_send(indexes, set(result.accepted), _outcomes(result.failed), destination)
        self._send_failed = self._send_failed or verdict.passing_failure
        if verdict.stopped is not None:
            self.report.stopped = verdict.stopped
        self._settle_all(batch, restored, verdict.decisions)

    # ---- settling --------------------------------------------------------------------------------------
    def _settle_all(
        self, batch: Batch, restored: Sequence[Item], decisions: dict[int, SyphonDecision]
    ) -> None:
        """Settle ``decisions`` in index order; set-aside numbers are recorded before any deferral."""
        if not decisions:
            return
        if not batch.from_aside:
            destinations = [_destination(item) for item in restored]
            numbers = [_number(message) for message in batch.messages]
            for name, fresh in to_record(decisions, destinations, numbers).items():
                self.aside.add(self.queue, name, fresh)
        for index in sorted(decisions):
            item = restored[index]
            if decisions[index].action is SyphonAction.PASS_BARRIER and isinstance(item, Barrier):
                self._pass_barrier(item)
                decisions[index] = SyphonDecision(SyphonAction.COMPLETE, "barrier passed")
            self._settle(
                batch, index, decisions[index], _destination(item), counts=not isinstance(item, Barrier)
            )

    def _pass_barrier(self, barrier: Barrier) -> None:
        """Every earlier message of the barrier's shard in this queue has left it: tell the shard."""
        index = backlog_queue_index(self.queue)
        if index is not None and BacklogLedger(self.ctx.redis).pass_barrier(
            barrier.destination, barrier.shard, index, barrier.token
        ):
            self.report.barriers += 1
            log.info(
                "restore barrier of %s shard %d passed in %s", barrier.destination, barrier.shard, self.queue
            )

    def _settle(
        self,
        batch: Batch,
        index: int,
        decision: SyphonDecision,
        destination: str | None,
        counts: bool = True,
    ) -> None:
        pool, message = self.ctx.pool, batch.messages[index]
        number = _number(message)
        try:
            if decision.action is SyphonAction.COMPLETE:
                pool.queues.complete("secondary", self.queue, message)
                self.report.sent += 1 if counts else 0
                if counts and destination is not None:
                    self.journal.syphoned(destination, message.message_id, self.ctx.clock())
                if batch.from_aside and destination is not None:
                    self.aside.remove(self.queue, destination, [number])
            elif decision.action is SyphonAction.DEAD_LETTER:
                reason, description = split_reason(decision.reason)
                pool.queues.dead_letter("secondary", self.queue, message, reason, description)
                self.report.dead_lettered += 1
                self.journal.dead_lettered(destination, message.message_id, self.ctx.clock(), reason)
                if batch.from_aside and destination is not None:
                    self.aside.remove(self.queue, destination, [number])
                log.warning(
                    "syphon dead-lettered %s in %s: %s", message.message_id, self.queue, decision.reason
                )
            elif destination is None:
                # Cannot happen (only restorable messages are set aside); never strand one: abandon it.
                pool.queues.abandon("secondary", self.queue, message)
            else:
                batch.set_aside.add(index)
                pool.queues.defer("secondary", self.queue, message)
                self.report.set_aside += 1
                log.debug("syphon set %s aside in %s: %s", message.message_id, self.queue, decision.reason)
        except NamespaceError as error:
            # The message stays locked until its lock expires and then comes back (a deferred one stays
            # deferred). Its number is recorded, so its destination is held behind it (set aside) and the
            # aside path waits for it to come round; a fresh one that was sent and not completed is a
            # duplicate when it comes back. Either way a later run need not wait for its lock: only a run
            # that died (``locks`` left behind) leaves messages whose destination nobody recorded.
            if (
                destination is not None
                and not batch.from_aside
                and decision.action is not SyphonAction.COMPLETE
            ):
                self.aside.add(self.queue, destination, [number])
            log.info("settling %s in %s failed: %s", message.message_id, self.queue, describe_error(error))
            if classify(error).error_class is ErrorClass.OUTAGE and self.report.stopped is None:
                self.report.stopped = f"secondary failed: {describe_error(error)}"
        batch.unsettled.discard(index)
