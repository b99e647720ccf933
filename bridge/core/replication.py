"""Replication per entity (docs/replication.md): where a message goes and what its outcomes mean for the
outbox.

A worker loop for one outbox entry, whatever the mode::

    decision = plan(...)                       # SendNext: the first targets
    while isinstance(decision, SendNext):
        outcomes = send to decision.targets    # each failure classified and escalated first
        decision = decide_<mode>(..., outcomes)
    apply decision.changes to Redis; then Ack / DeadLetter / Retry the outbox entry

Modes:

- ``passive`` (default): the active namespace; on an outage or configuration failure the backup, right away;
  if the backup accepts, roles swap (``roles.decide_roles``, CAS on the observed epoch). Both failing
  leaves roles alone and the entry in the outbox (``Retry`` with capped, jittered backoff).
- ``active``: both namespaces with the same MessageId; ``success_policy`` "any" acknowledges when one
  accepted, "all" when both did (retrying only the one still missing).
- ``none``: the primary only, still durable and retried.
- ``paired``: decided a whole batch at a time by ``paired_plan.plan_batch`` (the FailoverInterval timer,
  backlog queues, keys held back, restore barriers; docs/paired.md), not per message here.

Error classes decide: TRANSIENT retries the same namespace after a backoff; OUTAGE and CONFIGURATION fail
over (CONFIGURATION also raises an alert); MESSAGE_PERMANENT dead-letters locally, never retried forever.
Outcomes must carry the *escalated* class (``error_classes.escalate``) so a namespace that keeps answering
busy eventually counts as down.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from bridge.core.backoff import BackoffPolicy, Rand
from bridge.core.decisions import (
    PRIMARY,
    SECONDARY,
    Ack,
    Change,
    DeadLetter,
    Retry,
    SendDecision,
    SendNext,
    Target,
    role_target,
)
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.roles import Role, RoleState, Swap, decide_roles

Mode = Literal["passive", "active", "paired", "none"]
SuccessPolicy = Literal["any", "all"]

_FAILOVER = frozenset({ErrorClass.OUTAGE, ErrorClass.CONFIGURATION})


@dataclass(frozen=True)
class RetryContext:
    """The clock, the entry's retry count (0 on its first delivery) and the backoff with its random source."""

    now: float
    attempt: int
    backoff: BackoffPolicy
    rand: Rand

    def delay(self) -> float:
        """The backoff before this entry's next try."""
        return self.backoff.delay(self.attempt, self.rand)


def _alerts(*pairs: tuple[Target, Outcome | None]) -> tuple[str, ...]:
    return tuple(
        f"configuration error on {target}: {outcome.error}"
        for target, outcome in pairs
        if outcome is not None and outcome.error_class is ErrorClass.CONFIGURATION
    )


def plan(mode: Literal["passive", "active", "none"], roles: RoleState) -> SendNext:
    """The first targets of a message in the non-paired modes (paired: ``paired_plan.plan_batch``)."""
    if mode == "passive":
        return SendNext((role_target(roles.active),), "active namespace")
    if mode == "active":
        return SendNext((PRIMARY, SECONDARY), "active replication")
    return SendNext((PRIMARY,), "single namespace")


def linked_roles(mode: str) -> tuple[Role, ...]:
    """The namespaces whose link to the entity itself a shard of ``mode`` may send through next: both for
    ``passive`` (the active one and the backup) and ``active``; the primary for ``none`` and ``paired``
    (paired's failover goes to backlog queues, other entities). What is worth reopening after an outage."""
    return ("primary", "secondary") if mode in ("passive", "active") else ("primary",)


