"""One outbox batch in paired mode, decided before anything is sent (docs/paired.md).

The adapter (``bridge.delivery.modes.paired``) gathers a ``PairedView``, calls ``plan_batch`` and carries
the ``PairedPlan`` out: it records the ledger intent, sends the restore barriers, the primary's and each
backlog queue's share of the batch, and hands the outcomes to ``bridge.core.paired_settle.settle_batch``,
which settles every entry.
Deciding the whole batch first is what keeps the order per key, the rule the plan exists for:

- **Where.** The primary while the entity is not failed over (``bridge.core.paired.route``); else the
  backlog, and an expired FailoverInterval timer engages failover on the way (the change rides on every
  settlement of the batch).
- **Ordered restore.** ``restore_order = "ordered"``: while the shard's backlog ledger still names a queue,
  nothing goes to the primary. Every queue whose barrier is not known to be in it yet (``open``, or
  ``wait:<token>``, a barrier whose send was not confirmed) gets one, and the batch waits for the syphon
  (a planned ``Retry``, not counted as a failure).
- **Lost barriers.** One not passed within ``barrier_timeout`` gets a replacement (``bridge.core.barriers``).
- **Moved keys.** A key another shard's key map still names (``outbox_shards`` changed while the backlog
  held it) is taken over with its queue (``bridge.core.moved_keys``): it sticks to that queue, and after a
  restore the shard's own barrier there keeps it from the primary until its older messages are syphoned.
- **Sticky queues.** Ordered, a keyed message goes to the queue its key sticks to, chosen by rendezvous
  hashing over the queues in rotation the first time; a key whose queue left the rotation is held until the
  queue is readmitted or the failover ends (its messages there must be syphoned first). A keyless message
  (or any message in ``fast`` mode) goes to this worker's current queue, or a random one in rotation.
- **Held keys.** A message that cannot be aliased waits for the primary, where it fits un-aliased. A held
  entry (that, or one whose key's queue left the rotation) holds back every later entry of its key in the
  batch, which is never sent past it; entries of other keys go on. With no queue in rotation at all the
  whole batch is retried and the error recorded.
- **After the sends.** A backlog queue that failed leaves the rotation (for every worker); its keyed
  messages wait for it (ordered), the others try another queue shortly. A message a backlog queue refuses
  for good waits for the primary, where it may fit un-aliased; the later messages of its key in the send
  were not sent (the adapter sends with the keys, ``bridge.servicebus.sending``) and wait behind it. The
  primary's outcomes start, engage or end the FailoverInterval timer.

Pure: no I/O; ``now`` and the random source come in ``RetryContext``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bridge.core.barriers import OPEN, barrier_due
from bridge.core.decisions import PRIMARY, Hold, Retry, Settlement
from bridge.core.moved_keys import NO_MOVED_KEYS, MovedKeys
from bridge.core.paired import (
    BacklogRotation,
    FailoverPolicy,
    PairedChange,
    PairedState,
    RecordError,
    backlog_queue_path,
    choose_backlog,
    rendezvous_backlog,
    route,
)
from bridge.core.replication import RetryContext
from bridge.core.roles import Role
from bridge.errors import InvariantError

REROUTE_DELAY = 0.1
"""Seconds before a message whose backlog queue failed, and that sticks to none, is sent to another one."""
OUT_OF_ROTATION = "every backlog queue is out of rotation"

Route = Literal["primary", "backlog"]


@dataclass(frozen=True)
class BatchEntry:
    """One outbox entry as the plan sees it.

    ``key`` is its order key (SessionId, PartitionKey, MessageId when deduplicating; None: no order to
    keep). ``refusal`` says why it cannot be aliased for a backlog queue (too large once aliased, a reserved
    property); None when it can. Only a batch that goes to the backlog looks at it, so the adapter aliases
    only then.
    """

    key: str | None
    refusal: str | None = None


@dataclass(frozen=True)
class BacklogView:
    """The backlog side of the paired state: read only when the batch goes there (``route``).

    ``current`` is this worker's queue from its earlier batches (None: none yet; one that left the
    rotation is ignored). ``sticky`` maps keys of the batch to the queue they already stick to (ordered
    mode; empty in fast mode).
    """

    rotation: BacklogRotation
    current: int | None = None
    sticky: Mapping[str, int] = field(default_factory=dict, hash=False)
    accepting: bool = False
    """The secondary's address accepted a TCP connect just now (probed only while a queue is out of the
    rotation because that address refused connections): those queues are back in."""


@dataclass(frozen=True)
class PairedView:
    """What the plan needs to know of the entity and its shard at ``retry.now``.

    ``ledger`` is the shard's backlog ledger, queue index → ``open`` / ``wait:<token>`` / ``sent:<token>``
    (``bridge.state.backlog``): read in ordered mode when the batch goes to the primary, else empty.
    ``backlog`` is None when the batch goes to the primary. ``namespace`` is the primary namespace's name,
    which the backlog queue paths carry. ``readmit_after``: seconds until a queue that left the rotation is
    used again (None: never); ``syphon_retry_interval``: how long an ordered restore waits between looks
    at its barriers.
    """

    state: PairedState
    policy: FailoverPolicy
    retry: RetryContext
    namespace: str
    readmit_after: float | None
    syphon_retry_interval: float
    ordered: bool = True
    ledger: Mapping[int, str] = field(default_factory=dict, hash=False)
    backlog: BacklogView | None = None
    barrier_timeout: float = 900.0
    """Seconds after which a barrier the syphon has not passed is declared lost and sent again."""
    moved: MovedKeys = NO_MOVED_KEYS
    """Keys of the batch that other shards' key maps name, with older messages maybe in the backlog
    (ordered mode; ``bridge.core.moved_keys``)."""
    retired: Mapping[int, Mapping[int, str]] = field(default_factory=dict, hash=False)
    """Ledgers of retired shards this shard sends barriers for (``retired_ledgers``), by shard."""


@dataclass(frozen=True)
class BacklogSend:
    """One batched send to backlog queue ``index`` (``path``): the batch positions ``members``, in order."""

    index: int
    path: str
    members: tuple[int, ...]


@dataclass(frozen=True)
class PairedPlan:
    """What to do with one batch, before anything is sent.

    The adapter carries it out in this order: the ledger intent first (``open`` then ``assign``, so a
    crash after it leaves a barrier to send, never a key in a queue the ledger does not name), then the
    ``barriers``, then the sends (``to_primary``, each of ``to_backlog``), then ``settle_batch``, which
    adds the batch's ``changes`` to every settlement, ``decided`` ones included.
    """

    route: Route
    keys: tuple[str | None, ...]
    """The order key of every entry of the batch, by position."""
    changes: tuple[PairedChange, ...] = ()
    """Failover engaged by this batch (an expired timer); rides on every settlement."""
    to_primary: tuple[int, ...] = ()
    """Batch positions sent to the entity on the primary, as one batched send."""
    to_backlog: tuple[BacklogSend, ...] = ()
    """One batched send per backlog queue, in queue order."""
    decided: Mapping[int, Settlement] = field(default_factory=dict, hash=False)
    """Batch positions settled without a send (held, waiting for a restore, nothing in rotation)."""
    held: Mapping[str, Hold] = field(default_factory=dict, hash=False)
    """Keys held back in this batch, and why: their first held entry's ``Hold``."""
    barriers: tuple[int, ...] = ()
    """Backlog queues that get a (new) restore barrier before the batch waits for the syphon."""
    open: tuple[int, ...] = ()
    """Backlog queues to mark ``open`` in the shard's ledger before the sends (ordered mode)."""
    assign: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Keys to stick to a backlog queue before their first send there (ordered mode)."""
    forget: Mapping[int, tuple[str, ...]] = field(default_factory=dict, hash=False)
    """Other shards' key-map entries to drop after ``assign`` (moved keys taken over, stale entries)."""
    retired_barriers: Mapping[int, tuple[int, ...]] = field(default_factory=dict, hash=False)
    """Retired shard → backlog queues that get a barrier in its name (nothing waits for them here)."""


