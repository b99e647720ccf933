"""Replication mode ``paired``: the primary, or — failover engaged — an aliased send to a backlog queue in
the secondary; the ping and the syphon bring the messages back (``bridge.paired``, docs/paired.md).

Every decision is the core's: ``bridge.core.paired`` keeps the FailoverInterval timer and the rotation,
``bridge.core.paired_plan`` decides the batch (where each entry goes, which keys wait and why, which restore
barriers to send) and settles it from the outcomes. This module gathers the view the plan needs, carries the
plan out (ledger intent, barriers, sends) and remembers this worker's current backlog queue. Every state
change the core decides rides on the settlements and is applied once by the drainer.

Order per key (``paired.restore_order``):

- ``"ordered"`` (default). While failed over, every key of the shard sticks to one backlog queue
  (``bridge.state.backlog``: chosen by rendezvous hashing over the queues in rotation, recorded before the
  first send there), so its messages are in one FIFO queue that one syphon moves in order. A key whose
  queue left the rotation is *held* (its later entries wait behind it; other keys go on) until the queue is
  readmitted or the failover ends. When the entity is available again, the shard first sends a restore
  barrier to every backlog queue it used and sends nothing to the primary until the syphon has passed them
  all — the outbox is durable, so new messages simply wait. Cost: after a restore, new messages wait for
  the backlog to be syphoned (``python -m bench.syphon`` measures it), and a backlog queue that stays
  down keeps its keys (and, after the restore, its shard) waiting until it is back. Messages without a
  key have no order to keep: they go to this worker's current queue, and to another one at once when it
  fails.
- ``"fast"``: the .NET behaviour. Each worker process sends to one randomly chosen queue while it works;
  after a successful ping every worker sends to the primary at once. New messages may reach the primary
  before older ones still in the backlog, and one key's messages may be spread over several queues that
  are syphoned in parallel.

In both, a message that cannot be aliased (too large once aliased, or it already carries an ``x-ms-*``
property) waits in the outbox for the primary, where it fits; it holds back only the later messages of
its own key, which are not sent past it. Nothing is re-sent while it waits: a held key costs no operation.
A message a backlog queue refuses for good waits the same way; the backlog sends carry the entries' keys,
so the later messages of its key in that send are not sent past it either.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bridge.core.barriers import OPEN, WAITING_PREFIX, next_barrier_token, read_barrier
from bridge.core.cost import Operation
from bridge.core.decisions import Settlement
from bridge.core.moved_keys import NO_MOVED_KEYS, MovedKeys, moved_keys, retired_ledgers
from bridge.core.outcomes import Outcome
from bridge.core.paired import backlog_queue_path, route
from bridge.core.paired_plan import (
    BacklogView,
    BatchEntry,
    PairedPlan,
    PairedView,
    plan_batch,
)
from bridge.core.paired_settle import CurrentBacklog, settle_batch
from bridge.core.partitioning import partition_key
from bridge.core.validation import DEFAULT_MAX_MESSAGE_SIZE
from bridge.delivery.modes.base import SendPort, send_entries
from bridge.delivery.shard_sending import BatchSend
from bridge.errors import ConfigurationError, InvariantError
from bridge.outbox.layout import LayoutStore
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import BacklogMessage, barrier_message, to_backlog_message
from bridge.state.backlog import BacklogLedger, ShardBacklog

log = logging.getLogger(__name__)

BACKLOG_MAX_MESSAGE_SIZE = DEFAULT_MAX_MESSAGE_SIZE
"""Backlog queues are created without a size of their own, so sends to them keep to the Standard limit."""


@dataclass(frozen=True)
class _Batch:
    """The plan's inputs for one batch, and the aliased messages for the backlog (None: not aliased)."""

    view: PairedView
    entries: tuple[BatchEntry, ...]
    aliased: tuple[BacklogMessage | None, ...] = ()


