"""Draining one outbox shard: read a batch, send it, let the replication core decide, apply the decision.

One drainer at a time per shard (a lease in Redis), so the order of a SessionId/PartitionKey is kept: a
batch is processed in order and the first entry that must wait (``Retry``) stops the shard until its
backoff has passed; everything after it stays in the outbox. Entries are acknowledged only after a
namespace accepted them. A drainer that dies leaves its entries pending in the consumer group; the next
lease holder claims every pending entry of the shard (``XAUTOCLAIM`` from 0) before reading new ones, so a
crash between read and ack costs a duplicate (same MessageId), never a loss.

Keys on hold (``Hold``: their entries stay pending) never make another key's newer entries pass its older
ones: the drainer reads new entries only once it has claimed the whole pending list, ``READ_COUNT`` at a
time, so an older pending entry of a key that is not held (one whose batch was retried) is always sent
before that key's newer entries. A claim starts after the entries an earlier claim of the tenure found
settled or held (``claim_from``), so a long run of held entries is not claimed again on every pass; the
next claim starts from 0 again when a hold ends.

A tenure runs in one of two ways. ``serve`` is the event-driven drainer of ``bridge.delivery.service``:
it holds the shard for as long as its process owns it, blocks in ``XREAD`` until an entry arrives and reads
it at once, and waits out a backoff without letting go. ``run`` is the bounded drain task that the sweeper
queues for a shard nobody holds (the safety net). Both read, claim, acknowledge, move and back off through
scripts fenced with the tenure's lease token, and a ``LeaseKeeper`` renews the lease during long sends; a
tenure whose lease passed to another drainer stops at its next write (``LeaseLostError``) and changes
nothing: the new holder claims and resends what was pending.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bridge.core import abandoned
from bridge.core import journal as journal_events
from bridge.core.cost import Operation
from bridge.core.decisions import Change, Settlement
from bridge.core.journal import JournalEvent
from bridge.core.partitioning import partition_key
from bridge.core.replication import RetryContext
from bridge.core.roles import Role, Swap, next_health
from bridge.core.settle import (
    Acknowledge,
    DeadLetterEntry,
    HoldKey,
    SettlePlan,
    StayPending,
    Stop,
    plan_settlement,
)
from bridge.delivery.attempts import BatchOutcome, batch_outcome
from bridge.delivery.context import DeliveryContext
from bridge.delivery.expiry import settle_unexpired
from bridge.delivery.lease_keeper import HeldLease, LeaseKeeper
from bridge.delivery.modes import sender_for
from bridge.delivery.settler import Settler
from bridge.errors import LeaseLostError, ProblemStreamFullError, StateStoreUnavailableError
from bridge.journal.emit import BatchJournal, JournalBatch, namespace_names, paired_events
from bridge.observability import metrics, transitions
from bridge.outbox.layout import LayoutStore
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import OutgoingMessage

log = logging.getLogger(__name__)

READ_COUNT = 200
"""Entries per read: one batched send (or a few, as the size limit allows) per read."""
LAYOUT_WAIT = 0.5
"""Seconds a new-layout entry waits before the drainer looks again whether the old layout is drained."""
PROBLEM_FULL_WAIT = 5.0
"""Seconds a shard holds before it decides again an entry whose quarantine or dead-letter stream was full."""
BLOCK_MS = 2000
"""How long an idle owned shard blocks in one ``XREAD`` (stays below the client's 5 s socket timeout): one
command per shard per 2 s while idle, and how soon a stop is noticed."""


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


def _after(entry_id: str) -> str:
    """The smallest stream entry id after ``entry_id`` (where a claim past it starts)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq) + 1}"


def _message_id(entry: OutboxEntry) -> str | None:
    return entry.envelope.message_id if entry.envelope else None