REFUSED_HOLD = 1.0
"""Seconds a key waits before it is decided again when its queue left the rotation because the
namespace's address refused connections (the next decision probes the address)."""


QUEUE_AWAITS: tuple[Role, ...] = ("primary", "secondary")
"""What a key held for its backlog queue waits for: the failover's end, or the secondary (the queue's)."""


def hold_delay(view: PairedView, removed_at: float) -> float:
    """How long a key held for a backlog queue that left the rotation at ``removed_at`` waits before it is
    looked at again: until the queue may be readmitted, at most one ping interval (the earliest the
    failover could end)."""
    longest = view.policy.ping_primary_interval
    if view.readmit_after is None:
        return longest
    return max(0.1, min(longest, removed_at + view.readmit_after - view.retry.now))


def plan_batch(entries: Sequence[BatchEntry], view: PairedView) -> PairedPlan:
    """The plan for a batch of one shard, its entries in shard order (see the module docstring)."""
    keys = tuple(entry.key for entry in entries)
    where, engage = route(view.state, view.retry.now, view.policy)
    if where == "primary":
        return _primary_plan(keys, view)
    if view.backlog is None:
        raise InvariantError("the batch goes to the backlog but the backlog view was not gathered")
    return _backlog_plan(entries, view, view.backlog, engage)


