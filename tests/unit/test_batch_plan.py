"""The batch plan of modes passive, active and none (``bridge.core.batch_plan``): the sends a batch starts
with, the decisions its outcomes make, and the sends those ask for next, as tables (no network)."""

from __future__ import annotations

import pytest

from bridge.core.backoff import BackoffPolicy
from bridge.core.batch_plan import (
    BatchPlan,
    BatchView,
    PlannedSend,
    decide,
    follow_up,
    operation_for,
    plan_batch,
)
from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, SECONDARY, Ack, DeadLetter, Retry, SendNext, Target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.replication import RetryContext
from bridge.core.roles import RoleState, Swap
from bridge.errors import InvariantError

OK = Outcome.success()
BUSY = Outcome.failure(ErrorClass.TRANSIENT, "busy")
DOWN = Outcome.failure(ErrorClass.OUTAGE, "refused")
TOO_BIG = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "too big")
# draw 0.5 and attempt 2 with factor 0.5: ceiling 2.0, delay 1.0
RETRY = RetryContext(now=100.0, attempt=2, backoff=BackoffPolicy(0.5, 30.0), rand=lambda: 0.5)
DELAY = 1.0
ALL = (PRIMARY, SECONDARY)


def _send(target: Target, *members: int) -> PlannedSend:
    return PlannedSend(target, operation_for(target), members)


# ---- the first sends


@pytest.mark.parametrize(
    ("view", "sends", "shared", "warm"),
    [
        # none: the whole batch to the primary, whatever the roles say
        (BatchView("none", 3, roles=RoleState("secondary", 4)), (_send(PRIMARY, 0, 1, 2),), False, None),
        # passive: the whole batch to the active namespace; the backup's link kept open
        (BatchView("passive", 2, roles=RoleState("primary")), (_send(PRIMARY, 0, 1),), False, "secondary"),
        (BatchView("passive", 1, roles=RoleState("secondary", 1)), (_send(SECONDARY, 0),), False, "primary"),
        # active, nothing delivered before: both namespaces, the same entries, packed once
        (BatchView("active", 2), (_send(PRIMARY, 0, 1), _send(SECONDARY, 0, 1)), True, None),
        # active: each entry only where it has not landed yet
        (
            BatchView("active", 3, delivered=((PRIMARY,), (), (SECONDARY,))),
            (_send(PRIMARY, 1, 2), _send(SECONDARY, 0, 1)),
            False,
            None,
        ),
        # active: landed everywhere already (policy "all" retried): nothing to send
        (BatchView("active", 1, delivered=(ALL,), policy="all"), (), True, None),
        # an empty batch sends nothing
        (BatchView("passive", 0, roles=RoleState()), (), False, None),
    ],
)
def test_first_sends(view: BatchView, sends: tuple[PlannedSend, ...], shared: bool, warm: str | None) -> None:
    plan = plan_batch(view)
    assert plan == BatchPlan(view, sends, shared=shared, warm=warm)  # type: ignore[arg-type]


def test_a_send_costs_a_primary_send_only_on_the_primary() -> None:
    # Given a passive entity failed over to the secondary: its sends are backup sends (billed as such)
    plan = plan_batch(BatchView("passive", 1, roles=RoleState("secondary", 1)))
    assert plan.sends[0].operation is Operation.BACKUP_SEND
    assert operation_for(PRIMARY) is Operation.PRIMARY_SEND


def test_a_passive_batch_needs_its_roles_and_an_active_one_matching_records() -> None:
    with pytest.raises(InvariantError):
        plan_batch(BatchView("passive", 1))
    with pytest.raises(InvariantError):
        plan_batch(BatchView("active", 2, delivered=((),)))


# ---- decisions and what they ask for next


def test_none_acks_dead_letters_and_retries_per_entry() -> None:
    plan = plan_batch(BatchView("none", 3))
    decisions = decide(plan, [{PRIMARY: OK}, {PRIMARY: TOO_BIG}, {PRIMARY: BUSY}], RETRY)
    assert decisions[0] == Ack((PRIMARY,))
    assert isinstance(decisions[1], DeadLetter)
    assert decisions[2] == Retry(DELAY, "transient on primary: busy", (PRIMARY,))
    assert follow_up(decisions, [{PRIMARY: OK}, {PRIMARY: TOO_BIG}, {PRIMARY: BUSY}]) == ()


