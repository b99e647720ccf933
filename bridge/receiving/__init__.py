"""The receiving end (``docs/receiving.md``): both namespaces in, each message handed once, all settled.

=====================  ====================================================================================
module                 holds
=====================  ====================================================================================
``receiver``           ``Receiver`` / ``AsyncReceiver`` (the public API) and ``read_counts``
``engine``             ``ReceiveEngine``: the link threads per namespace, sessions, stopping
``processing``         ``CopyProcessor``: claim, handle, remember, settle, count (the order that is safe)
``renewal``            ``LockWatch``: lock renewal and in-flight marks for slow handlers
``window``             ``DedupWindow``: the shared MessageId window in Redis (claim/done/release)
``counters``           ``ReceiverCounterStore``: the counters in Redis
``keys``, ``scripts``  Redis key names and Lua scripts
``handlers``           ``--handler module:function`` and ``--celery-task``
``backlog``            ``bridge receive --backlog``: peek or drain paired-mode backlog queues
=====================  ====================================================================================

The decisions are pure and live in ``bridge.core.receiving``; the Service Bus side (the only azure
imports) is ``bridge.servicebus.receiving``.
"""

from __future__ import annotations

from bridge.core.received import ReceivedMessage
from bridge.receiving.receiver import AsyncReceiver, Receiver, read_counts

__all__ = ["AsyncReceiver", "ReceivedMessage", "Receiver", "read_counts"]