def _primary_plan(keys: tuple[str | None, ...], view: PairedView) -> PairedPlan:
    moved = view.moved if view.ordered else NO_MOVED_KEYS
    taken = {key: found.queues[0] for key, found in moved.keys.items()}
    # A moved key's queues join this shard's ledger as ``open``: a barrier sent now lands behind its older
    # messages there, whatever an earlier barrier of this shard in that queue was sent behind.
    adopted = tuple(sorted({queue for found in moved.keys.values() for queue in found.queues}))
    ledger = {**view.ledger, **dict.fromkeys(adopted, OPEN)} if view.ordered else {}
    queues = sorted(ledger)
    forget = moved.forget(taken)
    now, timeout = view.retry.now, view.barrier_timeout
    retired = {
        shard: due
        for shard, statuses in view.retired.items()
        if (due := tuple(i for i in sorted(statuses) if barrier_due(statuses[i], now, timeout)))
    }
    if not queues:
        everything = tuple(range(len(keys)))
        return PairedPlan("primary", keys, to_primary=everything, forget=forget, retired_barriers=retired)
    waiting = ", ".join(str(i) for i in queues)
    wait = Retry(
        view.syphon_retry_interval,
        f"ordered restore: this shard's messages in backlog queue(s) {waiting} are not syphoned yet",
        (PRIMARY,),
        backoff=False,
    )
    barriers = tuple(i for i in queues if barrier_due(ledger[i], now, timeout))
    return PairedPlan(
        "primary",
        keys,
        decided=dict.fromkeys(range(len(keys)), wait),
        barriers=barriers,
        open=adopted,
        assign=taken,
        forget=forget,
        retired_barriers=retired,
    )


class _Placer:
    """Chooses the backlog queue of each entry in turn (sticky keys, this worker's current queue)."""

    def __init__(self, view: PairedView, backlog: BacklogView, in_rotation: tuple[int, ...]) -> None:
        self.view, self.backlog, self.in_rotation = view, backlog, in_rotation
        self.sticky: dict[str, int] = dict(backlog.sticky) if view.ordered else {}
        self.assigned: dict[str, int] = {}
        self.current = backlog.current if backlog.current in in_rotation else None

    def place(self, entry: BatchEntry) -> int | Hold:
        """The queue for ``entry``, or why it (and its key) must wait."""
        view, backlog, now = self.view, self.backlog, self.view.retry.now
        if entry.refusal is not None:
            return Hold(view.policy.ping_primary_interval, f"waits for the primary: {entry.refusal}")
        if view.ordered and entry.key is not None:
            index = self.sticky.get(entry.key)
            moved = view.moved.keys.get(entry.key)
            if index is None and moved is not None:
                # Moved from another shard: it keeps the queue its older messages are in.
                index = self.sticky[entry.key] = moved.queues[0]
                if index in self.in_rotation:
                    self.assigned[entry.key] = index
            elif index is None:
                index = rendezvous_backlog(entry.key, self.in_rotation)
                if index is None:
                    raise InvariantError("no backlog queue for a key although the rotation is not empty")
                self.sticky[entry.key] = self.assigned[entry.key] = index
            if index in self.in_rotation:
                return index
            delay = hold_delay(view, backlog.rotation.removed.get(index, now))
            if index in backlog.rotation.refused:
                delay = min(delay, REFUSED_HOLD)  # looked at again soon: the address may accept again
            return Hold(
                delay,
                f"its backlog queue {index} left the rotation; its messages there go first",
                awaits=QUEUE_AWAITS,
            )
        # No order to keep (a keyless message, or fast mode): this worker's current queue, as .NET did.
        index = choose_backlog(
            backlog.rotation,
            now,
            view.retry.rand,
            self.current,
            view.readmit_after,
            accepting=backlog.accepting,
        )
        if index is None:
            raise InvariantError("no backlog queue chosen although the rotation is not empty")
        self.current = index
        return index


def _backlog_plan(
    entries: Sequence[BatchEntry], view: PairedView, backlog: BacklogView, engage: tuple[PairedChange, ...]
) -> PairedPlan:
    keys = tuple(entry.key for entry in entries)
    now = view.retry.now
    in_rotation = backlog.rotation.in_rotation(now, view.readmit_after, backlog.accepting)
    if not in_rotation:
        retry = Retry(
            view.retry.delay(), OUT_OF_ROTATION, (PRIMARY,), changes=(RecordError(now, OUT_OF_ROTATION),)
        )
        return PairedPlan("backlog", keys, engage, decided=dict.fromkeys(range(len(keys)), retry))
    placer = _Placer(view, backlog, in_rotation)
    held: dict[str, Hold] = {}
    decided: dict[int, Settlement] = {}
    queue_of: dict[int, int] = {}
    for position, entry in enumerate(entries):
        if entry.key is not None and entry.key in held:
            decided[position] = held[entry.key]  # never sent past an earlier entry of its key that waits
            continue
        placed = placer.place(entry)
        if isinstance(placed, Hold):
            decided[position] = placed
            if entry.key is not None:
                held[entry.key] = placed
        else:
            queue_of[position] = placed
    used = tuple(sorted(set(queue_of.values())))
    sends = tuple(
        BacklogSend(
            index,
            backlog_queue_path(view.namespace, index),
            tuple(p for p in queue_of if queue_of[p] == index),
        )
        for index in used
    )
    intent = view.ordered and bool(used)
    assign = placer.assigned if intent else {}
    # A moved key's other queues (its older messages are in several: rare) need this shard's barrier too.
    also = {queue for key in assign if key in view.moved.keys for queue in view.moved.keys[key].queues}
    return PairedPlan(
        "backlog",
        keys,
        engage,
        to_backlog=sends,
        decided=decided,
        held=held,
        open=tuple(sorted(set(used) | also)) if intent else (),
        assign=assign,
        forget=view.moved.forget(assign),
    )