class ShardDrainer:
    """Drains one shard of one entity while it holds the shard's lease (one tenure, one token)."""

    def __init__(
        self,
        ctx: DeliveryContext,
        entity: str,
        shard: int,
        *,
        consumer: str | None = None,
        token: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.entity = entity
        self.shard = shard
        # One consumer name per process (stable), one lease token per tenure (unique): the group keeps few
        # consumers, and a fence tells this tenure from an earlier or later one of the same process.
        self.consumer = consumer or ctx.identity
        self.token = token or f"{self.consumer}:{uuid.uuid4().hex[:8]}"
        self.fence = ctx.leases.fence(entity, shard, self.token)
        self.report = DrainReport(entity, shard)
        self.mode = ctx.settings.entity(entity).replication
        self.lease_ttl = ctx.settings.workers.lease_ttl
        self.attempts = 0
        self.not_before: float | None = None
        self._retry_state = False
        self.dedup = ctx.settings.entity(entity).requires_duplicate_detection
        self.abandoned: dict[tuple[Role, str], float] = {}
        """Paths this shard sends nothing newer to until the time given, after a send there timed out
        (``bridge.core.abandoned``); loaded from Redis when the tenure starts."""
        self.abandoned_ids: dict[tuple[Role, str], frozenset[str]] = {}
        """The messages this tenure abandoned per path: a send that carries them all may go at once."""
        self.abandoned_wait = ctx.settings.retry.abandoned_wait
        self.holds: dict[str, float] = {}
        """Keys this tenure holds back (``Hold``) until the time given; their entries stay pending."""
        self.claim_from = "0-0"
        """Where the next claim starts: every entry still pending before it belongs to a held key."""
        settings = ctx.settings
        self.journal = BatchJournal(
            namespace_names(
                settings.primary.namespace_name if settings.primary else None,
                settings.secondary.namespace_name if settings.secondary else None,
            ),
            dual=self.mode == "active",
        )
        """This batch's journal events, written before its entries are settled (``bridge.journal.emit``)."""
        self.settler = Settler()
        """Writes the journal and acknowledgements of fully accepted batches behind the drainer."""

    def run(self, budget: float = 20.0, idle_reads: int = 2, block_ms: int = 200) -> DrainReport:
        """Take the lease, drain until the shard is empty, must wait, or ``budget`` seconds passed, and give
        the lease back (the sweeper's drain task: the safety net behind ``DrainService``)."""
        keeper = LeaseKeeper(self.ctx.leases, self.lease_ttl)
        held = keeper.acquire(self.entity, self.shard, self.token)
        if held is None:
            self.report.busy = True
            return self.report
        stop = threading.Event()
        keeper.keep_alive(stop)
        deadline = self.ctx.clock() + budget
        try:
            self._drain(
                held,
                stop,
                lambda: self.ctx.clock() >= deadline,
                idle_reads=idle_reads,
                block_ms=block_ms,
                wait_on_retry=False,
            )
        except LeaseLostError:
            self.report.notes.append("lease lost")
        finally:
            stop.set()
            self._hand_over_holds()
            self.let_go(keeper, held)
        return self.report

    def _hand_over_holds(self) -> None:
        """A bounded drain that ends with held keys leaves the earliest of their times for the next one, so
        the sweeper does not restart it at once just to hold them again."""
        if self.holds and self.report.retry_after is None:
            delay = max(0.0, min(self.holds.values()) - self.ctx.clock())
            try:
                self.ctx.retry.hold_off(self.entity, self.shard, delay)
            except StateStoreUnavailableError as exc:
                log.info("entity %s shard %d: hold time not recorded: %s", self.entity, self.shard, exc)

    def serve(self, held: HeldLease, stop: threading.Event, block_ms: int = BLOCK_MS) -> DrainReport:
        """Drain for as long as ``held`` lasts and ``stop`` is not set (a ``DrainService`` drainer).

        New entries are read within a millisecond of their write (``XREAD BLOCK`` up to ``block_ms``, then
        a fenced read); a backoff is waited out holding the lease. ``LeaseLostError`` when the lease
        passed to another drainer; the caller releases the lease.
        """
        self._drain(held, stop, stop.is_set, idle_reads=None, block_ms=block_ms, wait_on_retry=True)
        return self.report

    def let_go(self, keeper: LeaseKeeper, held: HeldLease) -> None:
        """Release the lease and delete this process's consumer if it has nothing pending (best effort:
        an unreleased lease expires, an idle consumer is pruned by the next holder)."""
        try:
            keeper.release(held)
            self.ctx.reader.retire_consumer(self.entity, self.shard, self.consumer)
        except StateStoreUnavailableError as exc:
            log.warning("entity %s shard %d: not released cleanly: %s", self.entity, self.shard, exc)

    # ---- one tenure --------------------------------------------------------------------------------
    def _drain(
        self,
        held: HeldLease,
        stop: threading.Event,
        should_stop: Callable[[], bool],
        *,
        idle_reads: int | None,
        block_ms: int,
        wait_on_retry: bool,
    ) -> None:
        """Claim what is pending (a crashed or superseded holder's entries first, in order), then read new
        entries as they come; stop on ``should_stop``, after ``idle_reads`` empty reads, or at a backoff
        unless ``wait_on_retry``."""
        try:
            self._tenure(
                held, stop, should_stop, idle_reads=idle_reads, block_ms=block_ms, wait_on_retry=wait_on_retry
            )
        except BaseException:
            self.settler.close(quiet=True)
            raise
        self.settler.close()

    def _tenure(
        self,
        held: HeldLease,
        stop: threading.Event,
        should_stop: Callable[[], bool],
        *,
        idle_reads: int | None,
        block_ms: int,
        wait_on_retry: bool,
    ) -> None:
        reader = self.ctx.reader
        self._take_over()
        claiming, prune, idle = True, True, 0
        while not should_stop():
            self.settler.check()
            if not self._wait_for_turn(held, stop, wait_on_retry):
                return
            if self._holds_due():
                claiming = True
            if claiming:
                self._release_due_holds()
                self.settler.flush()  # acknowledgements on their way would be claimed and sent again
                entries = reader.claim_fenced(
                    self.entity,
                    self.shard,
                    self.consumer,
                    self.fence,
                    count=READ_COUNT,
                    prune=prune,
                    start=self.claim_from,
                )
                prune = False
                if not entries:
                    claiming = False  # the whole pending list was claimed: read what is new
                    continue
            else:
                read = reader.read_fenced(self.entity, self.shard, self.consumer, self.fence, READ_COUNT)
                entries = read.entries
                if not entries:
                    idle += 1
                    if idle_reads is not None and idle >= idle_reads:
                        return
                    # Idle: one XREAD per ``block_ms`` and nothing else until an entry arrives (or a stop).
                    after = read.last_delivered or "0-0"
                    while not reader.wait_for_new(self.entity, self.shard, after, block_ms):
                        if idle_reads is not None or should_stop() or held.lost.is_set() or self._holds_due():
                            break
                    continue
            idle = 0
            if self._process(entries):
                self._settled()
                if claiming:
                    # Every claimed entry is settled or its key held: the next claim starts after them, and
                    # new entries are read only once no pending entry is left beyond (a short claim).
                    self.claim_from = _after(entries[-1].entry_id)
                    claiming = len(entries) >= READ_COUNT
            else:
                # The entry that must wait and everything after it stay pending (ours): claimed again first.
                claiming = True
                if not wait_on_retry:
                    return

    def _take_over(self) -> None:
        """What an earlier holder left: the consumer group, and the shard's backoff and retry count."""
        ctx = self.ctx
        ctx.reader.ensure_groups(self.entity)
        # Redis answers with seconds left on its own clock; this tenure counts them from a reading of its
        # clock taken after the answer came, so a wait can only come out longer, never shorter.
        backoff = ctx.retry.backoff_left(self.entity, self.shard)
        waits = ctx.retry.abandoned_waits_left(self.entity, self.shard) if self.abandoned_wait else {}
        now = ctx.clock()
        self.not_before = None if backoff is None else now + backoff
        self.attempts = ctx.retry.attempts(self.entity, self.shard)
        self._retry_state = self.not_before is not None or self.attempts > 0
        self.abandoned = {key: now + left for key, left in waits.items()}

    def _wait_for_turn(self, held: HeldLease, stop: threading.Event, wait_on_retry: bool) -> bool:
        """Wait out the shard's backoff and any doubt about the lease; False to stop now."""
        while True:
            if held.lost.is_set():
                raise LeaseLostError(f"shard {self.shard} of {self.entity}: lease not renewed")
            now = self.ctx.clock()
            if self.not_before is not None and self.not_before > now:
                if not wait_on_retry:
                    self.report.retry_after = self.not_before - now
                    return False
                if stop.wait(min(self.not_before - now, 1.0)):
                    return False
                continue
            if held.usable():
                return True
            # Renewals are failing (Redis unreachable): start no send that might outlive the lease.
            if stop.wait(0.1):
                return False

    def _settled(self) -> None:
        """A batch went through: a backoff or retry count left in Redis is over (fenced)."""
        if self._retry_state:
            self.ctx.retry.clear(self.entity, self.shard, fence=self.fence)
            self.attempts, self.not_before, self._retry_state = 0, None, False

    # ---- one batch ---------------------------------------------------------------------------------
    def _process(self, entries: Sequence[OutboxEntry]) -> bool:
        """Send and settle a batch in order; False when the shard must stop (a Retry, or a layout change
        that holds the rest back)."""
        entries, held_back = self._layout_gate(entries)
        if held_back:
            done = self._process_entries(entries) if entries else True
            # Retried soon, without counting a failure: the old layout's drainers are making progress.
            now = self.ctx.clock()
            self.not_before = max(self.not_before or now, now + LAYOUT_WAIT) if done else self.not_before
            self.report.retry_after = self.report.retry_after or LAYOUT_WAIT
            return False
        return self._process_entries(entries)

    def _layout_gate(self, entries: Sequence[OutboxEntry]) -> tuple[Sequence[OutboxEntry], bool]:
        """The entries that may go now: while the shard count changes (``bridge.core.layout``), a
        new-layout entry waits until the old layout is drained; True when some are held back."""
        store = LayoutStore(self.ctx.redis)
        layout = store.get(self.entity)
        if layout is None or not layout.migrating:
            return entries, False
        cut = next((i for i, e in enumerate(entries) if layout.must_wait(self.shard, e.entry_id)), None)
        if cut is None or store.finish_if_drained(self.entity, layout):
            return entries, False
        return entries[:cut], True

    def _process_entries(self, entries: Sequence[OutboxEntry]) -> bool:
        """Send and settle a batch in order; False when the shard must stop (a Retry)."""
        good: list[OutboxEntry] = []
        self.journal.clear()
        for entry in entries:
            if entry.envelope is None:
                if not self.ctx.reader.problem_room(self.entity, "quarantine"):
                    # Held (with everything after it) until there is room: never moved, never lost.
                    self._problem_stream_full(self._full("quarantine"))
                    return False
                reason = str(entry.error) if entry.error else "undecodable outbox entry"
                raw_id = entry.fields.get(b"id")
                message_id = raw_id.decode("utf-8", "replace") if raw_id is not None else None
                self._write_journal([journal_events.quarantined(message_id, self.ctx.clock(), reason=reason)])
                try:
                    self.ctx.reader.move(
                        entry,
                        to="quarantine",
                        code="corrupt_entry",
                        reason=reason,
                        now=self.ctx.clock(),
                        fence=self.fence,
                    )
                except ProblemStreamFullError as full:  # filled since the check (another shard): held
                    self._problem_stream_full(full)
                    return False
                self.report.quarantined += 1
                log.warning("entity %s: outbox entry %s quarantined: %s", self.entity, entry.entry_id, reason)
                transitions.quarantined(self.entity, "outbox", reason)
            else:
                good.append(entry)
        if not good:
            return True
        good = self._not_held(good)
        if not good:
            return True
        # Only what has TTL left is sent, with what is left of it (``bridge.delivery.expiry``).
        decisions = settle_unexpired(sender_for(self.mode), self, good, self.ctx.clock())
        return self._apply(good, decisions)

    def retry_context(self) -> RetryContext:
        """The clock, this tenure's retry count and the backoff (``bridge.delivery.modes.base.SendPort``)."""
        return self._retry_context()

    def _retry_context(self) -> RetryContext:
        # The retry count is this tenure's: read at take-over, counted by ``schedule`` (only we write it).
        return RetryContext(self.ctx.clock(), self.attempts, self.ctx.backoff, random.random)

    def send_messages(
        self,
        role: Role,
        path: str,
        messages: Sequence[OutgoingMessage],
        operation: Operation,
        *,
        keys: Sequence[str | None] | None = None,
    ) -> BatchOutcome:
        """One batched send to ``path`` in namespace ``role``: outcomes, cost and health recorded.

        Refused at once, with nothing recorded, while a send there that timed out may still be committed
        (``bridge.core.abandoned``); a send that times out starts such a wait, and one that carries the
        abandoned messages again may go and, once accepted, ends it.
        """
        key = (role, path)
        ids = [str(m.message_id) for m in messages]
        left = abandoned.wait_left(self.abandoned, role, path, self.ctx.clock())
        if left > 0 and not abandoned.resent(self.abandoned_ids.get(key), ids):
            return BatchOutcome([abandoned.refused(role, path, left)] * len(messages))
        started = time.perf_counter()
        result = self.ctx.pool.send(role, path, messages, keys=keys)
        elapsed = time.perf_counter() - started
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
        metrics.record_send(self.entity, role, operation is Operation.BACKLOG_SEND, outcome.outcomes, elapsed)
        backlog = path if operation is Operation.BACKLOG_SEND else None
        self.journal.record_send(
            role, [m.message_id for m in messages], outcome.outcomes, now, backlog_queue=backlog
        )
        self._record_health(role, outcome)
        if self.abandoned_wait:
            self._after_send(role, path, ids, outcome, now)
        return outcome

    def _after_send(self, role: Role, path: str, ids: list[str], outcome: BatchOutcome, now: float) -> None:
        """Start a wait after a timeout (``bridge.core.abandoned``), or end one the resent messages ended."""
        key = (role, path)
        lost_track = abandoned.timed_out(ids, outcome.outcomes)
        if lost_track:
            still = abandoned.wait_left(self.abandoned, role, path, now) > 0
            before = self.abandoned_ids.get(key, frozenset()) if still else frozenset()
            self.abandoned[key] = now + self.abandoned_wait
            self.abandoned_ids[key] = before | lost_track
            self.ctx.retry.wait_after_abandoned(self.entity, self.shard, role, path, wait=self.abandoned_wait)
            log.info(
                "entity %s shard %d: %d messages to %s on %s timed out; nothing newer goes there for %.1fs",
                self.entity,
                self.shard,
                len(lost_track),
                path,
                role,
                self.abandoned_wait,
            )
        elif key in self.abandoned_ids and abandoned.all_accepted(
            self.abandoned_ids[key], ids, outcome.outcomes
        ):
            del self.abandoned[key], self.abandoned_ids[key]
            self.ctx.retry.end_wait_after_abandoned(self.entity, self.shard, role, path)

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
                reason = "ok" if after.available else after.last_error or "?"
                transitions.availability_changed(self.entity, role, after.available, reason)

    # ---- carrying out the settle plan ------------------------------------------------------------
    def _apply(self, entries: Sequence[OutboxEntry], decisions: Sequence[Settlement]) -> bool:
        """Carry out the batch's settle plan (``bridge.core.settle``): the state changes, once each, then
        every entry's fate; False when a ``Retry`` stops the shard until its backoff.

        Each entry is settled on its own (an ``Ack`` after a ``Retry`` of another key is still an ack; a
        mode never sends past a ``Retry`` or ``Hold`` of the same key).
        """
        plan = plan_settlement(
            decisions,
            [self._key(e) for e in entries],
            held=self.holds.keys(),
            waits=self.abandoned,
            own_waits=self.abandoned_ids.keys(),
            entity=self.entity,
            now=self.ctx.clock(),
        )
        for alert in plan.alerts:
            log.error("entity %s: %s", self.entity, alert)
        self._apply_changes(plan.changes)
        if plan.behind:
            # Every entry accepted: journal and acknowledgement are written behind us (``settler``).
            batch, accepted = self.journal.take(), [e.entry_id for e in entries]
            self.settler.submit(lambda: self._settle_accepted(batch, accepted))
            return True
        self.settler.flush()
        full = self._settle_in_line(entries, plan)
        if plan.stop is not None:
            self._stop(plan.stop)
        if full is not None:
            self._problem_stream_full(full)
        return plan.stop is None and full is None

    def _settle_in_line(
        self, entries: Sequence[OutboxEntry], plan: SettlePlan
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
                self.journal.dead_lettered(_message_id(entry), plan.now, fate.reason)
        # Before any entry is acknowledged or moved: the journal then never lacks what the outbox lost.
        self.journal.take().write(self.ctx.journal, self.entity)
        full = self._full("deadletter") if kept else None
        for entry, fate in fates:
            if isinstance(fate, DeadLetterEntry):
                if entry.entry_id in kept:
                    continue
                try:
                    self._dead_letter(entry, fate, plan.now)
                except ProblemStreamFullError as exc:  # filled meanwhile by another shard: held as well
                    full = exc
            elif isinstance(fate, HoldKey):
                self._hold(fate)
            elif isinstance(fate, StayPending) and fate.delivered_to:
                self.ctx.retry.remember_delivered(self.entity, self.shard, entry.entry_id, fate.delivered_to)
        self._ack([entry.entry_id for entry, fate in fates if isinstance(fate, Acknowledge)])
        return full

    def _full(self, stream: str) -> ProblemStreamFullError:
        bound = self.ctx.settings.entity(self.entity).max_problem_entries
        return ProblemStreamFullError(self.entity, stream, bound, bound, retry_after=PROBLEM_FULL_WAIT)

    def _problem_stream_full(self, full: ProblemStreamFullError) -> None:
        """A problem entry found its stream full: it stays pending and the shard holds (loudly) until
        ``PROBLEM_FULL_WAIT`` has passed, then decides it again (docs/durability.md, "Bounded problem
        streams")."""
        now = self.ctx.clock()
        self.not_before = max(self.not_before or now, now + PROBLEM_FULL_WAIT)
        self.report.retry_after = max(self.report.retry_after or 0.0, PROBLEM_FULL_WAIT)
        self.report.notes.append(str(full))
        log.error("entity %s shard %d holds: %s", self.entity, self.shard, full)
        transitions.problem_stream_full(self.entity, full.stream)

    def _dead_letter(self, entry: OutboxEntry, fate: DeadLetterEntry, now: float) -> None:
        reason = fate.reason
        self.ctx.reader.move(entry, to="deadletter", code=fate.code, reason=reason, now=now, fence=self.fence)
        self.ctx.retry.forget_delivered(self.entity, self.shard, [entry.entry_id])
        self.report.dead_lettered += 1
        log.warning(
            "entity %s: message %s dead-lettered locally: %s", self.entity, _message_id(entry) or "?", reason
        )
        transitions.dead_lettered(self.entity, reason)

    def _stop(self, stop: Stop) -> None:
        """The shard waits until ``stop.until``; a backoff is counted and kept in Redis (fenced), a planned
        wait (a restore barrier) is this tenure's alone."""
        if stop.backoff:
            self.attempts = self.ctx.retry.back_off(
                self.entity, self.shard, stop.retry_after, fence=self.fence
            )
            self._retry_state = True
        self.not_before = stop.until
        self.report.retry_after = stop.retry_after
        log.info("entity %s shard %d waits %.2fs: %s", self.entity, self.shard, stop.retry_after, stop.reason)

    def _settle_accepted(self, batch: JournalBatch, entry_ids: list[str]) -> None:
        # Before the entries are acknowledged: the journal then never lacks what the outbox lost.
        batch.write(self.ctx.journal, self.entity)
        self._ack(entry_ids)

    # ---- keys that wait (Hold) -------------------------------------------------------------------
    def _key(self, entry: OutboxEntry) -> str:
        """The entry's order key (SessionId, PartitionKey, MessageId when deduplicating), else its own id."""
        key = partition_key(entry.envelope, self.dedup) if entry.envelope is not None else None
        return f"key:{key}" if key is not None else f"entry:{entry.entry_id}"

    def _hold(self, hold: HoldKey) -> None:
        self.holds[hold.key] = hold.until
        log.info(
            "entity %s shard %d holds a key for %.2fs: %s",
            self.entity,
            self.shard,
            hold.retry_after,
            hold.reason,
        )

    def _not_held(self, entries: list[OutboxEntry]) -> list[OutboxEntry]:
        """The entries whose key is not held; a held key's entries stay pending behind its first one."""
        if not self.holds:
            return entries
        return [e for e in entries if self._key(e) not in self.holds]

    def _holds_due(self) -> bool:
        """Some held key may be tried again: its entries are claimed again (in order) and re-decided."""
        return bool(self.holds) and min(self.holds.values()) <= self.ctx.clock()

    def _release_due_holds(self) -> None:
        """Forget the holds that are due; their keys' entries, anywhere in the pending list, are claimed
        again from the start."""
        now = self.ctx.clock()
        kept = {key: at for key, at in self.holds.items() if at > now}
        if len(kept) < len(self.holds):
            self.claim_from = "0-0"
        self.holds = kept

    def _ack(self, entry_ids: list[str]) -> None:
        if entry_ids:
            self.ctx.reader.ack(self.entity, self.shard, entry_ids, fence=self.fence)
            metrics.record_delivered(self.entity, entry_ids, time.time())
            if self.mode == "active":
                self.ctx.retry.forget_delivered(self.entity, self.shard, entry_ids)
            self.report.sent += len(entry_ids)

    def _write_journal(self, events: list[JournalEvent]) -> None:
        if self.ctx.journal is not None and events:
            self.ctx.journal.append(self.entity, events)

    def _apply_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if isinstance(change, Swap):
                applied, state = self.ctx.roles.swap(self.entity, change)
                if applied:
                    self._write_journal(
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
                self._write_journal(paired_events(change, update, self.ctx.clock()))
