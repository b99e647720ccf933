"""Replication mode ``active``: every message to both namespaces with the same MessageId
(``core.replication.decide_active``).

With ``success_policy = "all"`` an entry is acknowledged only when both accepted it. Where each entry of a
batch already landed is remembered (``RetryStore.remember_delivered``, applied by the drainer for *every*
entry whose decision says so, not only the first that must wait), so a retry sends it only to the
namespace still missing it. A batch read ahead comes with its messages built and packed
(``ShardSending.pack_ahead``, with the TTL left at the read): both copies send those batches while that TTL
is still the one left (``ShardSending.packed``).
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, SECONDARY, Settlement, Target
from bridge.core.outcomes import Outcome
from bridge.core.replication import decide_active
from bridge.delivery.modes.base import SendPort, envelope_of, final
from bridge.delivery.shard_sending import BatchSend
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import OutgoingMessage, to_message
from bridge.servicebus.sending import SharedBatches


class ActiveSender:
    """Mode ``active``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """Send each entry to every namespace that has not accepted it yet; settle per the policy."""
        policy = port.ctx.settings.entity(port.entity).success_policy
        delivered = port.delivered([e.entry_id for e in entries])
        outcomes: list[dict[Target, Outcome]] = [{} for _ in entries]
        sends: list[tuple[Target, list[int], BatchSend]] = []
        todos = {
            target: [i for i, e in enumerate(entries) if target not in delivered.get(e.entry_id, ())]
            for target in (PRIMARY, SECONDARY)
        }
        # One message per entry for both copies (the SDK reads it into a batch without changing it), and,
        # when both namespaces are to get the same messages, one packing of them for both: made with the
        # read, while the batch before was in flight, when they are all of the batch's entries.
        built: dict[int, OutgoingMessage] = {}
        shared = SharedBatches() if todos[PRIMARY] == todos[SECONDARY] else None
        if shared is not None and len(todos[PRIMARY]) == len(entries):
            packed = port.packed(entries)
            if packed is not None:
                built, shared = dict(enumerate(packed.messages)), packed.shared
        for target, op in ((PRIMARY, Operation.PRIMARY_SEND), (SECONDARY, Operation.BACKUP_SEND)):
            todo = todos[target]
            if todo:
                for i in todo:
                    if i not in built:
                        built[i] = to_message(envelope_of(entries[i]))
                messages = [built[i] for i in todo]
                send = BatchSend(target.namespace, port.entity, messages, op, shared=shared)
                sends.append((target, todo, send))
        # Both copies at once: each namespace gets the shard's batches in order, the next batch goes
        # after both answered; only the two namespaces' work overlaps.
        results = port.send_each([send for _, _, send in sends])
        for (target, todo, _), result in zip(sends, results, strict=True):
            for j, i in enumerate(todo):
                outcomes[i][target] = result.outcomes[j]
        ctx = port.retry_context()
        return [
            final(decide_active(outcomes[i], policy, ctx, delivered.get(e.entry_id, ())))
            for i, e in enumerate(entries)
        ]
