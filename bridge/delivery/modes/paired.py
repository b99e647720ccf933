"""Replication mode ``paired`` (SPEC §4): the primary, or — failover engaged — an aliased send to a backlog
queue in the secondary; the ping and the syphon bring the messages back (``bridge.paired``).

The shared state machine is ``bridge.core.paired``: the FailoverInterval timer, engagement, rotation
removals. Every change it decides rides on the settlements and is applied once by the drainer.

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
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from azure.servicebus import ServiceBusMessage

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, Ack, Change, DeadLetter, Hold, Retry, Settlement, backlog_target
from bridge.core.error_classes import ErrorClass
from bridge.core.paired import (
    BacklogRotation,
    FailoverPolicy,
    PairedState,
    RecordError,
    apply_changes,
    backlog_queue_path,
    choose_backlog,
    on_backlog_failure,
    on_primary_failure,
    on_primary_success,
    rendezvous_backlog,
    route,
    seconds_until_failover,
)
from bridge.core.partitioning import partition_key
from bridge.core.replication import RetryContext
from bridge.core.validation import DEFAULT_MAX_MESSAGE_SIZE
from bridge.delivery.modes.base import SendPort, send_entries
from bridge.errors import ConfigurationError, InvariantError
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import BacklogMessage, barrier_message, to_backlog_message
from bridge.state.backlog import OPEN, BacklogLedger

REROUTE_DELAY = 0.1
"""Seconds before a message whose backlog queue failed, and that sticks to none, is sent to another one."""
BACKLOG_MAX_MESSAGE_SIZE = DEFAULT_MAX_MESSAGE_SIZE
"""Backlog queues are created without a size of their own, so sends to them keep to the Standard limit."""


def _with_changes(settlement: Settlement, changes: tuple[Change, ...]) -> Settlement:
    if not changes:
        return settlement
    return dataclasses.replace(settlement, changes=(*changes, *settlement.changes))


class PairedSender:
    """Mode ``paired``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """The primary while it is not failed over (after the restore barriers, in ordered mode), else the
        backlog; every entry settled, per key."""
        settings = port.ctx.settings
        if settings.primary is None:
            raise ConfigurationError("paired mode needs a primary namespace")
        namespace = settings.primary.namespace_name
        policy = settings.paired.failover_policy()
        state = port.ctx.paired.get(port.entity)
        retry = port.retry_context()
        where, engage = route(state, retry.now, policy)
        ordered = settings.paired.restore_order == "ordered"
        if where == "primary":
            if ordered:
                waiting = _restore_barriers(port, namespace)
                if waiting is not None:
                    return [waiting] * len(entries)
            return _to_primary(port, entries, state, policy, retry)
        rotation = port.ctx.paired.rotation(namespace, settings.paired.backlog_queue_count)
        settled = _to_backlog(port, entries, namespace, rotation, retry, ordered=ordered)
        return [_with_changes(s, tuple(engage)) for s in settled]


def _to_primary(
    port: SendPort,
    entries: Sequence[OutboxEntry],
    state: PairedState,
    policy: FailoverPolicy,
    retry: RetryContext,
) -> list[Settlement]:
    outcome = send_entries(port, "primary", entries, Operation.PRIMARY_SEND)
    now = retry.now
    out: list[Settlement] = []
    for result in outcome.outcomes:
        if result.ok:
            out.append(Ack((PRIMARY,), changes=on_primary_success(state, now)))
            continue
        alerts = (
            (f"configuration error on primary: {result.error}",)
            if result.error_class is ErrorClass.CONFIGURATION
            else ()
        )
        if result.error_class is ErrorClass.MESSAGE_PERMANENT:
            out.append(DeadLetter(f"message_permanent on primary: {result.error}", alerts=alerts))
            continue
        changes = on_primary_failure(state, result, now, policy)
        after = apply_changes(state, changes)
        delay = retry.delay()
        left = seconds_until_failover(after, now, policy)
        if left is not None:
            delay = min(delay, left)  # 0 once failover engaged: the next round goes to the backlog
        reason = f"{result.failed_with.value} on primary: {result.error}"
        out.append(Retry(delay, reason, (PRIMARY,), changes=changes, alerts=alerts))
    return out


def _hold_delay(port: SendPort, rotation: BacklogRotation, index: int | None, now: float) -> float:
    """How long a held key waits before it is looked at again: until its queue may be readmitted, at most
    one ping interval (the earliest the failover could end)."""
    options = port.ctx.settings.paired
    longest = options.ping_primary_interval
    readmit = options.backlog_readmit_after
    if readmit is None:
        return longest
    removed_at = rotation.removed.get(index, now) if index is not None else now  # None: removed just now
    return max(0.1, min(longest, removed_at + readmit - now))


