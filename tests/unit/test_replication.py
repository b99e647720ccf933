"""Replication decisions: every mode x outcome combination, as tables (paired mode: test_paired_plan)."""

from __future__ import annotations

import pytest

from bridge.core.backoff import BackoffPolicy
from bridge.core.decisions import (
    PRIMARY,
    SECONDARY,
    Ack,
    DeadLetter,
    Retry,
    SendNext,
    Target,
    backlog_target,
    role_target,
)
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.replication import (
    RetryContext,
    decide_active,
    decide_passive,
    decide_single,
    linked_roles,
    links_to_reopen,
    plan,
)
from bridge.core.roles import RoleState, Swap

OK = Outcome.success()
BUSY = Outcome.failure(ErrorClass.TRANSIENT, "busy")
DOWN = Outcome.failure(ErrorClass.OUTAGE, "refused")
AUTH = Outcome.failure(ErrorClass.CONFIGURATION, "bad key")
TOO_BIG = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "too big")

NOW = 5_000.0
# draw 0.5 and attempt 2 with factor 0.5: ceiling 2.0, delay 1.0
CTX = RetryContext(now=NOW, attempt=2, backoff=BackoffPolicy(0.5, 30.0), rand=lambda: 0.5)
DELAY = 1.0


def test_plans_for_the_simple_modes() -> None:
    assert plan("passive", RoleState("primary")).targets == (PRIMARY,)
    assert plan("passive", RoleState("secondary", 3)).targets == (SECONDARY,)
    assert plan("active", RoleState()).targets == (PRIMARY, SECONDARY)
    assert plan("none", RoleState("secondary")).targets == (PRIMARY,)
    assert str(backlog_target("ns/x-servicebus-transfer/1")) == "secondary:ns/x-servicebus-transfer/1"
    assert role_target("secondary") == Target("secondary")


# ---- none


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (OK, Ack((PRIMARY,))),
        (BUSY, Retry(DELAY, "transient on primary: busy", (PRIMARY,))),
        (DOWN, Retry(DELAY, "outage on primary: refused", (PRIMARY,))),
        (
            AUTH,
            Retry(
                DELAY,
                "configuration on primary: bad key",
                (PRIMARY,),
                alerts=("configuration error on primary: bad key",),
            ),
        ),
        (TOO_BIG, DeadLetter("message_permanent on primary: too big")),
    ],
)
def test_single_namespace_table(outcome: Outcome, expected: object) -> None:
    assert decide_single(outcome, CTX) == expected


# ---- passive

OBSERVED = RoleState("primary", 4)


@pytest.mark.parametrize(
    ("active", "backup", "expected_type", "delivered_to"),
    [
        (OK, None, Ack, (PRIMARY,)),
        (BUSY, None, Retry, ()),
        (TOO_BIG, None, DeadLetter, ()),
        (DOWN, None, SendNext, ()),
        (AUTH, None, SendNext, ()),
        (DOWN, OK, Ack, (SECONDARY,)),
        (AUTH, OK, Ack, (SECONDARY,)),
        (DOWN, DOWN, Retry, ()),
        (DOWN, BUSY, Retry, ()),
        (DOWN, AUTH, Retry, ()),
        (AUTH, AUTH, Retry, ()),
        (DOWN, TOO_BIG, DeadLetter, ()),
    ],
)
def test_passive_table(
    active: Outcome, backup: Outcome | None, expected_type: type, delivered_to: tuple[Target, ...]
) -> None:
    decision = decide_passive(OBSERVED, active, backup, CTX)
    assert type(decision) is expected_type
    if isinstance(decision, Ack):
        assert decision.delivered_to == delivered_to
    if isinstance(decision, SendNext):
        assert decision.targets == (SECONDARY,)
    if isinstance(decision, Retry):
        assert decision.retry_after == DELAY
        assert decision.pending == (PRIMARY,)
        assert decision.changes == ()
    configuration_seen = AUTH in (active, backup)
    assert bool(decision.alerts) is configuration_seen


