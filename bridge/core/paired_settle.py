"""Settling one paired-mode batch once its sends answered (``bridge.core.paired_plan`` decided it).

``settle_batch`` turns each entry's outcome into its ``Settlement``: the primary's outcomes start, engage or
end the FailoverInterval timer; a backlog queue that failed leaves the rotation for every worker and its
keyed messages wait for it (ordered), the others try another queue shortly; a message a backlog queue
refuses for good waits for the primary. The plan's changes ride on every settlement of the batch.

Pure: no I/O; ``now`` comes in the view's ``RetryContext``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from bridge.core.decisions import PRIMARY, Ack, Change, DeadLetter, Hold, Retry, Settlement, backlog_target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.paired import (
    apply_changes,
    on_backlog_failure,
    on_primary_failure,
    on_primary_success,
    seconds_until_failover,
)
from bridge.core.paired_plan import (
    QUEUE_AWAITS,
    REFUSED_HOLD,
    REROUTE_DELAY,
    BacklogSend,
    PairedPlan,
    PairedView,
    hold_delay,
)
from bridge.errors import InvariantError


@dataclass(frozen=True)
class CurrentBacklog:
    """This worker's current backlog queue after one send: ``index`` becomes it (``adopt``), or, when the
    queue failed, stops being it if it still is (another thread of the process may have moved on)."""

    index: int
    adopt: bool


@dataclass(frozen=True)
class SettledBatch:
    """Every entry's settlement, by position, and the updates of this worker's current backlog queue."""

    settlements: tuple[Settlement, ...]
    current: tuple[CurrentBacklog, ...] = ()


def settle_batch(plan: PairedPlan, view: PairedView, outcomes: Mapping[int, Outcome]) -> SettledBatch:
    """Every entry settled, now that the plan's sends answered: ``outcomes`` by batch position, one for
    every entry the plan sent (to the primary or a backlog queue)."""
    settled: dict[int, Settlement] = dict(plan.decided)
    for position in plan.to_primary:
        settled[position] = _after_primary(view, _outcome(outcomes, position))
    current: list[CurrentBacklog] = []
    for send in plan.to_backlog:
        failed = False
        for position in send.members:
            outcome = _outcome(outcomes, position)
            settled[position] = _after_backlog(view, send, plan.keys[position], outcome)
            failed = failed or (not outcome.ok and outcome.error_class is not ErrorClass.MESSAGE_PERMANENT)
        if failed:
            current.append(CurrentBacklog(send.index, adopt=False))
        if _outcome(outcomes, send.members[0]).ok:
            current.append(CurrentBacklog(send.index, adopt=True))
    missing = [p for p in range(len(plan.keys)) if p not in settled]
    if missing:
        raise InvariantError(f"entries {missing} of the batch were left without a settlement")
    ordered = (settled[p] for p in range(len(plan.keys)))
    return SettledBatch(tuple(_with_changes(s, plan.changes) for s in ordered), tuple(current))


def _outcome(outcomes: Mapping[int, Outcome], position: int) -> Outcome:
    outcome = outcomes.get(position)
    if outcome is None:
        raise InvariantError(f"entry {position} of the batch was sent but has no outcome")
    return outcome


def _after_primary(view: PairedView, outcome: Outcome) -> Settlement:
    """A primary send's outcome: the FailoverInterval timer starts, engages or ends with it."""
    now, state = view.retry.now, view.state
    if outcome.ok:
        return Ack((PRIMARY,), changes=on_primary_success(state, now))
    alerts = (
        (f"configuration error on primary: {outcome.error}",)
        if outcome.error_class is ErrorClass.CONFIGURATION
        else ()
    )
    if outcome.error_class is ErrorClass.MESSAGE_PERMANENT:
        return DeadLetter(f"message_permanent on primary: {outcome.error}", alerts=alerts)
    changes = on_primary_failure(state, outcome, now, view.policy)
    delay = view.retry.delay()
    left = seconds_until_failover(apply_changes(state, changes), now, view.policy)
    if left is not None:
        delay = min(delay, left)  # 0 once failover engaged: the next round goes to the backlog
    reason = f"{outcome.failed_with.value} on primary: {outcome.error}"
    return Retry(delay, reason, (PRIMARY,), changes=changes, alerts=alerts)


def _after_backlog(view: PairedView, send: BacklogSend, key: str | None, outcome: Outcome) -> Settlement:
    """A backlog send's outcome for one entry: acknowledged, or its key waits (it was not delivered)."""
    if outcome.ok:
        return Ack((backlog_target(send.path),))
    if outcome.error_class is ErrorClass.MESSAGE_PERMANENT:
        return Hold(
            view.policy.ping_primary_interval, f"rejected by backlog queue {send.index}: {outcome.error}"
        )
    now = view.retry.now
    removal = on_backlog_failure(send.index, outcome, now)
    # A key that sticks to the queue waits for it; any other message goes to another queue shortly (the
    # failed one has left the rotation just now).
    sticks = view.ordered and key is not None
    delay = hold_delay(view, now) if sticks else REROUTE_DELAY
    if outcome.address_refused:
        delay = min(delay, REFUSED_HOLD)  # decided again soon: the address may accept again
    return Hold(
        delay,
        f"backlog queue {send.index} failed: {outcome.error}",
        changes=() if removal is None else (removal,),
        awaits=QUEUE_AWAITS,
    )


def _with_changes(settlement: Settlement, changes: tuple[Change, ...]) -> Settlement:
    if not changes:
        return settlement
    return replace(settlement, changes=(*changes, *settlement.changes))
