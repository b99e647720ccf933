"""Probing the namespaces that carry no traffic for an entity (passive backup, active mode), so that
``bridge status`` shows availability as a measurement with its time (``bridge.core.probing``).

The probe is the cheapest operation that proves a namespace takes messages for the entity without any
receiver ever seeing one: a message scheduled a year ahead and cancelled at once (two billable operations,
counted as ``probes``; it works for queues and topics, and carries a random SessionId so session entities
accept it). Its outcome updates the namespace's health record as a send's would
(``bridge.delivery.health_record``: a success makes it available, an outage or configuration error
unavailable) and is kept with its time (``bridge.state.probes``). Roles never change because of a probe:
passive mode still swaps only when the active namespace fails.

Bounds: each probe is one pool call under the attempt deadline (two, schedule and cancel); probes run on up
to ``PROBE_THREADS`` threads per beat firing.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from bridge.core.cost import Operation
from bridge.core.error_classes import classify
from bridge.core.outcomes import Outcome, describe_error
from bridge.core.probing import probe_due, probe_roles
from bridge.core.roles import Role
from bridge.delivery.context import DeliveryContext
from bridge.delivery.health_record import record_attempt
from bridge.errors import NamespaceError
from bridge.servicebus.messages import ping_message
from bridge.state.probes import ProbeRecord, ProbeStore

log = logging.getLogger(__name__)

PROBE_THREADS = 8


@dataclass
class ProbeReport:
    """What one probe run did: ``<entity>:<role>`` probed, and the failures with their errors."""

    probed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def probe_namespace(ctx: DeliveryContext, entity: str, role: Role) -> Outcome:
    """Probe ``role`` for ``entity`` once: schedule and cancel, record the outcome and count it."""
    message = ping_message("schedule", uuid.uuid4().hex, ctx.clock())
    try:
        ctx.pool.schedule_and_cancel(role, entity, message)
        outcome = Outcome.success()
    except NamespaceError as error:
        outcome = Outcome.from_classification(classify(error), describe_error(error))
    now = ctx.clock()
    ctx.cost.add(entity, Operation.PROBE, 2)
    ProbeStore(ctx.redis).record(entity, role, ProbeRecord(now, outcome.ok, outcome.error))
    if record_attempt(ctx, entity, role, outcome, now=now, what="probe"):
        ctx.seen_back(role, entity, "a probe was accepted")
    return outcome


def due_probes(ctx: DeliveryContext, entities: list[str], interval: float) -> list[tuple[str, Role]]:
    """The (entity, namespace) pairs whose probe is due now."""
    settings = ctx.settings
    configured: dict[Role, bool] = {
        "primary": settings.primary is not None,
        "secondary": settings.secondary is not None,
    }
    store = ProbeStore(ctx.redis)
    now = ctx.clock()
    out: list[tuple[str, Role]] = []
    for entity in entities:
        roles = probe_roles(settings.entity(entity).replication, ctx.roles.get(entity), configured)
        if not roles:
            continue
        last = store.last(entity)
        for role in roles:
            record = last[role]
            if probe_due(record.at if record else None, now, interval):
                out.append((entity, role))
    return out


def probe_standbys(ctx: DeliveryContext, entities: list[str]) -> ProbeReport:
    """Probe every due namespace of ``entities`` (one beat firing); nothing when probing is off."""
    report = ProbeReport()
    interval = ctx.settings.workers.probe_interval
    if interval is None:
        return report
    due = due_probes(ctx, entities, interval)
    if not due:
        return report

    def one(entity: str, role: Role) -> None:
        outcome = probe_namespace(ctx, entity, role)
        name = f"{entity}:{role}"
        report.probed.append(name)
        if not outcome.ok:
            report.failed[name] = outcome.error or ""

    with ThreadPoolExecutor(max_workers=min(PROBE_THREADS, len(due)), thread_name_prefix="probe") as pool:
        for future in [pool.submit(one, entity, role) for entity, role in due]:
            future.result()
    return report