def test_passive_failover_swaps_roles_with_the_observed_epoch() -> None:
    # Given the primary active at epoch 4, refusing connections
    first = decide_passive(OBSERVED, DOWN, None, CTX)
    # Then the same message goes to the secondary at once
    assert first == SendNext((SECONDARY,), "outage on primary: refused")
    # When the secondary accepts
    done = decide_passive(OBSERVED, DOWN, OK, CTX)
    # Then the entry is acked and the roles swap, CAS on epoch 4
    assert done == Ack(
        (SECONDARY,),
        changes=(Swap("primary", "secondary", 4, 5, NOW, "outage on primary: refused"),),
    )


def test_passive_stale_view_acks_without_swapping() -> None:
    current = RoleState("secondary", 5)
    assert decide_passive(OBSERVED, DOWN, OK, CTX, current=current) == Ack((SECONDARY,))


def test_passive_from_the_secondary_swaps_back_to_the_primary() -> None:
    observed = RoleState("secondary", 5)
    decision = decide_passive(observed, DOWN, OK, CTX)
    assert decision == Ack(
        (PRIMARY,), changes=(Swap("secondary", "primary", 5, 6, NOW, "outage on secondary: refused"),)
    )


# ---- active

ACTIVE_TABLE = [
    # primary, secondary, delivered before, policy -> type, delivered_to, pending
    (OK, OK, (), "any", Ack, (PRIMARY, SECONDARY), ()),
    (OK, DOWN, (), "any", Ack, (PRIMARY,), ()),
    (DOWN, OK, (), "any", Ack, (SECONDARY,), ()),
    (BUSY, DOWN, (), "any", Retry, (), (PRIMARY, SECONDARY)),
    (TOO_BIG, DOWN, (), "any", Retry, (), (SECONDARY,)),
    (TOO_BIG, TOO_BIG, (), "any", DeadLetter, (), ()),
    (TOO_BIG, OK, (), "any", Ack, (SECONDARY,), ()),
    (AUTH, AUTH, (), "any", Retry, (), (PRIMARY, SECONDARY)),
    (OK, OK, (), "all", Ack, (PRIMARY, SECONDARY), ()),
    (OK, DOWN, (), "all", Retry, (PRIMARY,), (SECONDARY,)),
    (DOWN, OK, (), "all", Retry, (SECONDARY,), (PRIMARY,)),
    (DOWN, DOWN, (), "all", Retry, (), (PRIMARY, SECONDARY)),
    (OK, TOO_BIG, (), "all", DeadLetter, (PRIMARY,), ()),
    (TOO_BIG, DOWN, (), "all", DeadLetter, (), ()),
]


@pytest.mark.parametrize(
    ("primary", "secondary", "before", "policy", "kind", "delivered", "pending"), ACTIVE_TABLE
)
def test_active_table(
    primary: Outcome,
    secondary: Outcome,
    before: tuple[Target, ...],
    policy: str,
    kind: type,
    delivered: tuple[Target, ...],
    pending: tuple[Target, ...],
) -> None:
    decision = decide_active({PRIMARY: primary, SECONDARY: secondary}, policy, CTX, before)  # type: ignore[arg-type]
    assert type(decision) is kind
    if isinstance(decision, Ack | DeadLetter):
        assert decision.delivered_to == delivered
    if isinstance(decision, Retry):
        assert decision.delivered_to == delivered
        assert decision.pending == pending
        assert decision.retry_after == DELAY


def test_active_all_retries_only_the_missing_namespace_and_then_acks() -> None:
    # Given policy "all" and the secondary down on the first try
    first = decide_active({PRIMARY: OK, SECONDARY: DOWN}, "all", CTX)
    assert isinstance(first, Retry)
    assert first.pending == (SECONDARY,)
    # When the retry sends only to the secondary, and it accepts
    second = decide_active({SECONDARY: OK}, "all", CTX, delivered_before=first.delivered_to)
    # Then the entry is acked as delivered to both
    assert second == Ack((PRIMARY, SECONDARY))


