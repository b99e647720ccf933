"""Draining one outbox shard: read a batch, send it, let the replication core decide, apply the decision.

One drainer at a time per shard (a lease in Redis), so the order of a SessionId/PartitionKey is kept: a
batch is processed in order and the first entry that must wait (``Retry``) stops the shard until its
backoff has passed; everything after it stays in the outbox. Entries are acknowledged only after a
namespace accepted them. A drainer that dies leaves its entries pending in the consumer group; the next
lease holder claims every pending entry of the shard (``XAUTOCLAIM`` from 0) before reading new ones, so a
crash between read and ack costs a duplicate (same MessageId), never a loss.

Keys on hold (``Hold``: their entries stay pending) never make another key's newer entries pass its older
ones: the drainer reads new entries only once it has claimed the whole pending list, ``read_count`` at a
time, so an older pending entry of a key that is not held (one whose batch was retried) is always sent
before that key's newer entries. A claim starts after the entries an earlier claim of the tenure found
settled or held (``claim_from``), so a long run of held entries is not claimed again on every pass; when a
hold ends, the next claim starts at the first pending entry of its key.

A tenure is served in *turns* (``turn``): claim and read until the shard is empty, must wait (a backoff, a
hold, doubt about the lease) or the turn's budget is spent, then say why it ended (``TurnEnd``) and give
the thread back. The state between turns stays in the drainer (``bridge.delivery.tenure``), so a turn
continues exactly where the last one stopped. ``bridge.delivery.shard_pool`` serves many owned shards
with a few threads this way; ``run`` is the bounded drain task that the sweeper queues for a shard nobody
holds (the safety net), turns in a loop on one thread. Both read, claim, acknowledge, move and back off
through scripts fenced with the tenure's lease token, and a ``LeaseKeeper`` renews the lease during long
sends; a tenure whose lease passed to another drainer stops at its next write (``LeaseLostError``) and
changes nothing: the new holder claims and resends what was pending.

The drainer's state is one ``bridge.delivery.tenure.TenureState`` of small dataclasses (the tenure, its
backoff, holds, abandoned paths, read position and batch in flight); sending
(``shard_sending``) and settling (``shard_settling``) are collaborators it hands that state; the replication
mode decides each batch from a plan in the core (``bridge.delivery.modes``); this module reads, claims,
carries out one plan per batch and ends turns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.core.backoff import resume_at
from bridge.core.layout import Layout
from bridge.core.roles import RoleState
from bridge.core.seen_back import SeenBack, backoff_awaits
from bridge.delivery.context import DeliveryContext
from bridge.delivery.expiry import settle_unexpired
from bridge.delivery.lease_keeper import HeldLease, LeaseKeeper
from bridge.delivery.modes import sender_for
from bridge.delivery.read_ahead import Ahead, ReadAhead
from bridge.delivery.settler import Settler
from bridge.delivery.shard_sending import ShardSending
from bridge.delivery.shard_settling import ShardSettling
from bridge.delivery.tenure import (
    LAYOUT_WAIT,
    PROBLEM_FULL_WAIT,
    READ_COUNT,
    DrainReport,
    SendTally,
    SettleTally,
    TenureState,
    read_count,
)
from bridge.errors import LeaseLostError, StateStoreUnavailableError
from bridge.outbox import keys as outbox_keys
from bridge.outbox.layout import LayoutStore
from bridge.outbox.reader import OutboxEntry, entry_size
from bridge.state import keys as state_keys

__all__ = ["LAYOUT_WAIT", "PROBLEM_FULL_WAIT", "READ_COUNT", "DrainReport", "ShardDrainer", "TurnEnd"]

log = logging.getLogger(__name__)

DOUBT_WAIT = 0.1
"""Seconds before a shard whose lease renewals are failing is looked at again (no send starts meanwhile)."""


@dataclass(frozen=True)
class TurnEnd:
    """Why a turn ended: the shard is empty (``after``: wait for an entry after this id), or it is to be
    served again in ``wait`` seconds (a backoff, a hold coming due, doubt about the lease; 0: a spent
    budget). Seconds, not a time: the drainer's clock (``DeliveryContext.clock``) is not the pool's."""

    after: str | None
    wait: float | None
    backoff: bool = False
    """The shard waits for a backoff or a planned wait (``not_before``), not just for its turn."""


def _after(entry_id: str) -> str:
    """The smallest stream entry id after ``entry_id`` (where a claim past it starts)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq) + 1}"


