"""The drainer's settling collaborator: carrying out a batch's settle plan (``bridge.core.settle``) — state
changes, journal, quarantine and dead-letter moves, held keys, acknowledgements — fenced by the tenure's
lease. It is handed the tenure's state (``bridge.delivery.tenure.TenureState``) and keeps none of its own;
what each step adds to the report and the batch (entries sent, dead-lettered, quarantined, the wait, the
role epoch a swap returned) it hands to the drainer as a ``SettleTally``, and the drainer folds it in."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from bridge.core import journal as journal_events
from bridge.core.cost import CostTally
from bridge.core.decisions import Change, Settlement
from bridge.core.history import entry_age, latency_counts
from bridge.core.journal import JournalEvent
from bridge.core.layout import stream_id
from bridge.core.partitioning import partition_key
from bridge.core.roles import Swap
from bridge.core.seen_back import backoff_awaits
from bridge.core.settle import (
    Acknowledge,
    DeadLetterEntry,
    HoldKey,
    SettlePlan,
    StayPending,
    Stop,
    plan_settlement,
)
from bridge.delivery.context import DeliveryContext
from bridge.delivery.settler import Settler
from bridge.delivery.shard_sending import ShardSending
from bridge.delivery.tenure import (
    PROBLEM_FULL_WAIT,
    HealthDue,
    HeldFrom,
    SettleTally,
    TenureState,
    message_id_of,
)
from bridge.errors import BridgeError, ProblemStreamFullError
from bridge.journal.emit import JournalBatch, paired_events
from bridge.observability import metrics, transitions
from bridge.outbox.reader import OutboxEntry, entry_size

log = logging.getLogger(__name__)


class ShardSettling:
    """Settles batches for one tenure: in, a batch's entries and their settlements; out, the settle plan
    carried out (in line, or behind the drainer on ``settler``) and the tenure's state moved on (holds,
    backoff, where the next claim starts); ``apply`` says whether the shard goes on. The tallies of each
    step go to ``tally``, the drainer's, which folds them into the state (behind the drainer, the
    settler's thread hands over the count of the entries it acknowledged)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        state: TenureState,
        sending: ShardSending,
        settler: Settler,
        tally: Callable[[SettleTally], None],
    ) -> None:
        self.ctx = ctx
        self.state = state
        self.sending = sending
        self.settler = settler
        self.tally = tally

    @property
    def entity(self) -> str:
        """The tenure's entity."""
        return self.state.tenure.entity

    @property
    def shard(self) -> int:
        """The tenure's shard."""
        return self.state.tenure.shard

    def apply(self, entries: Sequence[OutboxEntry], decisions: Sequence[Settlement]) -> bool:
        """Carry out the batch's settle plan (``bridge.core.settle``): the state changes, once each, then
        every entry's fate; False when a ``Retry`` stops the shard until its backoff.

        Each entry is settled on its own (an ``Ack`` after a ``Retry`` of another key is still an ack; a
        mode never sends past a ``Retry`` or ``Hold`` of the same key).
        """
        keys = [self.key(e) for e in entries]
        plan = plan_settlement(
            decisions,
            keys,
            held=self.state.holds.until.keys(),
            waits=self.state.abandoned.until,
            own_waits=self.state.abandoned.ids.keys(),
            entity=self.entity,
            now=self.ctx.clock(),
        )
        for alert in plan.alerts:
            log.error("entity %s: %s", self.entity, alert)
        self._apply_changes(plan.changes)
        in_flight = self.state.batch
        due = in_flight.take_health_due()
        if plan.behind:
            # Every entry accepted: journal, send counts, acknowledgement and health are written behind us
            # (``settler``).
            batch, accepted, cost = in_flight.journal.take(), list(entries), in_flight.take_cost()
            self.settler.submit(lambda: self._settle_accepted(batch, accepted, due, cost))
            return True
        self.settler.flush()
        self.sending.record_due_health(due)
        self.count(self.state.batch.take_cost())
        full = self._settle_in_line(entries, keys, plan)
        if plan.stop is not None:
            self._stop(plan.stop)
        if full is not None:
            self.problem_stream_full(full)
        return plan.stop is None and full is None

    def _settle_in_line(
        self, entries: Sequence[OutboxEntry], keys: Sequence[str], plan: SettlePlan
    ) -> ProblemStreamFullError | None:
        """Journal first, then dead-letter moves, holds and what retried entries already reached, then
        the acknowledgements. The dead-letter entries the stream has no room for stay pending (neither
        journaled nor moved): the refusal is returned, and the shard holds until there is room."""
        fates = list(zip(entries, plan.fates, strict=True))
        dead = [entry.entry_id for entry, fate in fates if isinstance(fate, DeadLetterEntry)]
        room = self.ctx.reader.problem_room(self.entity, "deadletter") if dead else 0
        kept = set(dead[room:])
        for entry, fate in fates:
            if isinstance(fate, DeadLetterEntry) and entry.entry_id not in kept:
                self.state.batch.journal.dead_lettered(message_id_of(entry), plan.now, fate.reason)
        # Before any entry is acknowledged or moved: the journal then never lacks what the outbox lost.
        self.state.batch.journal.take().write(self.ctx.journal, self.entity)
        full = self.full("deadletter") if kept else None
        pending: dict[str, str] = {}  # each key's first entry that stays pending (a hold starts there)
        for key, (entry, fate) in zip(keys, fates, strict=True):
            if isinstance(fate, HoldKey | StayPending):
                pending.setdefault(key, entry.entry_id)
        for entry, fate in fates:
            if isinstance(fate, DeadLetterEntry):
                if entry.entry_id in kept:
                    continue
                try:
                    self._dead_letter(entry, fate, plan.now)
                except ProblemStreamFullError as exc:  # filled meanwhile by another shard: held as well
                    full = exc
            elif isinstance(fate, HoldKey):
                self._hold(fate, pending.get(fate.key, entry.entry_id))
            elif isinstance(fate, StayPending) and fate.delivered_to:
                self.ctx.retry.remember_delivered(self.entity, self.shard, entry.entry_id, fate.delivered_to)
        self._ack([entry for entry, fate in fates if isinstance(fate, Acknowledge)])
        return full

    def quarantine(self, entry: OutboxEntry) -> bool:
        """Move an undecodable entry to the quarantine stream, journaled first; False when the stream has
        no room: the entry stays pending (never moved, never lost) and the shard holds."""
        entity = self.entity
        if not self.ctx.reader.problem_room(entity, "quarantine"):
            self.problem_stream_full(self.full("quarantine"))
            return False
        reason = str(entry.error) if entry.error else "undecodable outbox entry"
        raw_id = entry.fields.get(b"id")
        message_id = raw_id.decode("utf-8", "replace") if raw_id is not None else None
        self.write_journal([journal_events.quarantined(message_id, self.ctx.clock(), reason=reason)])
        try:
            self.ctx.reader.move(
                entry,
                to="quarantine",
                code="corrupt_entry",
                reason=reason,
                now=self.ctx.clock(),
                fence=self.state.tenure.fence,
            )
        except ProblemStreamFullError as full:  # filled since the check (another shard): held
            self.problem_stream_full(full)
            return False
        self.tally(SettleTally(quarantined=1))
        log.warning("entity %s: outbox entry %s quarantined: %s", entity, entry.entry_id, reason)
        transitions.quarantined(entity, "outbox", reason)
        return True

    def full(self, stream: str) -> ProblemStreamFullError:
        bound = self.ctx.settings.entity(self.entity).max_problem_entries
        return ProblemStreamFullError(self.entity, stream, bound, bound, retry_after=PROBLEM_FULL_WAIT)

    def problem_stream_full(self, full: ProblemStreamFullError) -> None:
        """A problem entry found its stream full: it stays pending and the shard holds (loudly) until
        ``PROBLEM_FULL_WAIT`` has passed, then decides it again (docs/durability.md, "Bounded problem
        streams")."""
        now = self.ctx.clock()
        wait = self.state.backoff
        wait.not_before = max(wait.not_before or now, now + PROBLEM_FULL_WAIT)
        wait.wake_floor = None  # a full stream is no namespace outage: nothing seen back ends this wait
        self.tally(SettleTally(wait_at_least=PROBLEM_FULL_WAIT, notes=(str(full),)))
        log.error("entity %s shard %d holds: %s", self.entity, self.shard, full)
        transitions.problem_stream_full(self.entity, full.stream)

    def _dead_letter(self, entry: OutboxEntry, fate: DeadLetterEntry, now: float) -> None:
        reason = fate.reason
        self.ctx.reader.move(
            entry, to="deadletter", code=fate.code, reason=reason, now=now, fence=self.state.tenure.fence
        )
        self.ctx.retry.forget_delivered(self.entity, self.shard, [entry.entry_id])
        self.tally(SettleTally(dead_lettered=1))
        log.warning(
            "entity %s: message %s dead-lettered locally: %s",
            self.entity,
            message_id_of(entry) or "?",
            reason,
        )
        transitions.dead_lettered(self.entity, reason)

    def _stop(self, stop: Stop) -> None:
        """The shard waits until ``stop.until``; a backoff is counted and kept in Redis (fenced), a planned
        wait (a restore barrier) is this tenure's alone."""
        if stop.backoff:
            self.state.backoff.attempts = self.ctx.retry.back_off(
                self.entity, self.shard, stop.retry_after, fence=self.state.tenure.fence
            )
            self.state.backoff.retry_state = True
        self.state.backoff.not_before = stop.until
        self.state.backoff.wake_floor = stop.floor if stop.backoff else None
        self.state.backoff.wake_awaits = backoff_awaits(self.state.tenure.mode, stop.pending)
        self.tally(SettleTally(retry_after=stop.retry_after))
        log.info(
            "entity %s shard %d waits %.2fs: %s",
            self.entity,
            self.shard,
            stop.retry_after,
            stop.reason,
        )

    def _settle_accepted(
        self, batch: JournalBatch, entries: list[OutboxEntry], due: list[HealthDue], cost: CostTally
    ) -> None:
        # Before the entries are acknowledged: the journal then never lacks what the outbox lost, and the
        # send counters never lag behind the outbox (an entry gone from it is counted in every namespace
        # that took it; one counted and not acknowledged when the process dies is sent, and counted, again).
        batch.write(self.ctx.journal, self.entity)
        self.count(cost)
        self._ack(entries)
        # A namespace that was down is announced back from here (a few milliseconds after its send), unless
        # a later attempt found it down meanwhile (``bridge.core.roles.next_health``).
        self.sending.record_due_health(due)

    def count(self, cost: CostTally) -> None:
        """Write the send counters (``BatchInFlight.cost``): with each batch's settlement, before its
        acknowledgements, and at the end of a turn for sends no settlement took."""
        if cost.total:
            self.ctx.cost.add(self.entity, cost)

    # ---- keys that wait (Hold) -------------------------------------------------------------------
    def key(self, entry: OutboxEntry) -> str:
        """The entry's order key (SessionId, PartitionKey, MessageId when deduplicating), else its own id."""
        key = partition_key(entry.envelope, self.state.tenure.dedup) if entry.envelope is not None else None
        return f"key:{key}" if key is not None else f"entry:{entry.entry_id}"

    def _hold(self, hold: HoldKey, first: str) -> None:
        self.state.holds.until[hold.key] = hold.until
        self.state.holds.held_from[hold.key] = HeldFrom(first, hold.awaits)
        log.info(
            "entity %s shard %d holds a key for %.2fs: %s",
            self.entity,
            self.shard,
            hold.retry_after,
            hold.reason,
        )

    def not_held(self, entries: list[OutboxEntry]) -> list[OutboxEntry]:
        """The entries whose key is not held; a held key's entries stay pending behind its first one."""
        if not self.state.holds.until:
            return entries
        return [e for e in entries if self.key(e) not in self.state.holds.until]

    def holds_due(self) -> bool:
        """Some held key may be tried again: its entries are claimed again (in order) and re-decided."""
        return bool(self.state.holds.until) and min(self.state.holds.until.values()) <= self.ctx.clock()

    def release_due_holds(self) -> None:
        """Forget the holds that are due; the next claim starts at the first pending entry of their keys
        (the entries before it are settled or belong to keys still held), so they are decided again in
        order and a long run of another key's held entries before them is not claimed again."""
        now = self.ctx.clock()
        due = [key for key, at in self.state.holds.until.items() if at <= now]
        if not due:
            return
        starts = [self.state.reading.claim_from, *(self.state.holds.held_from[key].entry_id for key in due)]
        self.state.reading.claim_from = min(starts, key=stream_id)
        for key in due:
            del self.state.holds.until[key], self.state.holds.held_from[key]

    def _ack(self, entries: list[OutboxEntry]) -> None:
        if entries:
            entry_ids = [entry.entry_id for entry in entries]
            sizes = [entry_size(entry.fields) for entry in entries]
            self.ctx.reader.ack(
                self.entity, self.shard, entry_ids, fence=self.state.tenure.fence, sizes=sizes
            )
            metrics.record_delivered(self.entity, entry_ids, time.time())
            self._record_latency(entry_ids)
            if self.state.tenure.mode == "active":
                self.ctx.retry.forget_delivered(self.entity, self.shard, entry_ids)
            self.tally(SettleTally(sent=len(entry_ids)))

    def _record_latency(self, entry_ids: list[str]) -> None:
        """Add the entries' delivery latencies to the shared histogram (the status page's history); a
        failure loses only these counts, never the delivery, which is already acknowledged."""
        if self.ctx.latency is None:
            return
        now = self.ctx.clock()
        try:
            self.ctx.latency.record(self.entity, latency_counts([entry_age(i, now) for i in entry_ids]))
        except BridgeError as exc:
            log.debug("entity %s: latency not recorded: %s", self.entity, exc)

    def write_journal(self, events: list[JournalEvent]) -> None:
        if self.ctx.journal is not None and events:
            self.ctx.journal.append(self.entity, events)

    def _apply_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if isinstance(change, Swap):
                applied, state = self.ctx.roles.swap(self.entity, change)
                self.tally(SettleTally(seen_epoch=state.epoch))
                if applied:
                    self.write_journal(
                        [
                            journal_events.role_swapped(
                                self.ctx.clock(),
                                from_role=change.from_role,
                                to_role=change.to_role,
                                epoch=state.epoch,
                                reason=change.reason,
                            )
                        ]
                    )
                    log.warning(
                        "entity %s: roles swapped %s -> %s (epoch %d): %s",
                        self.entity,
                        change.from_role,
                        change.to_role,
                        state.epoch,
                        change.reason,
                    )
                    transitions.role_swapped(self.entity, change.to_role, change.reason)
            else:
                namespace = self.ctx.settings.primary.namespace_name if self.ctx.settings.primary else ""
                update = self.ctx.paired.apply_all(self.entity, namespace, [change])
                self.write_journal(paired_events(change, update, self.ctx.clock()))
