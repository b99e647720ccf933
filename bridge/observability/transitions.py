"""State transitions, counted and reported: one call at each place where the bridge changes state.

Failover, role swap, restore, a namespace becoming (un)available for an entity, a backlog queue leaving the
rotation, quarantine and local dead-lettering. The caller logs the transition at WARNING with its reason
(so the log line stays next to the code that decided it); this module adds the Prometheus counter and the
Sentry breadcrumb, and for failovers, swaps and restores a Sentry event tagged with entity and namespace.
Reasons come from ``describe_error``/``scrub_secrets`` upstream and are scrubbed again by Sentry's hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bridge.observability import metrics
from bridge.observability.sentry import transition_event

log = logging.getLogger(__name__)


def role_swapped(entity: str, to_namespace: str, reason: str) -> None:
    """Passive replication: the roles swapped; ``to_namespace`` is active now."""
    metrics.FAILOVERS.labels(entity, "swap").inc()
    transition_event("swap", entity, to_namespace, reason, event=True)


def failover_engaged(entity: str, reason: str) -> None:
    """Paired mode: primary sends stopped, the entity's messages go to the backlog queues."""
    metrics.FAILOVERS.labels(entity, "paired").inc()
    transition_event("failover", entity, "secondary", reason, event=True)


def failover_ended(entity: str, reason: str) -> None:
    """Paired mode: the primary is used again (a ping or a send succeeded)."""
    metrics.RESTORES.labels(entity).inc()
    transition_event("restore", entity, "primary", reason, event=True)


def availability_changed(entity: str, namespace: str, available: bool, reason: str) -> None:
    """A namespace became available or unavailable for the entity."""
    metrics.NAMESPACE_TRANSITIONS.labels(entity, namespace, "1" if available else "0").inc()
    transition_event("available" if available else "unavailable", entity, namespace, reason, event=False)


def rotation_removed(queue: str, reason: str) -> None:
    """A backlog queue left the send rotation for every worker."""
    metrics.ROTATION_REMOVALS.labels(queue).inc()
    transition_event("rotation_removed", queue, "secondary", reason, event=False)


def quarantined(entity: str, source: str, reason: str, count: int = 1) -> None:
    """Entries moved to the quarantine stream (``source``: outbox or redis-door)."""
    metrics.QUARANTINED.labels(entity, source).inc(count)
    transition_event("quarantine", entity, None, reason, event=False)


def dead_lettered(entity: str, reason: str) -> None:
    """A message moved to the local dead-letter stream."""
    metrics.DEAD_LETTERED.labels(entity).inc()
    transition_event("dead_letter", entity, None, reason, event=False)


def problem_stream_full(entity: str, stream: str) -> None:
    """An entry bound for the quarantine or dead-letter stream stays where it is: the stream is full."""
    metrics.PROBLEM_STREAM_FULL.labels(entity, stream).inc()


def redis_door_moved(entity: str, moved: int, duplicates: int, problems: Sequence[tuple[str, str]]) -> None:
    """One Redis-door move: stored and duplicate counts, and each quarantined entry (code, reason) logged."""
    metrics.record_redis_door(entity, moved, duplicates, [code for code, _ in problems])
    for code, reason in problems:
        log.warning("entity %s: Redis-door entry quarantined (%s): %s", entity, code, reason)
    if problems:
        quarantined(entity, "redis-door", problems[0][1], len(problems))
