"""The paired-namespace send path (SPEC §4) for one batch of outbox entries.

The core decides per message (``replication.plan_paired`` / ``decide_paired``); this module runs those
decisions batch-wise: all messages that go to the same target are sent as one batched send, the outcomes
are decided, shared state changes (failover timer, engagement, rotation removals) are written to Redis at
once — every worker reads them before its next batch — and messages that must go somewhere else (the
next backlog queue after one failed) are sent again, until every message has a final decision.

Each worker process keeps one randomly chosen backlog queue per primary namespace (``current_backlog``)
while it stays in rotation, as the .NET client did.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, Retry, SendDecision, SendNext, Target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.paired import FailoverPolicy, PairedChange, RemoveFromRotation, backlog_queue_index
from bridge.core.replication import PairedView, RetryContext, decide_paired, plan_paired
from bridge.core.roles import Swap
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import BacklogMessage, envelope_fields, to_backlog_message, to_message

if TYPE_CHECKING:
    from bridge.delivery.drainer import ShardDrainer

log = logging.getLogger(__name__)

BACKLOG_MAX_MESSAGE_SIZE = 256 * 1024


def paired_decisions(drainer: ShardDrainer, entries: Sequence[OutboxEntry]) -> list[SendDecision]:
    """Final decisions (Ack / DeadLetter / Retry) for ``entries`` in paired mode; state changes applied."""
    ctx, entity = drainer.ctx, drainer.entity
    settings = ctx.settings
    if settings.primary is None:
        raise RuntimeError("paired mode needs a primary namespace")
    namespace = settings.primary.namespace_name
    view = _view(drainer, namespace)
    retry_ctx = RetryContext(
        ctx.clock(), ctx.retry.attempts(entity, drainer.shard), ctx.backoff, random.random
    )
    fields = [envelope_fields(e.envelope) for e in entries if e.envelope is not None]
    decisions: list[SendDecision] = [plan_paired(view, f, retry_ctx) for f in fields]
    view = _apply(drainer, namespace, decisions, view)
    # Each round sends one group and either settles it or removes a queue from the rotation.
    for _ in range(len(decisions) + view.rotation.count + 1):
        waiting = [i for i, d in enumerate(decisions) if isinstance(d, SendNext)]
        if not waiting:
            break
        target = _first_target(decisions[waiting[0]])
        if target != PRIMARY:
            # One backlog queue per worker at a time: the core picks at random per message, the worker
            # sends every waiting message to the first pick (and keeps it while it works).
            group = [i for i in waiting if _first_target(decisions[i]) != PRIMARY]
        else:
            group = [i for i in waiting if _first_target(decisions[i]) == PRIMARY]
        outcomes = _send(drainer, target, [entries[i] for i in group])
        for j, i in enumerate(group):
            decisions[i] = decide_paired(view, fields[i], target, outcomes[j], retry_ctx)
        view = _apply(drainer, namespace, decisions, view)
        if target != PRIMARY and any(o.ok for o in outcomes) and target.queue is not None:
            index = backlog_queue_index(target.queue)
            if index is not None:
                ctx.current_backlog[namespace] = index
                view = dataclasses.replace(view, current_backlog=index)
    for i, decision in enumerate(decisions):
        if isinstance(decision, SendNext):  # cannot happen within the bound; never crash a drain on it
            decisions[i] = Retry(
                retry_ctx.delay(), f"undecided after every backlog queue: {decision.reason}", (PRIMARY,)
            )
    return [_strip(d) for d in decisions]


def _view(drainer: ShardDrainer, namespace: str) -> PairedView:
    ctx = drainer.ctx
    paired = ctx.settings.paired
    return PairedView(
        entity=drainer.entity,
        state=ctx.paired.get(drainer.entity),
        rotation=ctx.paired.rotation(namespace, paired.backlog_queue_count),
        policy=FailoverPolicy(paired.failover_interval, paired.ping_primary_interval, paired.ping_timeout),
        primary_namespace=namespace,
        backlog_max_message_size=BACKLOG_MAX_MESSAGE_SIZE,
        current_backlog=ctx.current_backlog.get(namespace),
        readmit_after=paired.backlog_readmit_after,
    )


def _first_target(decision: SendDecision) -> Target:
    assert isinstance(decision, SendNext)
    return decision.targets[0]


def _apply(
    drainer: ShardDrainer, namespace: str, decisions: Sequence[SendDecision], view: PairedView
) -> PairedView:
    """Write the decisions' state changes once each (they repeat across a batch) and re-read the view."""
    changes: list[PairedChange | RemoveFromRotation] = []
    for decision in decisions:
        for change in decision.changes:
            if not isinstance(change, Swap) and change not in changes:
                changes.append(change)
    if not changes:
        return view
    update = drainer.ctx.paired.apply_all(drainer.entity, namespace, changes)
    del update
    removed = [c for c in changes if isinstance(c, RemoveFromRotation)]
    fresh = _view(drainer, namespace)
    if view.current_backlog is not None and any(c.index == view.current_backlog for c in removed):
        drainer.ctx.current_backlog.pop(namespace, None)
        fresh = dataclasses.replace(fresh, current_backlog=None)
    return fresh


def _send(drainer: ShardDrainer, target: Target, entries: Sequence[OutboxEntry]) -> list[Outcome]:
    """Send ``entries`` to the primary entity or to a backlog queue; per-message outcomes."""
    if target == PRIMARY:
        messages = [to_message(e.envelope) for e in entries if e.envelope is not None]
        return list(
            drainer.send_messages("primary", drainer.entity, messages, Operation.PRIMARY_SEND).outcomes
        )
    assert target.queue is not None
    outcomes: list[Outcome | None] = []
    sendable = []
    for entry in entries:
        assert entry.envelope is not None
        aliased = to_backlog_message(
            entry.envelope, drainer.entity, max_message_size=BACKLOG_MAX_MESSAGE_SIZE
        )
        if isinstance(aliased, BacklogMessage):
            sendable.append(aliased.message)
            outcomes.append(None)
        else:
            # The core's size estimate let it through but the exact encoding does not fit: a
            # message-permanent answer for the backlog keeps it in the outbox for the primary.
            outcomes.append(Outcome.failure(ErrorClass.MESSAGE_PERMANENT, f"cannot be aliased: {aliased}"))
    sent = iter(
        drainer.send_messages("secondary", target.queue, sendable, Operation.BACKLOG_SEND).outcomes
        if sendable
        else ()
    )
    return [o if o is not None else next(sent) for o in outcomes]


def _strip(decision: SendDecision) -> SendDecision:
    """The changes were applied already; the drainer must not apply them again."""
    if decision.changes:
        return dataclasses.replace(decision, changes=())
    return decision
