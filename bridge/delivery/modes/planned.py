"""Replication modes ``passive``, ``active`` and ``none``: the batch plan of ``bridge.core.batch_plan``,
carried out.

This module gathers what the plan needs (the roles observed for the batch in passive mode, where each entry
already landed in active mode), makes each round of the plan's sends at once through the drainer
(``base.SendPort``) and lets the core decide every entry; a round's decisions may ask for one more (passive
mode's failover to the backup). Every state change rides on the settlements and is applied once by the
drainer.

Active mode remembers where each entry of a batch already landed (``RetryStore.remember_delivered``, applied
by the drainer for *every* entry whose decision says so, not only the first that must wait), so a retry
sends it only to the namespace still missing it. A batch read ahead comes with its messages built and
packed (``ShardSending.pack_ahead``, with the TTL left at the read): both copies send those batches while
that TTL is still the one left (``ShardSending.packed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.batch_plan import BatchPlan, BatchView, PlanMode, PlannedSend, decide, follow_up, plan_batch
from bridge.core.decisions import SendDecision, Settlement, Target
from bridge.core.outcomes import Outcome
from bridge.delivery.modes.base import SendPort, envelope_of, final
from bridge.delivery.shard_sending import BatchSend
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import OutgoingMessage, to_message
from bridge.servicebus.sending import SharedBatches


class PlannedSender:
    """Modes ``passive``, ``active`` and ``none``: one ``BatchPlan`` per batch."""

    def __init__(self, mode: PlanMode) -> None:
        self.mode: PlanMode = mode

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """Send the entries as the plan says, round after round, and settle each one."""
        plan = plan_batch(_view(port, self.mode, entries))
        if plan.warm is not None:
            port.ctx.pool.warm(plan.warm, port.entity)  # the backup's link, open before a failover needs it
        messages = _Messages(port, entries, plan)
        outcomes: list[dict[Target, Outcome]] = [{} for _ in entries]
        _send_round(port, plan.sends, messages, outcomes)
        retry = port.retry_context()
        decisions: tuple[SendDecision, ...] = decide(plan, outcomes, retry)
        while sends := follow_up(decisions, outcomes):
            _send_round(port, sends, messages, outcomes)
            decisions = decide(plan, outcomes, retry)
        return [final(decision) for decision in decisions]


def _view(port: SendPort, mode: PlanMode, entries: Sequence[OutboxEntry]) -> BatchView:
    """What the plan needs: the roles observed for a passive batch, where an active batch's entries
    already landed and the entity's success policy."""
    if mode == "passive":
        return BatchView(mode, len(entries), roles=port.observed_roles())
    if mode == "active":
        landed = port.delivered([e.entry_id for e in entries])
        delivered = tuple(landed.get(e.entry_id, ()) for e in entries)
        policy = port.ctx.settings.entity(port.entity).success_policy
        return BatchView(mode, len(entries), delivered=delivered, policy=policy)
    return BatchView(mode, len(entries))


class _Messages:
    """The batch's messages, one per entry for every send (the SDK reads a message into a batch without
    changing it), built when first needed; for a plan whose sends carry the same entries, packed once for
    all of them: with the read, while the batch before was in flight, when they are all of the batch's
    entries (``SendPort.packed``)."""

    def __init__(self, port: SendPort, entries: Sequence[OutboxEntry], plan: BatchPlan) -> None:
        self.entries = entries
        self.built: dict[int, OutgoingMessage] = {}
        self.shared: SharedBatches | None = SharedBatches() if plan.shared else None
        if self.shared is not None and plan.sends and len(plan.sends[0].members) == len(entries):
            packed = port.packed(entries)
            if packed is not None:
                self.built, self.shared = dict(enumerate(packed.messages)), packed.shared

    def of(self, members: Sequence[int]) -> list[OutgoingMessage]:
        """The messages of the entries at ``members``, in that order."""
        for i in members:
            if i not in self.built:
                self.built[i] = to_message(envelope_of(self.entries[i]))
        return [self.built[i] for i in members]


def _send_round(
    port: SendPort, sends: Sequence[PlannedSend], messages: _Messages, outcomes: list[dict[Target, Outcome]]
) -> None:
    """One round of sends, at once (to different namespaces); each entry's outcome kept by target."""
    batch_sends = [
        BatchSend(
            s.target.namespace, port.entity, messages.of(s.members), s.operation, shared=messages.shared
        )
        for s in sends
    ]
    results = port.send_each(batch_sends)
    for send, result in zip(sends, results, strict=True):
        for j, i in enumerate(send.members):
            outcomes[i][send.target] = result.outcomes[j]
