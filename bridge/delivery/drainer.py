"""Draining one outbox shard: read a batch, send it, let the replication core decide, apply the decision.

One drainer at a time per shard (a lease in Redis), so the order of a SessionId/PartitionKey is kept: a
batch is processed in order and the first entry that must wait (``Retry``) stops the shard until its
backoff has passed; everything after it stays in the outbox. Entries are acknowledged only after a
namespace accepted them. A drainer that dies leaves its entries pending in the consumer group; the next
lease holder claims every pending entry of the shard (``XAUTOCLAIM`` from 0) before reading new ones, so a
crash between read and ack costs a duplicate (same MessageId), never a loss.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from azure.servicebus import ServiceBusMessage

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, SECONDARY, Ack, Change, DeadLetter, Retry, SendDecision, SendNext
from bridge.core.outcomes import Outcome
from bridge.core.replication import RetryContext, decide_active, decide_passive, decide_single
from bridge.core.roles import Role, RoleState, Swap, next_health
from bridge.delivery.attempts import BatchOutcome, batch_outcome
from bridge.delivery.context import DeliveryContext
from bridge.delivery.paired_sender import paired_decisions
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import to_message

log = logging.getLogger(__name__)

READ_COUNT = 200


@dataclass
class DrainReport:
    """What one drain run did (returned by the task, logged at DEBUG)."""

    entity: str
    shard: int
    sent: int = 0
    dead_lettered: int = 0
    quarantined: int = 0
    retry_after: float | None = None
    busy: bool = False
    notes: list[str] = field(default_factory=list)


class ShardDrainer:
    """Drains one shard of one entity for a bounded time."""

    def __init__(self, ctx: DeliveryContext, entity: str, shard: int) -> None:
        self.ctx = ctx
        self.entity = entity
        self.shard = shard
        self.owner = f"{ctx.identity}:{uuid.uuid4().hex[:8]}"
        self.report = DrainReport(entity, shard)
        self.mode = ctx.settings.entity(entity).replication
        self.lease_ms = int(ctx.settings.workers.lease_ttl * 1000)

    def run(self, budget: float = 20.0, idle_reads: int = 2, block_ms: int = 200) -> DrainReport:
        """Drain until the shard is empty, must wait, or ``budget`` seconds passed."""
        ctx = self.ctx
        if not ctx.leases.acquire(self.entity, self.shard, self.owner, self.lease_ms):
            self.report.busy = True
            return self.report
        try:
            started = ctx.clock()
            not_before = ctx.retry.not_before(self.entity, self.shard)
            if not_before is not None and not_before > started:
                self.report.retry_after = not_before - started
                return self.report
            ctx.reader.ensure_groups(self.entity)
            entries = ctx.reader.claim_shard(self.entity, self.shard, self.owner)
            idle = 0
            while ctx.clock() - started < budget:
                if not entries:
                    entries = ctx.reader.read_shard(self.entity, self.shard, self.owner, READ_COUNT, block_ms)
                if not entries:
                    idle += 1
                    if idle >= idle_reads:
                        break
                    continue
                idle = 0
                if not self._process(entries):
                    break
                entries = []
                if not ctx.leases.renew(self.entity, self.shard, self.owner, self.lease_ms):
                    self.report.notes.append("lease lost")
                    break
            if self.report.retry_after is None:
                ctx.retry.clear(self.entity, self.shard)
        finally:
            ctx.leases.release(self.entity, self.shard, self.owner)
        return self.report

    # ---- one batch ---------------------------------------------------------------------------------
    def _process(self, entries: Sequence[OutboxEntry]) -> bool:
        """Send and settle a batch in order; False when the shard must stop (a Retry)."""
        good: list[OutboxEntry] = []
        for entry in entries:
            if entry.envelope is None:
                reason = str(entry.error) if entry.error else "undecodable outbox entry"
                self.ctx.reader.move(
                    entry, to="quarantine", code="corrupt_entry", reason=reason, now=self.ctx.clock()
                )
                self.report.quarantined += 1
            else:
                good.append(entry)
        if not good:
            return True
        if self.mode == "active":
            decisions = self._active(good)
        elif self.mode == "paired":
            decisions = paired_decisions(self, good)
        elif self.mode == "none":
            decisions = self._single(good)
        else:
            decisions = self._passive(good)
        return self._apply(good, decisions)

    def _retry_context(self) -> RetryContext:
        attempt = self.ctx.retry.attempts(self.entity, self.shard)
        return RetryContext(self.ctx.clock(), attempt, self.ctx.backoff, random.random)

    def _send(self, role: Role, entries: Sequence[OutboxEntry], operation: Operation) -> BatchOutcome:
        messages = [to_message(e.envelope) for e in entries if e.envelope is not None]
        return self.send_messages(role, self.entity, messages, operation)

    def send_messages(
        self, role: Role, path: str, messages: Sequence[ServiceBusMessage], operation: Operation
    ) -> BatchOutcome:
        """One batched send to ``path`` in namespace ``role``: outcomes, cost and health recorded."""
        result = self.ctx.pool.send(role, path, messages)
        now = self.ctx.clock()
        outcome = batch_outcome(
            self.ctx.streaks,
            entity=self.entity,
            role=role,
            size=len(messages),
            accepted=result.accepted,
            failed=result.failed,
            now=now,
        )
        if result.accepted:
            self.ctx.cost.add(self.entity, operation, len(result.accepted))
        self._record_health(role, outcome)
        return outcome

    def _record_health(self, role: Role, outcome: BatchOutcome) -> None:
        # The batch's overall verdict: any accepted message proves the namespace up; otherwise the
        # first failure says how it is doing (a message-permanent failure says nothing about it).
        verdict = next((o for o in outcome.outcomes if o.ok), None) or outcome.outcomes[0]
        before = self.ctx.roles.health(self.entity, role)
        after = next_health(before, verdict, self.ctx.clock())
        if after is not before:
            self.ctx.roles.set_health(self.entity, role, after)
            if after.available != before.available:
                log.warning(
                    "namespace %s is %s for entity %s: %s",
                    role,
                    "available" if after.available else "UNAVAILABLE",
                    self.entity,
                    after.last_error or "ok",
                )

    def _single(self, entries: Sequence[OutboxEntry]) -> list[SendDecision]:
        outcome = self._send("primary", entries, Operation.PRIMARY_SEND)
        ctx = self._retry_context()
        return [decide_single(o, ctx, PRIMARY) for o in outcome.outcomes]

    def _passive(self, entries: Sequence[OutboxEntry]) -> list[SendDecision]:
        observed: RoleState = self.ctx.roles.get(self.entity)
        active_op = Operation.PRIMARY_SEND if observed.active == "primary" else Operation.BACKUP_SEND
        backup_op = Operation.BACKUP_SEND if observed.active == "primary" else Operation.PRIMARY_SEND
        first = self._send(observed.active, entries, active_op)
        ctx = self._retry_context()
        decisions = [decide_passive(observed, o, None, ctx) for o in first.outcomes]
        again = [i for i, d in enumerate(decisions) if isinstance(d, SendNext)]
        if again:
            second = self._send(observed.backup, [entries[i] for i in again], backup_op)
            for j, i in enumerate(again):
                decisions[i] = decide_passive(observed, first.outcomes[i], second.outcomes[j], ctx)
        return decisions

    def _active(self, entries: Sequence[OutboxEntry]) -> list[SendDecision]:
        policy = self.ctx.settings.entity(self.entity).success_policy
        delivered = self.ctx.retry.delivered(self.entity, self.shard, [e.entry_id for e in entries])
        outcomes: list[dict[object, Outcome]] = [{} for _ in entries]
        for target, op in ((PRIMARY, Operation.PRIMARY_SEND), (SECONDARY, Operation.BACKUP_SEND)):
            todo = [i for i, e in enumerate(entries) if target not in delivered.get(e.entry_id, ())]
            if not todo:
                continue
            result = self._send(target.namespace, [entries[i] for i in todo], op)
            for j, i in enumerate(todo):
                outcomes[i][target] = result.outcomes[j]
        ctx = self._retry_context()
        return [
            decide_active(outcomes[i], policy, ctx, delivered.get(e.entry_id, ()))  # type: ignore[arg-type]
            for i, e in enumerate(entries)
        ]

    # ---- applying decisions ----------------------------------------------------------------------
    def _apply(self, entries: Sequence[OutboxEntry], decisions: Sequence[SendDecision]) -> bool:
        to_ack: list[str] = []
        for entry, decision in zip(entries, decisions, strict=True):
            self._apply_changes(decision.changes)
            for alert in decision.alerts:
                log.error("entity %s: %s", self.entity, alert)
            if isinstance(decision, Ack):
                to_ack.append(entry.entry_id)
                continue
            self._ack(to_ack)
            to_ack = []
            now = self.ctx.clock()
            if isinstance(decision, DeadLetter):
                self.ctx.reader.move(
                    entry, to="deadletter", code="message_permanent", reason=decision.reason, now=now
                )
                self.ctx.retry.forget_delivered(self.entity, self.shard, [entry.entry_id])
                self.report.dead_lettered += 1
                log.warning(
                    "entity %s: message %s dead-lettered locally: %s",
                    self.entity,
                    entry.envelope.message_id if entry.envelope else "?",
                    decision.reason,
                )
                continue
            if isinstance(decision, Retry):
                if decision.delivered_to:
                    self.ctx.retry.remember_delivered(
                        self.entity, self.shard, entry.entry_id, decision.delivered_to
                    )
                self.ctx.retry.schedule(self.entity, self.shard, now + decision.retry_after)
                self.report.retry_after = decision.retry_after
                log.info(
                    "entity %s shard %d waits %.2fs: %s",
                    self.entity,
                    self.shard,
                    decision.retry_after,
                    decision.reason,
                )
                return False
            raise RuntimeError(f"unexpected decision {decision!r}")  # SendNext never survives _send
        self._ack(to_ack)
        return True

    def _ack(self, entry_ids: list[str]) -> None:
        if entry_ids:
            self.ctx.reader.ack(self.entity, self.shard, entry_ids)
            if self.mode == "active":
                self.ctx.retry.forget_delivered(self.entity, self.shard, entry_ids)
            self.report.sent += len(entry_ids)

    def _apply_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if isinstance(change, Swap):
                applied, state = self.ctx.roles.swap(self.entity, change)
                if applied:
                    log.warning(
                        "entity %s: roles swapped %s -> %s (epoch %d): %s",
                        self.entity,
                        change.from_role,
                        change.to_role,
                        state.epoch,
                        change.reason,
                    )
            else:
                namespace = self.ctx.settings.primary.namespace_name if self.ctx.settings.primary else ""
                self.ctx.paired.apply_all(self.entity, namespace, [change])
