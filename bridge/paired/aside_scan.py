"""Finding set-aside backlog messages again when Redis lost their records (docs/paired.md, "Set-aside
records lost").

A set-aside message is deferred, and only ``receive_deferred`` with its sequence number reaches it again;
the numbers live in Redis (``bridge.state.aside``). A record Redis lost — the last second of writes after an
``everysec`` crash, a Sentinel failover to a replica that lagged, a restore from a backup — would leave its
message deferred for ever (and a restore barrier among them would keep its shard from the primary for
ever). The backlog queue is the other copy: a peek returns deferred messages too, each with its state
(``x-opt-message-state``) and its destination (``x-ms-path``; docs/servicebus-sdk.md). A *pass* peeks
through the whole queue once and records again every deferred message Redis does not name
(``AsideStore.add``, idempotent). The syphon then takes them back in sequence order like any other
set-aside message, and every later message of their destination waits behind them.

When: Redis loses writes only when its server is replaced (restarted, restored, failed over), which gives
it a new ``run_id``. A pass is therefore due when the server differs from the one the last complete pass
ran against, or when Redis holds no pass at all (``bridge.core.aside_pass``); with the same server since,
a run peeks nothing. Every record written since that pass was written to that server, before its deferral.

A pass is resumable: it stores where it got (``next``, after each page, behind the records that page
found) and a run peeks only while its budget lasts, so the peeks of one pass are bounded by the runs'
budgets, never repeated, and a queue of any length is passed through in ``length / SCAN_PAGE`` peeks. Until
the pass is complete the syphon receives nothing from the queue: a destination whose record is gone would
otherwise have its newer messages received and sent ahead of the deferred older ones. A run stops at its
first Redis error (a failover is one), and a pass made against another server starts again from the first
sequence number.

Finding records Redis lost means Redis lost other writes too, the syphon lease and the ``locks`` marker
among them: a syphon that held the queue before the loss may still hold message locks. The run that
recovered records therefore sets the marker to the queue's LockDuration and stops; the next run starts
once those locks have ended (``AsideStore.locks_pending``).

A recovered number whose message another syphon holds at that moment (it took it back and is sending it)
is harmless: ``receive_deferred`` does not return a locked message, so this syphon waits for it; once the
other completes it, the number names nothing and is forgotten, and if the other died before completing it,
the message is sent again — a duplicate with the same MessageId, as after any crash between send and
complete, never a loss or a reordering.

Cost: one peek per ``SCAN_PAGE`` messages in the queue, plus one that finds the end, per pass (counted as
syphon receives); none while the Redis server stays the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from bridge.core.aside_pass import FIRST_SEQUENCE, advance, pass_for_run
from bridge.core.cost import Operation
from bridge.delivery.context import DeliveryContext
from bridge.servicebus.messages import deferred_destination
from bridge.state.aside import AsideStore

log = logging.getLogger(__name__)

SCAN_PAGE = 250
"""Messages asked for per peek."""


@dataclass
class ScanResult:
    """What one run's part of a scan pass over a backlog queue found."""

    peeks: int = 0
    deferred: dict[str, list[int]] = field(default_factory=dict)
    """Deferred messages by destination, sequence numbers ascending."""
    recovered: int = 0
    """How many of them Redis did not name: recorded again now."""
    complete: bool = True
    """The pass is complete (or none was due): the run may receive."""
    resumes_at: int = FIRST_SEQUENCE
    """Where the next run goes on with an incomplete pass."""


def scan_deferred(ctx: DeliveryContext, queue: str, until: float, page: int = SCAN_PAGE) -> ScanResult:
    """Go on with the scan pass of backlog queue ``queue`` until it is complete or ``ctx.clock()`` reaches
    ``until``, recording again the deferred messages Redis does not name; nothing when no pass is due.

    Driver errors leave as ``NamespaceError`` (peek) or ``StateStoreUnavailableError`` (Redis): the caller
    then does not receive from the queue in this run.
    """
    result = ScanResult()
    aside = AsideStore(ctx.redis)
    current = pass_for_run(aside.scan_pass(queue), aside.server(queue))
    while current is not None and not current.complete:
        if ctx.clock() >= until:
            result.complete, result.resumes_at = False, current.next
            aside.save_scan_pass(queue, current)
            break
        try:
            peeked = ctx.pool.queues.peek("secondary", queue, current.next, page)
        finally:
            result.peeks += 1
            ctx.cost.add(queue, Operation.SYPHON_RECEIVE)
        found: dict[str, list[int]] = {}
        for message in peeked:
            destination = deferred_destination(message)
            if destination is not None:
                found.setdefault(destination, []).append(int(message.sequence_number or 0))
        for destination, numbers in found.items():
            result.recovered += aside.add(queue, destination, numbers)
            result.deferred.setdefault(destination, []).extend(numbers)
        current = advance(current, (int(m.sequence_number or 0) for m in peeked))
        aside.save_scan_pass(queue, current)
    if result.recovered:
        log.warning(
            "backlog queue %s: %d deferred messages had lost their set-aside record; recorded again (%s)",
            queue,
            result.recovered,
            ", ".join(f"{d}: {len(n)}" for d, n in sorted(result.deferred.items())),
        )
    return result