def test_passive_fails_over_only_what_the_active_namespace_lost_to_an_outage() -> None:
    # Given a batch of three on a primary that accepts the first, is down for the second, busy for the third
    roles = RoleState("primary", 7)
    plan = plan_batch(BatchView("passive", 3, roles=roles))
    outcomes: list[dict[Target, Outcome]] = [{PRIMARY: OK}, {PRIMARY: DOWN}, {PRIMARY: BUSY}]
    # When the first round is decided
    first = decide(plan, outcomes, RETRY)
    # Then only the entry lost to the outage goes on, to the backup, in one more send
    assert isinstance(first[1], SendNext)
    assert follow_up(first, outcomes) == (_send(SECONDARY, 1),)
    # And once the backup accepted it, it is acknowledged there with a swap of the observed epoch
    outcomes[1][SECONDARY] = OK
    second = decide(plan, outcomes, RETRY)
    assert second[0] == Ack((PRIMARY,))
    assert isinstance(second[1], Ack) and second[1].delivered_to == (SECONDARY,)
    (swap,) = second[1].changes
    assert isinstance(swap, Swap) and swap.to_role == "secondary" and swap.expected_epoch == 7
    assert second[2] == Retry(DELAY, "transient on primary: busy", (PRIMARY,))
    assert follow_up(second, outcomes) == ()


def test_passive_on_the_secondary_fails_over_back_to_the_primary() -> None:
    # Given an entity whose active namespace is the secondary, down for this entry
    plan = plan_batch(BatchView("passive", 1, roles=RoleState("secondary", 3)))
    outcomes: list[dict[Target, Outcome]] = [{SECONDARY: DOWN}]
    # Then the entry goes on to the primary, its backup
    (first,) = decide(plan, outcomes, RETRY)
    assert isinstance(first, SendNext) and first.targets == (PRIMARY,)
    assert follow_up((first,), outcomes) == (_send(PRIMARY, 0),)
    # And once the primary accepted it, it is acknowledged there with a swap back to the primary
    outcomes[0][PRIMARY] = OK
    (second,) = decide(plan, outcomes, RETRY)
    assert isinstance(second, Ack) and second.delivered_to == (PRIMARY,)
    (swap,) = second.changes
    assert isinstance(swap, Swap) and swap.to_role == "primary" and swap.expected_epoch == 3


def test_passive_retries_when_both_namespaces_fail() -> None:
    plan = plan_batch(BatchView("passive", 1, roles=RoleState("secondary", 2)))
    outcomes: list[dict[Target, Outcome]] = [{SECONDARY: DOWN, PRIMARY: DOWN}]
    (decision,) = decide(plan, outcomes, RETRY)
    assert isinstance(decision, Retry) and decision.pending == (SECONDARY,)
    assert follow_up((decision,), outcomes) == ()


@pytest.mark.parametrize(
    ("policy", "delivered", "outcomes", "expected"),
    [
        ("any", (), {PRIMARY: OK, SECONDARY: DOWN}, Ack((PRIMARY,))),
        (
            "all",
            (),
            {PRIMARY: OK, SECONDARY: DOWN},
            Retry(DELAY, "secondary: refused", (SECONDARY,), (PRIMARY,)),
        ),
        # landed on the secondary before: only the primary was sent to this time
        ("all", (SECONDARY,), {PRIMARY: OK}, Ack(ALL)),
        # landed everywhere before: nothing sent, acknowledged from the record alone
        ("all", ALL, {}, Ack(ALL)),
    ],
)
def test_active_decides_from_this_batch_and_what_landed_before(
    policy: str, delivered: tuple[Target, ...], outcomes: dict[Target, Outcome], expected: object
) -> None:
    plan = plan_batch(BatchView("active", 1, delivered=(delivered,), policy=policy))  # type: ignore[arg-type]
    assert decide(plan, [outcomes], RETRY) == (expected,)
    assert follow_up(decide(plan, [outcomes], RETRY), [outcomes]) == ()


def test_outcomes_must_match_the_plan() -> None:
    plan = plan_batch(BatchView("none", 2))
    with pytest.raises(InvariantError):
        decide(plan, [{PRIMARY: OK}], RETRY)
    with pytest.raises(InvariantError):
        decide(plan, [{PRIMARY: OK}, {SECONDARY: OK}], RETRY)  # the primary never answered for the second


def test_a_decision_never_sends_an_entry_twice_to_one_target_in_a_batch() -> None:
    with pytest.raises(InvariantError):
        follow_up([SendNext((SECONDARY,))], [{PRIMARY: DOWN, SECONDARY: DOWN}])