class ShardDrainer:
    """Drains one shard of one entity while it holds the shard's lease (one tenure, one token).

    Its state is one ``TenureState``; sending and settling are collaborators handed that state
    (``ShardSending``, ``ShardSettling``), with the settler and the read ahead they share.
    """

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
        self.state = TenureState.begin(ctx, entity, shard, consumer=consumer, token=token)
        self.settler = Settler()
        """Writes the journal, acknowledgements and health records of fully accepted batches, and the
        turn's send counters, behind the drainer (``bridge.delivery.settler``)."""
        self.read_ahead = ReadAhead()
        """The next batch's read, run while this one is sent (``bridge.delivery.read_ahead``)."""
        self.sending = ShardSending(ctx, self.state, self._fold_send)
        self.settling = ShardSettling(ctx, self.state, self.sending, self.settler, self._fold_settle)

    def _fold_send(self, tally: SendTally) -> None:
        """Fold what a send handed over (``ShardSending``) into the batch and the report: the drainer is
        the one owner of the state, its collaborators return what a step added."""
        if tally.operation is not None and tally.accepted:
            self.state.batch.cost = self.state.batch.cost.add(tally.operation, tally.accepted)
        self.state.report.packed_ahead += tally.packed_ahead

    def _fold_settle(self, tally: SettleTally) -> None:
        """Fold what a settlement step handed over (``ShardSettling``) into the report and the batch; for
        the entries acknowledged behind the drainer, on the settler's thread."""
        report = self.state.report
        report.sent += tally.sent
        report.dead_lettered += tally.dead_lettered
        report.quarantined += tally.quarantined
        if tally.retry_after is not None:
            report.retry_after = tally.retry_after
        if tally.wait_at_least is not None:
            report.retry_after = max(report.retry_after or 0.0, tally.wait_at_least)
        report.notes.extend(tally.notes)
        if tally.seen_epoch:
            self.state.batch.seen_epoch = max(self.state.batch.seen_epoch, tally.seen_epoch)

    @property
    def entity(self) -> str:
        """The tenure's entity."""
        return self.state.tenure.entity

    @property
    def shard(self) -> int:
        """The tenure's shard."""
        return self.state.tenure.shard

    @property
    def token(self) -> str:
        """This tenure's lease token."""
        return self.state.tenure.token

    @property
    def report(self) -> DrainReport:
        """What this tenure did so far."""
        return self.state.report

    def run(self, budget: float = 20.0, idle_reads: int = 2, block_ms: int = 200) -> DrainReport:
        """Take the lease, drain until the shard is empty, must wait, or ``budget`` seconds passed, and give
        the lease back (the sweeper's drain task: the safety net behind ``DrainService``)."""
        keeper = LeaseKeeper(self.ctx.leases, self.state.tenure.lease_ttl)
        held = keeper.acquire(self.entity, self.shard, self.state.tenure.token)
        if held is None:
            self.state.report.busy = True
            return self.state.report
        stop = threading.Event()
        keeper.keep_alive(stop)
        deadline = self.ctx.clock() + budget
        try:
            idle = 0
            while self.ctx.clock() < deadline:
                end = self.turn(held, stop, deadline - self.ctx.clock())
                if end.backoff:
                    self.state.report.retry_after = end.wait
                    break
                if end.after is None:
                    stop.wait(max(0.0, min(end.wait or 0.0, deadline - self.ctx.clock())))
                    continue
                idle += 1
                if idle >= idle_reads:
                    break
                self.ctx.reader.wait_for_new(self.entity, self.shard, end.after, block_ms)
        except LeaseLostError:
            self.state.report.notes.append("lease lost")
        finally:
            stop.set()
            self._hand_over_holds()
            self.let_go(keeper, held)
        return self.state.report

    def _hand_over_holds(self) -> None:
        """A bounded drain that ends with held keys leaves the earliest of their times for the next one, so
        the sweeper does not restart it at once just to hold them again."""
        if self.state.holds.until and self.state.report.retry_after is None:
            delay = max(0.0, min(self.state.holds.until.values()) - self.ctx.clock())
            try:
                self.ctx.retry.hold_off(self.entity, self.shard, delay)
            except StateStoreUnavailableError as exc:
                log.info("entity %s shard %d: hold time not recorded: %s", self.entity, self.shard, exc)

    def let_go(self, keeper: LeaseKeeper, held: HeldLease) -> None:
        """Wait for the bookkeeping still on its way, then release the lease and delete this process's
        consumer if it has nothing pending (best effort: an unreleased lease expires, an idle consumer is
        pruned by the next holder; an entry whose acknowledgement failed stays pending and the next
        holder sends it again)."""
        try:
            self.settler.close()
        except Exception as exc:  # a lost lease or Redis failing: the next holder claims what is pending
            log.warning("entity %s shard %d: bookkeeping not finished: %s", self.entity, self.shard, exc)
        try:
            keeper.release(held)
            # A tenure that never read has no consumer in the group to retire (maybe no group at all).
            if self.state.reading.taken_over:
                self.ctx.reader.retire_consumer(self.entity, self.shard, self.state.tenure.consumer)
        except StateStoreUnavailableError as exc:
            log.warning("entity %s shard %d: not released cleanly: %s", self.entity, self.shard, exc)

    # ---- one turn ----------------------------------------------------------------------------------
    def turn(self, held: HeldLease, stop: threading.Event, budget: float) -> TurnEnd:
        """Claim what is pending (a crashed or superseded holder's entries first, in order), then read new
        entries, for up to ``budget`` seconds; the first turn of a tenure takes the shard over.

        ``LeaseLostError`` when the lease passed to another drainer; the caller releases the lease.
        """
        if not self.state.reading.taken_over:
            self._take_over()
            self.state.reading.taken_over = True
        try:
            end = self._turn(held, stop, self.ctx.clock() + budget)
        except BaseException as exc:
            if isinstance(exc, StateStoreUnavailableError):
                self._claim_all_again()
            self.read_ahead.close(quiet=True)
            self.settler.close(quiet=True)
            raise
        try:
            self.read_ahead.close()
            # The turn's bookkeeping finishes behind it (``bridge.delivery.settler``); a failure of it
            # ends this turn, or the next one, with the error.
            cost = self.state.batch.take_cost()
            if cost.total:
                self.settler.submit(lambda: self.settling.count(cost))
            else:
                self.settler.check()
        except BaseException:
            self.settler.close(quiet=True)
            raise
        return end

    def _turn(self, held: HeldLease, stop: threading.Event, deadline: float) -> TurnEnd:
        reader = self.ctx.reader
        while True:
            self.settler.check()
            if held.lost.is_set():
                raise LeaseLostError(f"shard {self.shard} of {self.entity}: lease not renewed")
            now = self.ctx.clock()
            if self.state.backoff.not_before is not None and self.state.backoff.not_before > now:
                return TurnEnd(None, self.state.backoff.not_before - now, backoff=True)
            if stop.is_set() or now >= deadline:
                return TurnEnd(None, 0.0)
            if not held.usable():
                # Renewals are failing (Redis unreachable): start no send that might outlive the lease.
                self._claim_all_again()
                return TurnEnd(None, DOUBT_WAIT)
            if self.settling.holds_due():
                self.state.reading.claiming = True
            self._reclaim_if_due(now)
            ahead: Ahead | None = None
            if self.state.reading.claiming:
                self.settling.release_due_holds()
                self.read_ahead.drop()  # its entries are pending: this claim takes them (``read_ahead``)
                self.settler.flush()  # acknowledgements on their way would be claimed and sent again
                self.state.reading.claim_asked = read_count(self.state.reading.entry_bytes)
                entries = reader.claim_fenced(
                    self.entity,
                    self.shard,
                    self.state.tenure.consumer,
                    self.state.tenure.fence,
                    count=self.state.reading.claim_asked,
                    prune=self.state.reading.prune,
                    start=self.state.reading.claim_from,
                )
                self.state.reading.prune = False
                self._sized(entries)
                if not entries:
                    # The whole pending list was claimed: read what is new.
                    self.state.reading.claiming = False
                    continue
            else:
                ahead = self.read_ahead.take()
                if ahead is None or not ahead.read.entries:  # none, or it found the shard empty: look again
                    ahead = self._read_next()
                read = ahead.read
                entries = read.entries
                if not entries:
                    # Empty: wait for a write, or until the earliest held key may be tried again, or the
                    # pending list is read again.
                    due = min([*self.state.holds.until.values(), self.state.reading.reclaim_at])
                    return TurnEnd(read.last_delivered or "0-0", max(0.0, due - now))
            self._serve_batch(entries, ahead)

    def _claim_all_again(self) -> None:
        """After Redis failed under a turn, the next read claims the whole pending list from ``0-0`` before
        any new entry: a read whose reply the failure lost (a failover's promoted replica has the entries
        pending under this consumer, the drainer never got them) would otherwise be skipped by every read
        of new entries and sent only at the next ``reclaim_interval``, after newer entries of its keys."""
        self.state.reading.claiming, self.state.reading.claim_from = True, "0-0"

    def _reclaim_if_due(self, now: float) -> None:
        """Every ``workers.reclaim_interval``, claim the whole pending list again from ``0-0``: an
        acknowledgement a Redis failover lost (the promoted replica never received it) leaves an entry
        pending under this consumer, which keeps its lease and would otherwise never look at it again."""
        if now < self.state.reading.reclaim_at:
            return
        self.state.reading.reclaim_at = now + self.state.tenure.reclaim_interval
        if not self.state.reading.claiming:
            self.state.reading.claiming, self.state.reading.claim_from = True, "0-0"

    def _read_next(self) -> Ahead:
        """The next batch's read, with the entity's layout and roles read after the entries in the same
        script (in line, or run ahead: ``bridge.delivery.read_ahead``), and in active mode where each entry
        was already accepted (``ShardSending.delivered``)."""
        read = self.ctx.reader.read_fenced(
            self.entity,
            self.shard,
            self.state.tenure.consumer,
            self.state.tenure.fence,
            read_count(self.state.reading.entry_bytes),
            hashes=(outbox_keys.layout(self.entity), state_keys.role(self.entity)),
            per_entry=state_keys.delivered(self.entity, self.shard)
            if self.state.tenure.mode == "active"
            else None,
        )
        roles_at = self.ctx.monotonic()  # the reply's time, before the packing below
        if not read.entries:
            return Ahead(read, None)
        self._sized(read.entries)
        layout, roles = read.hashes
        packed = self.sending.pack_ahead(read.entries) if self.state.tenure.mode == "active" else None
        return Ahead(read, Layout.from_fields(layout), RoleState.from_fields(roles), roles_at, packed)

    def _serve_batch(self, entries: Sequence[OutboxEntry], ahead: Ahead | None = None) -> None:
        claimed = self.state.reading.claiming
        if not claimed:
            # While this batch is sent, the next one is read; used only if this one leaves nothing pending.
            self.read_ahead.start(self._read_next)
        if self._process(entries, ahead):
            self._settled()
            if claimed:
                # Every claimed entry is settled or its key held: the next claim starts after them, and new
                # entries are read only once no pending entry is left beyond (a short claim).
                self.state.reading.claim_from = _after(entries[-1].entry_id)
                self.state.reading.claiming = len(entries) >= self.state.reading.claim_asked
        else:
            # The entry that must wait and everything after it stay pending (ours): claimed again first.
            self.state.reading.claiming = True

    def _sized(self, entries: Sequence[OutboxEntry]) -> None:
        """Remember the entries' mean size: the next read's count follows it (``read_count``)."""
        if entries:
            self.state.reading.entry_bytes = sum(entry_size(e.fields) for e in entries) / len(entries)

    def _take_over(self) -> None:
        """What an earlier holder left: the consumer group, and the shard's backoff and retry count."""
        ctx = self.ctx
        ctx.reader.ensure_groups(self.entity)
        # Redis answers with seconds left on its own clock; this tenure counts them from a reading of its
        # clock taken after the answer came, so a wait can only come out longer, never shorter.
        backoff = ctx.retry.backoff_left(self.entity, self.shard)
        waits = (
            ctx.retry.abandoned_waits_left(self.entity, self.shard)
            if self.state.tenure.abandoned_wait
            else {}
        )
        now = ctx.clock()
        wait = self.state.backoff
        wait.not_before = None if backoff is None else now + backoff
        wait.attempts = ctx.retry.attempts(self.entity, self.shard)
        wait.retry_state = wait.not_before is not None or wait.attempts > 0
        self.state.abandoned.until = {key: now + left for key, left in waits.items()}
        # An earlier tenure's backoff ends early like our own, never before its abandoned sends' waits.
        wait.wake_floor = None if backoff is None else max([now, *self.state.abandoned.until.values()])
        wait.wake_awaits = backoff_awaits(self.state.tenure.mode)  # what its batch lacked is not known

    def _settled(self) -> None:
        """A batch went through: a backoff or retry count left in Redis is over (fenced). (A namespace that
        was down is announced back by the send's health record, ``ShardSending.record_due_health``: a shard
        that waited out a throttled namespace's backoff wakes nobody.)"""
        wait = self.state.backoff
        if wait.retry_state:
            self.ctx.retry.clear(self.entity, self.shard, fence=self.state.tenure.fence)
            wait.attempts, wait.not_before, wait.retry_state, wait.wake_floor = 0, None, False, None

    def wake(self, news: SeenBack) -> float | None:
        """Namespaces were seen back (``news``; ``bridge.core.seen_back``): end this tenure's backoff early
        (``bridge.core.backoff.resume_at``) when the news names a namespace it waits for
        (``ShardBackoff.wake_awaits``), and let the held keys that wait for what the news names be decided
        again now (a key still blocked is held again); the other held keys keep their time. Seconds still
        to wait (0: none), or None when the shard waits for neither. Called between turns only (the pool's
        lock keeps it off a running turn)."""
        now = float(self.ctx.clock())
        ends = [
            key
            for key in self.state.holds.until
            if news.ends_hold(self.entity, self.state.holds.held_from[key].awaits)
        ]
        for key in ends:
            self.state.holds.until[key] = min(self.state.holds.until[key], now)
        held = bool(ends)
        wait = self.state.backoff
        backoff = wait.wake_floor is not None and wait.not_before is not None
        if not backoff or not news.ends_backoff(wait.wake_awaits):
            return 0.0 if held and (wait.not_before is None or wait.not_before <= now) else None
        wait.not_before = resume_at(wait.not_before, wait.wake_floor, now)
        if wait.not_before is None:
            wait.wake_floor = None
            return 0.0
        return max(0.0, wait.not_before - now)

    # ---- one batch ---------------------------------------------------------------------------------
    def _process(self, entries: Sequence[OutboxEntry], ahead: Ahead | None = None) -> bool:
        """Send and settle a batch in order; False when the shard must stop (a Retry, or a layout change
        that holds the rest back). ``ahead``: the read the entries came from, with its layout and roles."""
        roles = ahead.roles if ahead is not None else None
        self.state.batch.roles = None if ahead is None or roles is None else (roles, ahead.at)
        self.state.batch.delivered = None if ahead is None else ahead.read.per_entry
        self.state.batch.packed = None if ahead is None else ahead.packed
        entries, held_back = self._layout_gate(entries, ahead)
        if held_back:
            done = self._process_entries(entries) if entries else True
            # Retried soon, without counting a failure: the old layout's drainers are making progress.
            now = self.ctx.clock()
            wait = self.state.backoff
            wait.not_before = max(wait.not_before or now, now + LAYOUT_WAIT) if done else wait.not_before
            wait.wake_floor = None if done else wait.wake_floor
            self.state.report.retry_after = self.state.report.retry_after or LAYOUT_WAIT
            return False
        return self._process_entries(entries)

    def _layout_gate(
        self, entries: Sequence[OutboxEntry], ahead: Ahead | None
    ) -> tuple[Sequence[OutboxEntry], bool]:
        """The entries that may go now: while the shard count changes (``bridge.core.layout``), a
        new-layout entry waits until the old layout is drained; True when some are held back. The layout
        is read after the entries (with them when they were read ahead)."""
        store = LayoutStore(self.ctx.redis)
        layout = ahead.layout if ahead is not None else store.get(self.entity)
        if layout is None or not layout.migrating:
            return entries, False
        cut = next((i for i, e in enumerate(entries) if layout.must_wait(self.shard, e.entry_id)), None)
        if cut is None or store.finish_if_drained(self.entity, layout):
            return entries, False
        return entries[:cut], True

    def _process_entries(self, entries: Sequence[OutboxEntry]) -> bool:
        """Send and settle a batch in order; False when the shard must stop (a Retry)."""
        good: list[OutboxEntry] = []
        self.state.batch.journal.clear()
        self.state.batch.health_due.clear()
        for entry in entries:
            if entry.envelope is not None:
                good.append(entry)
            elif not self.settling.quarantine(entry):
                return False  # held, with everything after it, until the quarantine has room
        if not good:
            return True
        good = self.settling.not_held(good)
        if not good:
            return True
        # Only what has TTL left is sent, with what is left of it (``bridge.delivery.expiry``).
        decisions = settle_unexpired(sender_for(self.state.tenure.mode), self.sending, good, self.ctx.clock())
        return self.settling.apply(good, decisions)