def _to_backlog(
    port: SendPort,
    entries: Sequence[OutboxEntry],
    namespace: str,
    rotation: BacklogRotation,
    retry: RetryContext,
    *,
    ordered: bool,
) -> list[Settlement]:
    ctx, entity, shard, now = port.ctx, port.entity, port.shard, retry.now
    options = ctx.settings.paired
    in_rotation = rotation.in_rotation(now, options.backlog_readmit_after)
    if not in_rotation:
        error = "every backlog queue is out of rotation"
        return [Retry(retry.delay(), error, (PRIMARY,), changes=(RecordError(now, error),))] * len(entries)
    dedup = ctx.settings.entity(entity).requires_duplicate_detection
    keys = [partition_key(e.envelope, dedup) if e.envelope is not None else None for e in entries]
    ledger = BacklogLedger(ctx.redis)
    sticky = ledger.keys_of(entity, shard, [k for k in keys if k is not None]) if ordered else {}
    assigned: dict[str, int] = {}
    held: dict[str, Hold] = {}
    out: list[Settlement | None] = [None] * len(entries)
    plan: dict[int, tuple[int, ServiceBusMessage]] = {}
    current = ctx.current_backlog.get(namespace)
    if current is not None and current not in in_rotation:
        current = None
    wait_for_primary = options.ping_primary_interval
    for i, entry in enumerate(entries):
        key = keys[i]
        if key is not None and key in held:
            out[i] = held[key]  # never sent past an earlier entry of its key that must wait
            continue
        if entry.envelope is None:
            raise InvariantError("an undecodable entry reached the paired sender (quarantined before)")
        aliased = to_backlog_message(entry.envelope, entity, max_message_size=BACKLOG_MAX_MESSAGE_SIZE)
        index: int | None
        if not isinstance(aliased, BacklogMessage):
            index, hold = None, Hold(wait_for_primary, f"waits for the primary: {aliased.reason}")
        elif ordered and key is not None:
            index = sticky.get(key)
            if index is None:
                index = rendezvous_backlog(key, in_rotation)
                if index is None:
                    raise InvariantError("no backlog queue for a key although the rotation is not empty")
                sticky[key] = assigned[key] = index
            if index in in_rotation:
                plan[i] = (index, aliased.message)
                continue
            hold = Hold(
                _hold_delay(port, rotation, index, now),
                f"its backlog queue {index} left the rotation; its messages there go first",
            )
        else:
            # No order to keep (a keyless message, or fast mode): this worker's current queue, as .NET did.
            index = choose_backlog(rotation, now, retry.rand, current, options.backlog_readmit_after)
            current = index
            if index is None:
                raise InvariantError("no backlog queue chosen although the rotation is not empty")
            plan[i] = (index, aliased.message)
            continue
        out[i] = hold
        if key is not None:
            held[key] = hold
    used = sorted({index for index, _ in plan.values()})
    if ordered and used:
        # Intent first: the ledger before the key map, both before the send (bridge.state.backlog).
        ledger.open(entity, shard, used)
        ledger.assign(entity, shard, assigned)
    for index in used:
        members = [i for i in sorted(plan) if plan[i][0] == index]
        path = backlog_queue_path(namespace, index)
        result = port.send_messages("secondary", path, [plan[i][1] for i in members], Operation.BACKLOG_SEND)
        for i, outcome in zip(members, result.outcomes, strict=True):
            if outcome.ok:
                out[i] = Ack((backlog_target(path),))
                continue
            if outcome.error_class is ErrorClass.MESSAGE_PERMANENT:
                hold = Hold(wait_for_primary, f"rejected by backlog queue {index}: {outcome.error}")
            else:
                removal = on_backlog_failure(index, outcome, now)
                # A key that sticks to the queue waits for it; any other message goes to another queue at
                # once (the failed one has left the rotation).
                sticks = ordered and keys[i] is not None
                hold = Hold(
                    _hold_delay(port, rotation, None, now) if sticks else REROUTE_DELAY,
                    f"backlog queue {index} failed: {outcome.error}",
                    changes=() if removal is None else (removal,),
                )
                if ctx.current_backlog.get(namespace) == index:
                    ctx.current_backlog.pop(namespace, None)
            out[i] = hold
            if keys[i] is not None:
                held.setdefault(keys[i], hold)  # type: ignore[arg-type]
        if result.outcomes and result.outcomes[0].ok:
            ctx.current_backlog[namespace] = index
    settled: list[Settlement] = []
    for item in out:
        if item is None:
            raise InvariantError("an entry of the batch was left without a settlement")
        settled.append(item)
    return settled


def _restore_barriers(port: SendPort, namespace: str) -> Retry | None:
    """Ordered restore: None when this shard has nothing left in the backlog; else send the barriers that
    are missing and say how long to wait (a planned wait, not a failure)."""
    ctx, entity, shard = port.ctx, port.entity, port.shard
    ledger = BacklogLedger(ctx.redis)
    queues = ledger.queues(entity, shard)
    if not queues:
        return None
    for index, status in sorted(queues.items()):
        if status != OPEN and not status.startswith("wait:"):
            continue  # sent: the syphon has yet to reach it
        token = uuid.uuid4().hex[:16]
        ledger.set_barrier(entity, shard, index, f"wait:{token}")
        path = backlog_queue_path(namespace, index)
        result = port.send_messages(
            "secondary", path, [barrier_message(entity, shard, token)], Operation.BARRIER
        )
        if result.outcomes and result.outcomes[0].ok:
            ledger.confirm_barrier(entity, shard, index, token)
    waiting = ", ".join(str(i) for i in sorted(queues))
    return Retry(
        ctx.settings.paired.syphon_retry_interval,
        f"ordered restore: this shard's messages in backlog queue(s) {waiting} are not syphoned yet",
        (PRIMARY,),
        backoff=False,
    )
