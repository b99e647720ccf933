"""Replication mode ``passive`` (the default): the active namespace, the backup on an outage-class failure,
and a role swap for every worker when the backup accepts (``core.replication.decide_passive``). The
backup's sender is kept open (``NamespacePool.warm``), so the first send of a failover finds a live link."""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.cost import Operation
from bridge.core.decisions import SendNext, Settlement
from bridge.core.replication import decide_passive
from bridge.core.roles import RoleState
from bridge.delivery.modes.base import SendPort, final, send_entries
from bridge.outbox.reader import OutboxEntry


class PassiveSender:
    """Mode ``passive``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """Send to the active namespace; what failed over goes to the backup in the same batch, in order."""
        observed: RoleState = port.observed_roles()
        port.ctx.pool.warm(observed.backup, port.entity)  # the backup's link, open before a failover needs it
        active_op = Operation.PRIMARY_SEND if observed.active == "primary" else Operation.BACKUP_SEND
        backup_op = Operation.BACKUP_SEND if observed.active == "primary" else Operation.PRIMARY_SEND
        first = send_entries(port, observed.active, entries, active_op)
        ctx = port.retry_context()
        decisions = [decide_passive(observed, o, None, ctx) for o in first.outcomes]
        again = [i for i, d in enumerate(decisions) if isinstance(d, SendNext)]
        if again:
            second = send_entries(port, observed.backup, [entries[i] for i in again], backup_op)
            for j, i in enumerate(again):
                decisions[i] = decide_passive(observed, first.outcomes[i], second.outcomes[j], ctx)
        return [final(d) for d in decisions]
