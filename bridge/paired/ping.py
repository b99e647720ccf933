"""The ping (paired mode, docs/paired.md): learns when a failed-over entity's primary takes messages again.

Every ``ping_primary_interval`` (a beat task) each failed-over paired entity gets one ping on the primary:
an empty message with ContentType ``application/vnd.ms-servicebus-ping``, TTL 1 s and a random SessionId,
so session-enabled entities accept it too. In ``ping_mode = "schedule"`` the ping is scheduled a year
ahead and cancelled at once, so no receiver ever sees it (today's Service Bus delivers a plain ping). A
ping the primary accepts applies ``MarkAvailable``: the shared state says "healthy", so every worker's next
batch goes to the primary and the syphon starts moving the backlog. Any other outcome is recorded
(``RecordPing``, ``RecordError``). The outcome also moves the primary's health record for the entity, as a
send's would (``bridge.delivery.health_record``): the status shows the primary back once a ping got
through, not once the next message went there. Every ping is counted as a billable operation (two in
schedule mode: schedule and cancel).

Bounds: each ping is one pool call, so at most the attempt deadline (twice in schedule mode); pings run on
up to ``PING_THREADS`` threads, and a ping not started within ``ping_timeout`` of the run's start waits for
the next interval. ``ping_due`` with half an interval of slack decides whether an entity is due, so a beat
firing a few milliseconds early still pings, and a second firing in the same interval (another beat, a
redelivered task) does not ping again. Two runs that overlap before either recorded its ping (two beats, a
ping slower than the interval while the next firing comes) ping once: a run pings an entity only under a
claim in Redis, taken just before its ping, that lasts until the ping is recorded (released then) or, if
the run dies, as long as one ping can take (``claim_ms``); a run that wins the claim checks again that the
entity is still due.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bridge.core.cost import Operation
from bridge.core.error_classes import classify
from bridge.core.outcomes import Outcome, describe_error
from bridge.core.paired import on_ping, ping_due
from bridge.delivery.context import DeliveryContext
from bridge.delivery.health_record import record_attempt
from bridge.errors import NamespaceError
from bridge.journal.emit import ping_events
from bridge.observability import metrics
from bridge.paired.entities import paired_entities
from bridge.servicebus.messages import ping_message
from bridge.settings import Settings

log = logging.getLogger(__name__)

PING_THREADS = 8
DUE_SLACK = 0.5
"""Fraction of ``ping_primary_interval`` by which a ping may come early (beat scheduling jitter)."""


@dataclass
class PingReport:
    """What one ping run did: entities pinged, those available again, failures, and those left for later."""

    pinged: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    postponed: list[str] = field(default_factory=list)


def claim_ms(settings: Settings) -> int:
    """How long a ping claim lasts if its run never releases it (the run died): the longest one ping takes
    to be recorded (each send bounded by the attempt deadline, two in schedule mode), and never less than
    the rest of the interval. A run claims an entity just before pinging it, so a killed worker delays the
    entity's next ping by one ping's bound, not by a whole run's (``ping_timeout``)."""
    paired = settings.paired
    sends = 2 if paired.ping_mode == "schedule" else 1
    longest = sends * settings.retry.attempt_deadline + 1.0
    return int(max(longest, (1 - DUE_SLACK) * paired.ping_primary_interval) * 1000)


def due_entities(ctx: DeliveryContext) -> list[str]:
    """Failed-over paired entities whose ping is due now."""
    engaged = ctx.paired.failed_over_entities(paired_entities(ctx.settings))
    return [entity for entity in engaged if _due(ctx, entity)]


def _due(ctx: DeliveryContext, entity: str) -> bool:
    policy = ctx.settings.paired.failover_policy()
    now = ctx.clock() + DUE_SLACK * policy.ping_primary_interval
    return ping_due(ctx.paired.get(entity), now, policy)


def _claim(ctx: DeliveryContext, entity: str, token: str) -> bool:
    """Claim ``entity``'s ping for ``token`` (released by the caller once the ping is recorded); False when
    another run is pinging it or recorded its ping between our look and our claim."""
    if not ctx.paired.claim_ping(entity, token, claim_ms(ctx.settings)):
        return False
    if _due(ctx, entity):
        return True
    ctx.paired.release_ping(entity, token)
    return False


def ping_entity(ctx: DeliveryContext, entity: str) -> Outcome:
    """Ping ``entity`` on the primary once, apply the outcome to the shared state and count it."""
    mode = ctx.settings.paired.ping_mode
    message = ping_message(mode, uuid.uuid4().hex, ctx.clock())
    operations = 1
    try:
        if mode == "schedule":
            ctx.pool.schedule_and_cancel("primary", entity, message)
            operations = 2
        else:
            result = ctx.pool.send("primary", entity, [message])
            if result.failed:
                raise next(iter(result.failed.values()))
        outcome = Outcome.success()
    except NamespaceError as error:
        outcome = Outcome.from_classification(classify(error), describe_error(error))
    # Counted before the state changes: whoever sees the entity available again also sees the ping that
    # made it so (the counter and the shared state are two Redis writes, not one).
    ctx.cost.add(entity, Operation.PING, operations)
    now = ctx.clock()
    update = ctx.paired.apply(entity, on_ping(outcome, now))
    back = record_attempt(ctx, entity, "primary", outcome, now=now, what="ping")
    if ctx.journal is not None:
        primary = ctx.settings.primary.namespace_name if ctx.settings.primary else "primary"
        ctx.journal.append(entity, ping_events(primary, outcome, operations, update, now))
    metrics.record_ping(entity, outcome)
    if outcome.ok and (update.restored or back):
        ctx.seen_back("primary", entity, "a ping was accepted")
    if outcome.ok:
        log.info("ping accepted by the primary for %s (restored: %s)", entity, update.restored)
    else:
        log.info("ping of %s failed: %s", entity, outcome.error)
    return outcome


def ping_failed_over(ctx: DeliveryContext) -> PingReport:
    """Ping every failed-over paired entity that is due (one beat firing)."""
    report = PingReport()
    token = uuid.uuid4().hex
    entities = due_entities(ctx)
    if not entities:
        return report
    started = ctx.clock()
    timeout = ctx.settings.paired.ping_timeout

    def one(entity: str) -> None:
        if ctx.clock() - started > timeout:
            report.postponed.append(entity)
            return
        if not _claim(ctx, entity, token):
            return  # another run is pinging it, or has just pinged it
        try:
            outcome = ping_entity(ctx, entity)
        finally:
            # Recorded (or never sent): the next due run may ping. A release that fails leaves the claim to
            # expire after ``claim_ms``.
            ctx.paired.release_ping(entity, token)
        report.pinged.append(entity)
        if outcome.ok:
            report.restored.append(entity)
        else:
            report.failed[entity] = outcome.error or ""

    with ThreadPoolExecutor(max_workers=min(PING_THREADS, len(entities)), thread_name_prefix="ping") as pool:
        for future in [pool.submit(one, entity) for entity in entities]:
            future.result()
    return report