def links_to_reopen(modes: Mapping[str, str], max_senders: int) -> list[tuple[Role, str]]:
    """The (namespace, entity) links to make again when a namespace is seen back, given the woken shards'
    entities and their modes (``linked_roles``): those of at most half of ``max_senders`` entities, in name
    order, since a client keeps ``max_senders`` links and more would evict ones made a moment ago."""
    most = max(1, max_senders // 2)
    return [(role, entity) for entity in sorted(modes)[:most] for role in linked_roles(modes[entity])]


def decide_single(outcome: Outcome, ctx: RetryContext, target: Target = PRIMARY) -> SendDecision:
    """Mode ``none``: acknowledge, dead-letter a message-permanent failure, else retry with backoff."""
    if outcome.ok:
        return Ack((target,))
    alerts = _alerts((target, outcome))
    if outcome.error_class is ErrorClass.MESSAGE_PERMANENT:
        return DeadLetter(f"message_permanent on {target}: {outcome.error}", alerts=alerts)
    return Retry(
        ctx.delay(), f"{outcome.failed_with.value} on {target}: {outcome.error}", (target,), alerts=alerts
    )


def decide_passive(
    observed: RoleState,
    active: Outcome,
    backup: Outcome | None,
    ctx: RetryContext,
    current: RoleState | None = None,
) -> SendDecision:
    """Mode ``passive``: the outcome on the active namespace, and on the backup once it was tried.

    ``observed`` is the role state the worker read before sending; ``current`` a fresher read if it has one
    (the swap is still compare-and-swapped on ``observed.epoch`` when the adapter applies it).
    """
    active_target = role_target(observed.active)
    backup_target_ = role_target(observed.backup)
    alerts = _alerts((active_target, active), (backup_target_, backup))
    if active.ok:
        return Ack((active_target,))
    if active.error_class not in _FAILOVER:
        return decide_single(active, ctx, active_target)
    if backup is None:
        return SendNext(
            (backup_target_,), f"{active.failed_with.value} on {active_target}: {active.error}", alerts=alerts
        )
    if backup.ok:
        decision = decide_roles(
            current or observed, observed.epoch, active, backup, now=ctx.now, retry_after=0.0
        )
        # Stale: another worker already moved the roles; the message is delivered, nothing to swap.
        changes: tuple[Change, ...] = (decision,) if isinstance(decision, Swap) else ()
        return Ack((backup_target_,), changes=changes, alerts=alerts)
    if backup.error_class is ErrorClass.MESSAGE_PERMANENT:
        reason = f"message_permanent on {backup_target_} while {active_target} is down: {backup.error}"
        return DeadLetter(reason, alerts=alerts)
    reason = f"both namespaces failed: {active_target}: {active.error}; {backup_target_}: {backup.error}"
    return Retry(ctx.delay(), reason, (active_target,), alerts=alerts)


def decide_active(
    outcomes: Mapping[Target, Outcome],
    success_policy: SuccessPolicy,
    ctx: RetryContext,
    delivered_before: Iterable[Target] = (),
) -> SendDecision:
    """Mode ``active``: outcomes of the parallel sends (only the targets tried this time).

    ``delivered_before`` are targets that accepted this entry on an earlier try (from ``Retry.delivered_to``).
    """
    delivered = tuple(sorted({*delivered_before, *(t for t, o in outcomes.items() if o.ok)}))
    alerts = _alerts(*outcomes.items())
    required = {PRIMARY, SECONDARY} if success_policy == "all" else None
    if (required is None and delivered) or (required is not None and required <= set(delivered)):
        return Ack(delivered, alerts=alerts)
    failed = {t: o for t, o in outcomes.items() if not o.ok}
    permanent = sorted(t for t, o in failed.items() if o.error_class is ErrorClass.MESSAGE_PERMANENT)
    reasons = "; ".join(f"{t}: {o.error}" for t, o in sorted(failed.items()))
    missing = sorted({PRIMARY, SECONDARY} - set(delivered))
    if permanent and (success_policy == "all" or set(missing) <= set(permanent)):
        return DeadLetter(f"message_permanent: {reasons}", delivered_to=delivered, alerts=alerts)
    pending = tuple(t for t in missing if t not in permanent)
    return Retry(ctx.delay(), reasons or "not yet delivered", pending, delivered_to=delivered, alerts=alerts)
