"""One module per replication mode, behind one small protocol (``base.Sender``).

A mode takes a batch of decoded outbox entries of one shard, does its sends through the drainer
(``base.SendPort``) and settles every entry with an ``Ack``, ``DeadLetter``, ``Retry`` or ``Hold``
(``bridge.core.decisions``). Every state change a mode decides (a role swap, the paired failover timer, a
backlog queue leaving the rotation) travels *with* the decisions and is applied once, by the drainer, in
``ShardSettling.apply``. Per key, a mode never sends an entry past a ``Retry`` or ``Hold`` of an earlier
entry of the same key; entries of other keys are not held back by a ``Hold``.

==========  =====================================================================================
mode        module
==========  =====================================================================================
passive     ``planned.PlannedSender``: the active namespace, the backup on an outage, roles swap
active      ``planned.PlannedSender``: both namespaces, ``success_policy`` "any" or "all"
none        ``planned.PlannedSender``: the primary only
paired      ``paired.PairedSender``: the primary, or aliased to a backlog queue while failed over
==========  =====================================================================================

Every mode decides a batch before its sends and from their outcomes in the core: passive, active and none
with ``bridge.core.batch_plan``, paired with ``bridge.core.paired_plan``; the modules here carry the plans
out.
"""

from __future__ import annotations

from bridge.delivery.modes.base import Sender, SendPort
from bridge.delivery.modes.paired import PairedSender
from bridge.delivery.modes.planned import PlannedSender

_SENDERS: dict[str, Sender] = {
    "passive": PlannedSender("passive"),
    "active": PlannedSender("active"),
    "none": PlannedSender("none"),
    "paired": PairedSender(),
}


def sender_for(mode: str) -> Sender:
    """The sender of replication mode ``mode`` (``passive`` for anything unknown, the default)."""
    return _SENDERS.get(mode, _SENDERS["passive"])


__all__ = ["SendPort", "Sender", "sender_for"]
