"""One outbox batch in mode ``passive``, ``active`` or ``none``, decided around its sends
(docs/replication.md).

The adapter (``bridge.delivery.modes.planned``) gathers a ``BatchView``, calls ``plan_batch``, makes the
plan's sends at once, and hands every entry's outcomes so far to ``decide``; ``follow_up`` says which sends
the decisions still ask for (passive mode's failover to the backup), and the adapter repeats until there are
none. Paired mode decides its batches in ``bridge.core.paired_plan``.

- ``none``: one send of the batch to the primary; a failure waits in the outbox with backoff
  (``replication.decide_single``).
- ``passive``: one send to the active namespace of the roles observed for the batch; the entries that failed
  with an outage or configuration error go to the backup in one more send, in batch order; a backup that
  accepts swaps the roles (``replication.decide_passive``). The backup's link is kept open (``warm``), so
  the first send of a failover finds a live link.
- ``active``: every entry to each namespace that has not accepted it yet (``delivered``: where each entry
  landed on an earlier try), both sends at once; ``success_policy`` "any" acknowledges when one accepted,
  "all" when both did (``replication.decide_active``). When both namespaces get the same entries, the
  messages are packed once for both (``shared``).

A send to the primary counts as a primary send, any other as a backup send (``cost.Operation``), whichever
namespace holds the active role.

Pure: no I/O; ``now``, the retry count and the random source come in ``RetryContext``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, SECONDARY, SendDecision, SendNext, Target, role_target
from bridge.core.outcomes import Outcome
from bridge.core.replication import (
    RetryContext,
    SuccessPolicy,
    decide_active,
    decide_passive,
    decide_single,
)
from bridge.core.roles import Role, RoleState
from bridge.errors import InvariantError

PlanMode = Literal["passive", "active", "none"]

EntryOutcomes = Mapping[Target, Outcome]
"""One entry's outcomes so far in this batch, by where it was sent."""


@dataclass(frozen=True)
class BatchView:
    """What the plan needs to know of the batch: its mode and size, and per mode what was read for it.

    ``roles``: the entity's roles observed for the batch (passive). ``delivered``: per batch position, where
    the entry was accepted on an earlier try (active; empty: nowhere yet). ``policy``: active mode's
    ``success_policy``.
    """

    mode: PlanMode
    size: int
    roles: RoleState | None = None
    delivered: tuple[tuple[Target, ...], ...] = ()
    policy: SuccessPolicy = "any"


@dataclass(frozen=True)
class PlannedSend:
    """One batched send: the entries at batch positions ``members``, in batch order, to ``target``."""

    target: Target
    operation: Operation
    members: tuple[int, ...]


@dataclass(frozen=True)
class BatchPlan:
    """What to do with one batch before anything is sent: ``sends``, made at once, in this order.

    ``shared``: every send carries the same entries, so their messages are packed once for all of them.
    ``warm``: a namespace whose link to the entity is opened (or kept open) before the sends (passive's
    backup).
    """

    view: BatchView
    sends: tuple[PlannedSend, ...]
    shared: bool = False
    warm: Role | None = None


def operation_for(target: Target) -> Operation:
    """What a send to ``target`` costs: a primary send to the primary, else a backup send."""
    return Operation.PRIMARY_SEND if target == PRIMARY else Operation.BACKUP_SEND


def _send(target: Target, members: Sequence[int]) -> PlannedSend:
    return PlannedSend(target, operation_for(target), tuple(members))


def plan_batch(view: BatchView) -> BatchPlan:
    """The first sends of a batch (see the module docstring); none for an empty batch."""
    everything = tuple(range(view.size))
    if view.size == 0:
        return BatchPlan(view, ())
    if view.mode == "none":
        return BatchPlan(view, (_send(PRIMARY, everything),))
    if view.mode == "passive":
        roles = _roles(view)
        return BatchPlan(view, (_send(role_target(roles.active), everything),), warm=roles.backup)
    if view.delivered and len(view.delivered) != view.size:
        raise InvariantError("active mode's delivered targets do not match the batch")
    todos = {
        target: tuple(i for i in everything if target not in _delivered(view, i))
        for target in (PRIMARY, SECONDARY)
    }
    sends = tuple(_send(target, todo) for target, todo in todos.items() if todo)
    return BatchPlan(view, sends, shared=todos[PRIMARY] == todos[SECONDARY])


def decide(
    plan: BatchPlan, outcomes: Sequence[EntryOutcomes], retry: RetryContext
) -> tuple[SendDecision, ...]:
    """Each entry's decision from its outcomes so far; a ``SendNext`` asks for one more send
    (``follow_up``). An entry the plan sent nowhere (active: accepted everywhere it must be already)
    is decided from what it reached before."""
    view = plan.view
    if len(outcomes) != view.size:
        raise InvariantError("the batch's outcomes do not match its plan")
    if view.mode == "none":
        return tuple(decide_single(_outcome(o, PRIMARY), retry, PRIMARY) for o in outcomes)
    if view.mode == "active":
        return tuple(
            decide_active(o, view.policy, retry, _delivered(view, i)) for i, o in enumerate(outcomes)
        )
    roles = _roles(view)
    active, backup = role_target(roles.active), role_target(roles.backup)
    return tuple(decide_passive(roles, _outcome(o, active), o.get(backup), retry) for o in outcomes)


def follow_up(
    decisions: Sequence[SendDecision], outcomes: Sequence[EntryOutcomes]
) -> tuple[PlannedSend, ...]:
    """The sends the decisions ask for (``SendNext``), one per target, each entry in batch order; a target
    an entry was already sent to in this batch is never asked again (that is a bug in the decision)."""
    members: dict[Target, list[int]] = {}
    for position, decision in enumerate(decisions):
        if not isinstance(decision, SendNext):
            continue
        for target in decision.targets:
            if target in outcomes[position]:
                raise InvariantError(f"a decision sends an entry to {target} again in the same batch")
            members.setdefault(target, []).append(position)
    return tuple(_send(target, positions) for target, positions in members.items())


def _roles(view: BatchView) -> RoleState:
    if view.roles is None:
        raise InvariantError("a passive batch was planned without the entity's roles")
    return view.roles


def _delivered(view: BatchView, position: int) -> tuple[Target, ...]:
    return view.delivered[position] if view.delivered else ()


def _outcome(outcomes: EntryOutcomes, target: Target) -> Outcome:
    found = outcomes.get(target)
    if found is None:
        raise InvariantError(f"an entry of the batch has no outcome from {target}")
    return found