@pytest.mark.parametrize(
    ("mode", "roles"),
    [
        ("passive", ("primary", "secondary")),
        ("active", ("primary", "secondary")),
        ("none", ("primary",)),
        ("paired", ("primary",)),  # its failover goes to backlog queues, other entities
    ],
)
def test_the_links_worth_reopening_after_an_outage_are_those_the_mode_sends_the_entity_through(
    mode: str, roles: tuple[str, ...]
) -> None:
    assert linked_roles(mode) == roles


def test_the_links_reopened_at_once_are_those_of_at_most_half_the_senders_a_client_keeps() -> None:
    modes = {"c": "paired", "a": "active", "b": "none", "d": "passive"}
    assert links_to_reopen(modes, 64) == [
        ("primary", "a"),
        ("secondary", "a"),
        ("primary", "b"),
        ("primary", "c"),
        ("primary", "d"),
        ("secondary", "d"),
    ]
    assert links_to_reopen(modes, 4) == [("primary", "a"), ("secondary", "a"), ("primary", "b")]
    assert links_to_reopen(modes, 1) == [("primary", "a"), ("secondary", "a")]
    assert links_to_reopen({}, 64) == []


def test_each_simple_mode_plan_says_why_it_sends_there() -> None:
    assert plan("passive", RoleState("secondary", 3)) == SendNext((SECONDARY,), "active namespace")
    assert plan("active", RoleState()) == SendNext((PRIMARY, SECONDARY), "active replication")
    assert plan("none", RoleState()) == SendNext((PRIMARY,), "single namespace")


ON_SECONDARY = RoleState("secondary", 7)


@pytest.mark.parametrize(
    ("active", "backup", "expected"),
    [
        (BUSY, None, Retry(DELAY, "transient on secondary: busy", (SECONDARY,))),
        (TOO_BIG, None, DeadLetter("message_permanent on secondary: too big")),
        (
            AUTH,
            TOO_BIG,
            DeadLetter(
                "message_permanent on primary while secondary is down: too big",
                alerts=("configuration error on secondary: bad key",),
            ),
        ),
        (
            DOWN,
            AUTH,
            Retry(
                DELAY,
                "both namespaces failed: secondary: refused; primary: bad key",
                (SECONDARY,),
                alerts=("configuration error on primary: bad key",),
            ),
        ),
    ],
)
def test_passive_decisions_in_full_when_the_secondary_is_active(
    active: Outcome, backup: Outcome | None, expected: object
) -> None:
    assert decide_passive(ON_SECONDARY, active, backup, CTX) == expected


@pytest.mark.parametrize(
    ("outcomes", "policy", "before", "expected"),
    [
        (
            {PRIMARY: OK, SECONDARY: AUTH},
            "any",
            (),
            Ack((PRIMARY,), alerts=("configuration error on secondary: bad key",)),
        ),
        (
            {PRIMARY: TOO_BIG, SECONDARY: AUTH},
            "all",
            (),
            DeadLetter(
                "message_permanent: primary: too big; secondary: bad key",
                alerts=("configuration error on secondary: bad key",),
            ),
        ),
        (
            {PRIMARY: BUSY, SECONDARY: AUTH},
            "any",
            (),
            Retry(
                DELAY,
                "primary: busy; secondary: bad key",
                (PRIMARY, SECONDARY),
                alerts=("configuration error on secondary: bad key",),
            ),
        ),
        # nothing tried this time and one namespace still missing: a retry that names no failure
        ({}, "all", (PRIMARY,), Retry(DELAY, "not yet delivered", (SECONDARY,), delivered_to=(PRIMARY,))),
    ],
)
def test_active_decisions_in_full(
    outcomes: dict[Target, Outcome], policy: str, before: tuple[Target, ...], expected: object
) -> None:
    assert decide_active(outcomes, policy, CTX, before) == expected  # type: ignore[arg-type]
