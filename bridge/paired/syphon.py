"""Moving one backlog queue's messages back to their entities on the primary (paired mode, SPEC §4).

``BacklogSyphon`` works one backlog queue while its caller holds the queue's lease: it peek-locks batches
of ``syphon_batch_size``, restores each message (``from_backlog_message``: SessionId, remaining TTL,
schedule, PartitionKey, body and application properties as sent), and sends them to their ``x-ms-path``
on the primary. The decisions are the core's (``bridge.core.syphon``); this module does the I/O:

- A backlog message is completed only after the primary accepted its restored copy. A crash in between
  redelivers it after its lock expires: a duplicate with the same MessageId, never a loss.
- Expired in the backlog, not aliased, or its destination missing or refusing it for good: dead-lettered
  in the backlog queue with the reason (``<code>: <details>`` → reason ``<code>``, description the rest).
- Its destination failed over (or its FailoverInterval timer runs), or a transient failure: abandoned, and
  so is every later message of the same destination in the batch, which keeps per-session order.
- An outage of the primary: this message and the rest of the batch are abandoned and the queue's run
  stops; the next run (one ``syphon_retry_interval`` later) tries again.

Order: a backlog queue is FIFO, a batch arrives in enqueue order, and the messages of one destination are
sent in that order in one batched send, so per-session (and per-key) order is kept.

Before each send the batch's locks are renewed when half of their lock time has passed or less than one
attempt deadline is left (``lock_renewal_due``). Every
receive call is counted as a syphon receive (billed even when it returns nothing), on the backlog queue's
counters; every message the primary accepted as a syphon send, on its destination's counters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from azure.servicebus import ServiceBusReceivedMessage

from bridge.core.aliasing import Restored
from bridge.core.cost import Operation
from bridge.core.error_classes import ErrorClass, classify
from bridge.core.outcomes import Outcome, describe_error
from bridge.core.paired import PairedState
from bridge.core.syphon import SyphonAction, SyphonDecision, syphon_after_send, syphon_before_send
from bridge.core.syphon_timing import lock_renewal_due, may_poll, receive_wait
from bridge.delivery.context import DeliveryContext
from bridge.errors import NamespaceError
from bridge.paired.entities import paired_entities
from bridge.servicebus.messages import RestoredMessage, from_backlog_message

log = logging.getLogger(__name__)


@dataclass
class QueueReport:
    """What a syphon did with one backlog queue in one run."""

    queue: str
    receives: int = 0
    received: int = 0
    sent: int = 0
    dead_lettered: int = 0
    abandoned: int = 0
    lock_renewals: int = 0
    stopped: str | None = None
    last_moved_at: float | None = None
    """``ctx.clock()`` time when the last message left the backlog (sent or dead-lettered)."""


def split_reason(reason: str) -> tuple[str, str]:
    """``"<code>: <details>"`` → (code, details): a short dead-letter reason and its description."""
    code, sep, details = reason.partition(": ")
    return (code, details) if sep else (reason, "")


class _Batch:
    """One received batch: which messages are still unsettled, and when their locks need renewing."""

    def __init__(self, messages: Sequence[ServiceBusReceivedMessage], received_at: float) -> None:
        self.messages = list(messages)
        self.unsettled = set(range(len(messages)))
        self.lock_from = received_at
        expiries = [m.locked_until_utc for m in messages]
        self.locked_until = min((t.timestamp() for t in expiries if t is not None), default=None)


class BacklogSyphon:
    """Syphons one backlog queue of the secondary while the caller holds its lease (``holds``)."""

    def __init__(self, ctx: DeliveryContext, queue: str, holds: Callable[[], bool]) -> None:
        self.ctx = ctx
        self.queue = queue
        self.holds = holds
        self.report = QueueReport(queue)
        self.paired = paired_entities(ctx.settings)

    # ---- the loop --------------------------------------------------------------------------------------
    def run(self, until: float) -> QueueReport:
        """Move messages until ``until`` (a ``ctx.clock()`` time), the lease is lost, or the primary fails."""
        ctx, options = self.ctx, self.ctx.settings.paired
        while self.report.stopped is None:
            if not self.holds():
                self.report.stopped = "lease lost"
                break
            if not may_poll(ctx.paired.get(entity) for entity in self.paired):
                self.report.stopped = "every paired entity is failed over"
                break
            wait = receive_wait(until - ctx.clock(), options.syphon_receive_wait)
            if wait <= 0:
                break
            try:
                messages = ctx.pool.receive_batch("secondary", self.queue, options.syphon_batch_size, wait)
            except NamespaceError as error:
                self.report.stopped = f"receive failed: {describe_error(error)}"
                break
            finally:
                self.report.receives += 1
                ctx.cost.add(self.queue, Operation.SYPHON_RECEIVE)
            if not messages:
                continue
            self.report.received += len(messages)
            if not self.move(messages) and self.report.stopped is None:
                # Everything waits for failed-over destinations: poll again one retry interval later.
                time.sleep(max(0.0, min(options.syphon_retry_interval, until - ctx.clock())))
        return self.report

    # ---- one batch -------------------------------------------------------------------------------------
    def move(self, messages: Sequence[ServiceBusReceivedMessage]) -> bool:
        """Restore, send, settle one batch; True when some message left the backlog."""
        ctx = self.ctx
        moved_before = self.report.sent + self.report.dead_lettered
        batch = _Batch(messages, ctx.clock())
        now = ctx.clock()
        restored = [from_backlog_message(message, now) for message in messages]
        states: dict[str, PairedState] = {}
        groups: dict[str, list[int]] = {}
        blocked: set[str] = set()
        for index, decision in enumerate(restored):
            if isinstance(decision, RestoredMessage):
                destination = decision.destination
                if destination not in states:
                    states[destination] = ctx.paired.get(destination)
                before = syphon_before_send(Restored(decision.fields, destination), states[destination])
                if before.action is SyphonAction.SEND and destination not in blocked:
                    groups.setdefault(destination, []).append(index)
                    continue
                blocked.add(destination)
            else:
                before = syphon_before_send(decision, PairedState())
            self._settle(batch, index, before)
        for destination, indexes in groups.items():
            if self.report.stopped is not None:
                break
            self._send_group(batch, destination, indexes, [restored[i] for i in indexes])
        for index in sorted(batch.unsettled):  # left over by a stop
            self._settle(batch, index, SyphonDecision(SyphonAction.ABANDON, "syphon stopped"))
        moved = self.report.sent + self.report.dead_lettered > moved_before
        if moved:
            self.report.last_moved_at = ctx.clock()
        return moved

    def _send_group(
        self, batch: _Batch, destination: str, indexes: list[int], restored: Sequence[object]
    ) -> None:
        ctx = self.ctx
        self._renew_locks_if_due(batch)
        outgoing = [r.message for r in restored if isinstance(r, RestoredMessage)]
        result = ctx.pool.send("primary", destination, outgoing)
        if result.accepted:
            ctx.cost.add(destination, Operation.SYPHON_SEND, len(result.accepted))
        accepted = set(result.accepted)
        outcomes: dict[int, Outcome] = {}
        for position, index in enumerate(indexes):
            if position in accepted:
                decision = syphon_after_send(Outcome.success(), destination)
            else:
                error = result.failed[position]
                key = id(error)
                if key not in outcomes:
                    outcomes[key] = Outcome.from_classification(classify(error), describe_error(error))
                decision = syphon_after_send(outcomes[key], destination)
            if decision.action is SyphonAction.STOP:
                self.report.stopped = f"primary failed for {destination}: {decision.reason}"
                decision = SyphonDecision(SyphonAction.ABANDON, decision.reason)
            self._settle(batch, index, decision)

    # ---- settling --------------------------------------------------------------------------------------
    def _settle(self, batch: _Batch, index: int, decision: SyphonDecision) -> None:
        pool, message = self.ctx.pool, batch.messages[index]
        try:
            if decision.action is SyphonAction.COMPLETE:
                pool.complete("secondary", self.queue, message)
                self.report.sent += 1
            elif decision.action is SyphonAction.DEAD_LETTER:
                reason, description = split_reason(decision.reason)
                pool.dead_letter("secondary", self.queue, message, reason, description)
                self.report.dead_lettered += 1
                log.warning(
                    "syphon dead-lettered %s in %s: %s", message.message_id, self.queue, decision.reason
                )
            else:
                pool.abandon("secondary", self.queue, message)
                self.report.abandoned += 1
                log.debug("syphon left %s in %s: %s", message.message_id, self.queue, decision.reason)
        except NamespaceError as error:
            # The lock is lost or the secondary failed: the message comes back after its lock expires and
            # is sent again (same MessageId), so nothing is lost; an outage ends this queue's run.
            log.info("settling %s in %s failed: %s", message.message_id, self.queue, describe_error(error))
            if classify(error).error_class is ErrorClass.OUTAGE and self.report.stopped is None:
                self.report.stopped = f"secondary failed: {describe_error(error)}"
        batch.unsettled.discard(index)

    def _renew_locks_if_due(self, batch: _Batch) -> None:
        now = self.ctx.clock()
        margin = self.ctx.pool.attempt_deadline
        if not batch.unsettled or not lock_renewal_due(batch.lock_from, batch.locked_until, now, margin):
            return
        messages = [batch.messages[i] for i in sorted(batch.unsettled)]
        try:
            expiries = self.ctx.pool.renew_locks("secondary", self.queue, messages)
        except NamespaceError as error:
            log.info("renewing locks in %s failed: %s", self.queue, describe_error(error))
            return
        batch.lock_from = now
        batch.locked_until = min((t.timestamp() for t in expiries), default=None)
        self.report.lock_renewals += 1
