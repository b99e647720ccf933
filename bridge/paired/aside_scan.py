"""Finding set-aside backlog messages again when Redis lost their records (docs/paired.md, "Set-aside
records lost").

A set-aside message is deferred, and only ``receive_deferred`` with its sequence number reaches it again;
the numbers live in Redis (``bridge.state.aside``). A record Redis lost — the last second of writes after an
``everysec`` crash, a Sentinel failover to a replica that lagged, a restore from a backup — would leave its
message deferred for ever (and a restore barrier among them would keep its shard from the primary for
ever). The backlog queue is the other copy: a peek returns deferred messages too, each with its state
(``x-opt-message-state``) and its destination (``x-ms-path``; docs/servicebus-sdk.md). So every syphon run,
before its first receive, peeks through the whole queue and records again every deferred message Redis
does not name (``AsideStore.add``, idempotent). The syphon then takes them back in sequence order like any
other set-aside message, and every later message of their destination waits behind them.

Why before the first receive, every run: a destination whose record is gone would otherwise have its newer
messages received and sent ahead of the deferred older ones. A run stops at its first Redis error (a
failover is one), so the records a run relies on were scanned by it or written by it.

Finding records Redis lost means Redis lost other writes too, the syphon lease and the ``locks`` marker
among them: a syphon that held the queue before the loss may still hold message locks. The run that
recovered records therefore sets the marker to the queue's LockDuration and stops; the next run starts
once those locks have ended (``AsideStore.locks_pending``).

A recovered number whose message another syphon holds at that moment (it took it back and is sending it)
is harmless: ``receive_deferred`` does not return a locked message, so this syphon waits for it; once the
other completes it, the number names nothing and is forgotten, and if the other died before completing it,
the message is sent again — a duplicate with the same MessageId, as after any crash between send and
complete, never a loss or a reordering.

Cost: one peek per ``SCAN_PAGE`` messages in the queue, plus one that finds the end, per run (counted as
syphon receives); an empty queue costs one peek a run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from bridge.core.cost import Operation
from bridge.delivery.context import DeliveryContext
from bridge.servicebus.messages import deferred_destination
from bridge.state.aside import AsideStore

log = logging.getLogger(__name__)

SCAN_PAGE = 250
"""Messages asked for per peek."""


@dataclass
class ScanResult:
    """What one scan of a backlog queue found."""

    peeks: int = 0
    deferred: dict[str, list[int]] = field(default_factory=dict)
    """Deferred messages by destination, sequence numbers ascending."""
    recovered: int = 0
    """How many of them Redis did not name: recorded again now."""


def scan_deferred(ctx: DeliveryContext, queue: str, page: int = SCAN_PAGE) -> ScanResult:
    """Peek through backlog queue ``queue`` and record again the deferred messages Redis does not name.

    Driver errors leave as ``NamespaceError`` (peek) or ``StateStoreUnavailableError`` (Redis): the caller
    then does not receive from the queue in this run.
    """
    result = ScanResult()
    start = 0
    while True:
        try:
            peeked = ctx.pool.peek("secondary", queue, start, page)
        finally:
            result.peeks += 1
            ctx.cost.add(queue, Operation.SYPHON_RECEIVE)
        if not peeked:
            break
        for message in peeked:
            destination = deferred_destination(message)
            if destination is not None:
                result.deferred.setdefault(destination, []).append(int(message.sequence_number or 0))
        following = max(int(m.sequence_number or 0) for m in peeked) + 1
        if following <= start:
            break  # a page that does not move forward: never loop on it
        start = following
    aside = AsideStore(ctx.redis)
    for destination, numbers in result.deferred.items():
        result.recovered += aside.add(queue, destination, numbers)
    if result.recovered:
        log.warning(
            "backlog queue %s: %d deferred messages had lost their set-aside record; recorded again (%s)",
            queue,
            result.recovered,
            ", ".join(f"{d}: {len(n)}" for d, n in sorted(result.deferred.items())),
        )
    return result
