"""One attempt that is not a send of the outbox (a probe, a ping) applied to a namespace's health record.

A probe of a namespace without traffic and a paired entity's ping of its primary are attempts on that
namespace like any send: their outcome moves the record ``bridge status`` shows (``next_health``: a success
makes it available, an outage or configuration error unavailable, an attempt older than the record's last
change nothing). Without it a paired entity restored by its ping showed its primary down until the next
message went there, for as long as none did.
"""

from __future__ import annotations

import logging

from bridge.core.outcomes import Outcome
from bridge.core.roles import Role, next_health
from bridge.delivery.context import DeliveryContext
from bridge.observability import transitions

log = logging.getLogger(__name__)


def record_attempt(
    ctx: DeliveryContext, entity: str, role: Role, outcome: Outcome, *, now: float, what: str
) -> bool:
    """Apply ``outcome`` of the attempt ``what`` (``probe``, ``ping``) made at ``now``; True when it made
    the namespace available again (the caller announces it: ``DeliveryContext.seen_back``)."""
    before = ctx.roles.health(entity, role)
    after = next_health(before, outcome, now)
    if after is before or not ctx.roles.set_health(entity, role, after):
        return False
    if after.available == before.available:
        return False
    log.warning(
        "%s: namespace %s is %s for entity %s: %s",
        what,
        role,
        "available" if after.available else "UNAVAILABLE",
        entity,
        outcome.error or "ok",
    )
    transitions.availability_changed(entity, role, after.available, outcome.error or "ok")
    return after.available