class PairedSender:
    """Mode ``paired``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """The primary while it is not failed over (after the restore barriers, in ordered mode), else the
        backlog; every entry settled, per key (``bridge.core.paired_plan``)."""
        batch = _gather(port, entries)
        plan = plan_batch(batch.entries, batch.view)
        ledger = BacklogLedger(port.ctx.redis)
        _record_intent(port, ledger, plan)
        _send_barriers(port, ledger, batch.view, plan)
        outcomes = _send(port, entries, batch, plan)
        settled = settle_batch(plan, batch.view, outcomes)
        if plan.route == "backlog":
            _remember_current(port.ctx.current_backlog, batch.view.namespace, settled.current)
        return list(settled.settlements)


def _gather(port: SendPort, entries: Sequence[OutboxEntry]) -> _Batch:
    """The view of the entity and the batch: the backlog side only when the batch goes there."""
    ctx, settings = port.ctx, port.ctx.settings
    if settings.primary is None:
        raise ConfigurationError("paired mode needs a primary namespace")
    options = settings.paired
    ordered = options.restore_order == "ordered"
    view = PairedView(
        state=ctx.paired.get(port.entity),
        policy=options.failover_policy(),
        retry=port.retry_context(),
        namespace=settings.primary.namespace_name,
        ordered=ordered,
        readmit_after=options.backlog_readmit_after,
        syphon_retry_interval=options.syphon_retry_interval,
        barrier_timeout=options.barrier_timeout,
    )
    dedup = settings.entity(port.entity).requires_duplicate_detection
    envelopes = []
    for entry in entries:
        if entry.envelope is None:
            raise InvariantError("an undecodable entry reached the paired sender (quarantined before)")
        envelopes.append(entry.envelope)
    keys = [partition_key(envelope, dedup) for envelope in envelopes]
    where, _ = route(view.state, view.retry.now, view.policy)  # what to read depends on where it goes
    named = [key for key in keys if key is not None]
    sticky: dict[str, int] = {}
    if ordered:
        ledger = BacklogLedger(ctx.redis)
        mine = ledger.read(port.entity, port.shard, named)
        sticky = mine.sticky
        moved, retired = _elsewhere(ledger, port, named, mine, where == "primary")
        view = replace(view, moved=moved)
        if where == "primary":
            view = replace(view, ledger=mine.ledger, retired=retired)
    if where == "primary":
        return _Batch(view, tuple(BatchEntry(key) for key in keys))
    rotation = ctx.paired.rotation(view.namespace, options.backlog_queue_count)
    # Queues that left because the secondary's address refused connections are back once it accepts.
    accepting = rotation.refused_out(view.retry.now, view.readmit_after) and ctx.pool.connect_probe.accepting(
        "secondary"
    )
    backlog = BacklogView(rotation, ctx.current_backlog.get(view.namespace), sticky, accepting)
    decisions = [
        to_backlog_message(envelope, port.entity, max_message_size=BACKLOG_MAX_MESSAGE_SIZE)
        for envelope in envelopes
    ]
    aliased = tuple(d if isinstance(d, BacklogMessage) else None for d in decisions)
    planned = tuple(
        BatchEntry(key, None if isinstance(d, BacklogMessage) else d.reason)
        for key, d in zip(keys, decisions, strict=True)
    )
    return _Batch(replace(view, backlog=backlog), planned, aliased)


def _elsewhere(
    ledger: BacklogLedger, port: SendPort, named: Sequence[str], mine: ShardBacklog, primary: bool
) -> tuple[MovedKeys, dict[int, Mapping[int, str]]]:
    """The batch's keys that other shards' key maps name, and (bound for the primary) the retired ledgers
    this shard looks after (``bridge.core.moved_keys``): read only while another shard has a key map, so
    in the steady state it costs nothing."""
    if not mine.others:
        return NO_MOVED_KEYS, {}
    others = [key for key in named if key not in mine.sticky]
    maps, ledgers = ledger.elsewhere(port.entity, mine.others, others)
    moved = moved_keys(port.shard, others, mine.sticky, maps, ledgers)
    if not primary:
        return moved, {}
    layout = LayoutStore(port.ctx.redis).get(port.entity)
    shards = None if layout is None or layout.migrating else layout.shards
    return moved, retired_ledgers(port.shard, shards, ledgers)


def _record_intent(port: SendPort, ledger: BacklogLedger, plan: PairedPlan) -> None:
    """Intent first: the ledger before the key map, both before the send (``bridge.state.backlog``); a
    moved key leaves its old shard's map only once this shard's names it."""
    if plan.open:
        ledger.open(port.entity, port.shard, plan.open)
        ledger.assign(port.entity, port.shard, plan.assign)
    if plan.forget:
        ledger.forget(port.entity, plan.forget)


def _send_barriers(port: SendPort, ledger: BacklogLedger, view: PairedView, plan: PairedPlan) -> None:
    """Send a new restore barrier for each of the plan's ``barriers`` (and its retired shards'): recorded
    as waiting first, confirmed once sent. A barrier not passed within ``barrier_timeout`` is replaced
    (``bridge.core.barriers``)."""
    due = [(port.shard, i, OPEN if i in plan.open else view.ledger.get(i, OPEN)) for i in plan.barriers]
    for shard, indexes in plan.retired_barriers.items():
        due += [(shard, i, view.retired[shard].get(i, OPEN)) for i in indexes]
    by_queue: dict[int, list[tuple[int, str]]] = {}
    for shard, index, status in due:
        token = _barrier_token(port.entity, shard, index, status, view)
        ledger.set_barrier(port.entity, shard, index, f"{WAITING_PREFIX}{token}")
        by_queue.setdefault(index, []).append((shard, token))
    # Each queue's barriers in a send (and a link) of its own, all at once: after a restore every link
    # opens afresh.
    queues = sorted(by_queue)
    sends = [
        BatchSend(
            "secondary",
            backlog_queue_path(view.namespace, index),
            [barrier_message(port.entity, shard, token) for shard, token in by_queue[index]],
            Operation.BARRIER,
        )
        for index in queues
    ]
    results = port.send_each(sends) if sends else []
    for index, result in zip(queues, results, strict=True):
        for (shard, token), outcome in zip(by_queue[index], result.outcomes, strict=False):
            if outcome.ok:
                ledger.confirm_barrier(port.entity, shard, index, token)


def _barrier_token(entity: str, shard: int, index: int, status: str, view: PairedView) -> str:
    """The token of the barrier to send for a ledger field ``status`` (a lost one logged at WARNING)."""
    now, timeout = view.retry.now, view.barrier_timeout
    current = read_barrier(status, now, timeout)
    if current.overdue:
        log.warning(
            "restore barrier of %s shard %d in backlog queue %d not passed for %s s (lost): sending "
            "another (resend %d)",
            entity,
            shard,
            index,
            "?" if current.sent_at is None else f"{now - current.sent_at:.0f}",
            current.resends + 1,
        )
    return next_barrier_token(status, uuid.uuid4().hex[:12], now, timeout)


def _send(
    port: SendPort, entries: Sequence[OutboxEntry], batch: _Batch, plan: PairedPlan
) -> dict[int, Outcome]:
    """The plan's sends, in its order; the outcome of every entry sent, by batch position."""
    outcomes: dict[int, Outcome] = {}
    if plan.to_primary:
        chosen = [entries[position] for position in plan.to_primary]
        result = send_entries(port, "primary", chosen, Operation.PRIMARY_SEND)
        outcomes.update(zip(plan.to_primary, result.outcomes, strict=True))
    # One send per backlog queue, all at once: each queue is a link of its own and holds its own keys, so
    # nothing orders one queue's send after another's. A message a queue refuses for good waits for the
    # primary: its key's later ones in that send are not sent (``keys``).
    backlog = [
        BatchSend(
            "secondary",
            send.path,
            [_aliased(batch, position).message for position in send.members],
            Operation.BACKLOG_SEND,
            keys=[plan.keys[position] for position in send.members],
        )
        for send in plan.to_backlog
    ]
    results = port.send_each(backlog) if backlog else []
    for send, result in zip(plan.to_backlog, results, strict=True):
        outcomes.update(zip(send.members, result.outcomes, strict=True))
    return outcomes


def _aliased(batch: _Batch, position: int) -> BacklogMessage:
    message = batch.aliased[position] if position < len(batch.aliased) else None
    if message is None:
        raise InvariantError(f"entry {position} was planned for a backlog queue but not aliased")
    return message


def _remember_current(current: dict[str, int], namespace: str, updates: Sequence[CurrentBacklog]) -> None:
    """This worker's current backlog queue per namespace, after the sends (shared by the process)."""
    for update in updates:
        if update.adopt:
            current[namespace] = update.index
        elif current.get(namespace) == update.index:
            current.pop(namespace, None)
