"""Replication mode ``active``: every message to both namespaces with the same MessageId
(``core.replication.decide_active``).

With ``success_policy = "all"`` an entry is acknowledged only when both accepted it. Where each entry of a
batch already landed is remembered (``RetryStore.remember_delivered``, applied by the drainer for *every*
entry whose decision says so, not only the first that must wait), so a retry sends it only to the
namespace still missing it.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, SECONDARY, Settlement, Target
from bridge.core.outcomes import Outcome
from bridge.core.replication import decide_active
from bridge.delivery.modes.base import SendPort, final, send_entries
from bridge.outbox.reader import OutboxEntry


class ActiveSender:
    """Mode ``active``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """Send each entry to every namespace that has not accepted it yet; settle per the policy."""
        policy = port.ctx.settings.entity(port.entity).success_policy
        delivered = port.ctx.retry.delivered(port.entity, port.shard, [e.entry_id for e in entries])
        outcomes: list[dict[Target, Outcome]] = [{} for _ in entries]
        for target, op in ((PRIMARY, Operation.PRIMARY_SEND), (SECONDARY, Operation.BACKUP_SEND)):
            todo = [i for i, e in enumerate(entries) if target not in delivered.get(e.entry_id, ())]
            if not todo:
                continue
            result = send_entries(port, target.namespace, [entries[i] for i in todo], op)
            for j, i in enumerate(todo):
                outcomes[i][target] = result.outcomes[j]
        ctx = port.retry_context()
        return [
            final(decide_active(outcomes[i], policy, ctx, delivered.get(e.entry_id, ())))
            for i, e in enumerate(entries)
        ]
