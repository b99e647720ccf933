"""Passive roles: swap decisions with compare-and-swap epochs, namespace health, Redis hash round trips."""

from __future__ import annotations

import pytest

from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.roles import (
    NamespaceHealth,
    NoChange,
    RoleState,
    Stale,
    Stay,
    Swap,
    as_role,
    decide_roles,
    next_health,
    partner,
)

OK = Outcome.success()
TRANSIENT = Outcome.failure(ErrorClass.TRANSIENT, "ServiceBusServerBusyError: busy")
OUTAGE = Outcome.failure(ErrorClass.OUTAGE, "ServiceBusConnectionError: refused")
CONFIG = Outcome.failure(ErrorClass.CONFIGURATION, "ServiceBusAuthenticationError: bad key")
PERMANENT = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "MessageSizeExceededError: too big")

STATE = RoleState(active="primary", epoch=4)
NOW = 1_700_000_000.5


@pytest.mark.parametrize(
    ("active", "backup", "expected_type"),
    [
        (OK, None, NoChange),
        (TRANSIENT, None, NoChange),
        (PERMANENT, None, NoChange),
        (OUTAGE, None, NoChange),  # backup not tried yet
        (TRANSIENT, OK, NoChange),  # not a failover class: no swap even if the backup answered
        (PERMANENT, OK, NoChange),
        (OUTAGE, OK, Swap),
        (CONFIG, OK, Swap),
        (OUTAGE, OUTAGE, Stay),
        (OUTAGE, TRANSIENT, Stay),
        (CONFIG, CONFIG, Stay),
        (OUTAGE, PERMANENT, Stay),
    ],
)
def test_decision_table(active: Outcome, backup: Outcome | None, expected_type: type) -> None:
    decision = decide_roles(STATE, 4, active, backup, now=NOW, retry_after=2.5)
    assert type(decision) is expected_type
    if isinstance(decision, Stay):
        assert decision.retry_after == 2.5
        assert "primary" in decision.reason
        assert "secondary" in decision.reason


def test_swap_carries_the_epoch_it_was_decided_on() -> None:
    decision = decide_roles(STATE, 4, OUTAGE, OK, now=NOW, retry_after=1.0)
    assert decision == Swap(
        from_role="primary",
        to_role="secondary",
        expected_epoch=4,
        new_epoch=5,
        at=NOW,
        reason="outage on primary: ServiceBusConnectionError: refused",
    )
    assert decision.state() == RoleState("secondary", 5, NOW, decision.reason)


def test_a_worker_with_a_stale_epoch_does_not_swap() -> None:
    # Given roles already swapped to the secondary (epoch 5) by another worker
    current = RoleState(active="secondary", epoch=5)
    # When a worker that observed epoch 4 sees its backup accept
    decision = decide_roles(current, 4, OUTAGE, OK, now=NOW, retry_after=1.0)
    # Then it is told to re-read, not to swap
    assert decision == Stale(current)


def test_two_racing_workers_decide_the_same_compare_and_swap() -> None:
    # Given two workers that both observed epoch 4 and both saw the primary fail and the secondary accept
    first = decide_roles(STATE, 4, OUTAGE, OK, now=NOW, retry_after=1.0)
    second = decide_roles(STATE, 4, OUTAGE, OK, now=NOW + 0.1, retry_after=1.0)
    assert isinstance(first, Swap)
    assert isinstance(second, Swap)
    # Then both swaps expect epoch 4 with the primary active, so the store applies only the first one
    # (test_state_roles.py: racing workers swap exactly once, a stale epoch never swaps back)
    assert (first.expected_epoch, first.from_role) == (4, "primary")
    assert (second.expected_epoch, second.from_role) == (4, "primary")
    assert first.state() == RoleState("secondary", 5, NOW, first.reason)


@pytest.mark.parametrize(
    "state",
    [
        RoleState(),
        RoleState("secondary", 7, NOW, "outage on primary: ServiceBusConnectionError: refused"),
        RoleState("primary", 123456789, 0.1, 'r;e=a s,o"n'),
    ],
)
def test_role_state_round_trips_through_a_hash(state: RoleState) -> None:
    fields = state.to_fields()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    assert RoleState.from_fields(fields) == state
    as_bytes = {k.encode(): v.encode() for k, v in fields.items()}
    assert RoleState.from_fields(as_bytes) == state


def test_an_empty_hash_is_the_initial_state() -> None:
    assert RoleState.from_fields({}) == RoleState("primary", 0)
    assert RoleState().to_fields() == {"active": "primary", "epoch": "0"}


def test_role_helpers() -> None:
    assert partner("primary") == "secondary"
    assert partner("secondary") == "primary"
    assert RoleState("secondary").backup == "primary"
    with pytest.raises(ValueError, match="not a role"):
        as_role("tertiary")
    with pytest.raises(ValueError, match="not a role"):
        RoleState.from_fields({"active": "nope", "epoch": "1"})


UP = NamespaceHealth()
DOWN = NamespaceHealth(False, 10.0, "ServiceBusConnectionError: refused", 10.0, ErrorClass.OUTAGE)


@pytest.mark.parametrize(
    ("before", "outcome", "after"),
    [
        (UP, OK, UP),
        (DOWN, OK, NamespaceHealth(True, NOW, DOWN.last_error, 10.0, ErrorClass.OUTAGE)),
        (UP, TRANSIENT, NamespaceHealth(True, None, TRANSIENT.error, NOW, ErrorClass.TRANSIENT)),
        (UP, OUTAGE, NamespaceHealth(False, NOW, OUTAGE.error, NOW, ErrorClass.OUTAGE)),
        (UP, CONFIG, NamespaceHealth(False, NOW, CONFIG.error, NOW, ErrorClass.CONFIGURATION)),
        (DOWN, OUTAGE, NamespaceHealth(False, 10.0, OUTAGE.error, NOW, ErrorClass.OUTAGE)),
        (DOWN, TRANSIENT, NamespaceHealth(False, 10.0, TRANSIENT.error, NOW, ErrorClass.TRANSIENT)),
        (UP, PERMANENT, UP),
        (DOWN, PERMANENT, DOWN),
    ],
)
def test_health_transitions(before: NamespaceHealth, outcome: Outcome, after: NamespaceHealth) -> None:
    assert next_health(before, outcome, NOW) == after


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACED = NamespaceHealth(False, 10.0, "refused", 10.0, ErrorClass.OUTAGE, TRACE)


@pytest.mark.parametrize(
    ("before", "outcome", "trace", "after"),
    [
        (UP, OUTAGE, TRACE, NamespaceHealth(False, NOW, OUTAGE.error, NOW, ErrorClass.OUTAGE, TRACE)),
        (
            UP,
            TRANSIENT,
            TRACE,
            NamespaceHealth(True, None, TRANSIENT.error, NOW, ErrorClass.TRANSIENT, TRACE),
        ),
        # a newer error without a trace (a probe's) does not keep the older error's trace
        (TRACED, OUTAGE, None, NamespaceHealth(False, 10.0, OUTAGE.error, NOW, ErrorClass.OUTAGE, None)),
        # recovery keeps the last error, and its trace, for the operator
        (TRACED, OK, None, NamespaceHealth(True, NOW, "refused", 10.0, ErrorClass.OUTAGE, TRACE)),
        (TRACED, PERMANENT, "f" * 32, TRACED),  # the message's fault: the record is not touched
    ],
)
def test_the_last_error_keeps_the_trace_of_the_attempt_that_failed(
    before: NamespaceHealth, outcome: Outcome, trace: str | None, after: NamespaceHealth
) -> None:
    assert next_health(before, outcome, NOW, trace) == after


# Down since 10 with a later error at 20; up again at 30 after errors until 25.
STILL_DOWN = NamespaceHealth(False, 10.0, "refused", 20.0, ErrorClass.OUTAGE)
BACK_UP = NamespaceHealth(True, 30.0, "refused", 25.0, ErrorClass.OUTAGE)


@pytest.mark.parametrize(
    ("before", "outcome", "at", "after"),
    [
        # a success made before the failure that took the namespace down: it stays down
        (DOWN, OK, 9.5, DOWN),
        # made after the namespace went down but before its latest error: still down
        (STILL_DOWN, OK, 15.0, STILL_DOWN),
        # made after the latest error: up again
        (STILL_DOWN, OK, 21.0, NamespaceHealth(True, 21.0, "refused", 20.0, ErrorClass.OUTAGE)),
        # at the same time as the last change: applied
        (STILL_DOWN, OK, 20.0, NamespaceHealth(True, 20.0, "refused", 20.0, ErrorClass.OUTAGE)),
        # a failure made before the success that brought it back: it stays up
        (BACK_UP, OUTAGE, 28.0, BACK_UP),
        (BACK_UP, TRANSIENT, 28.0, BACK_UP),
        (BACK_UP, OUTAGE, 31.0, NamespaceHealth(False, 31.0, OUTAGE.error, 31.0, ErrorClass.OUTAGE)),
        # a record never changed has no order yet
        (UP, OUTAGE, 1.0, NamespaceHealth(False, 1.0, OUTAGE.error, 1.0, ErrorClass.OUTAGE)),
    ],
)
def test_an_attempt_older_than_the_records_last_change_leaves_it_as_it_is(
    before: NamespaceHealth, outcome: Outcome, at: float, after: NamespaceHealth
) -> None:
    assert next_health(before, outcome, at) == after
    assert (next_health(before, outcome, at) is before) is (after == before)


def test_a_record_changed_at_its_latest_change() -> None:
    assert UP.changed_at is None
    assert STILL_DOWN.changed_at == 20.0
    assert BACK_UP.changed_at == 30.0
    assert NamespaceHealth(True, None, "busy", 5.0, ErrorClass.TRANSIENT).changed_at == 5.0


def test_unchanged_health_is_the_same_object_and_flips_are_reported() -> None:
    assert next_health(UP, OK, NOW) is UP
    assert not next_health(UP, OUTAGE, NOW).available
    assert next_health(UP, TRANSIENT, NOW).available


@pytest.mark.parametrize(
    "health", [UP, DOWN, NamespaceHealth(True, 3.25, "x", 2.0, ErrorClass.TRANSIENT), TRACED]
)
def test_health_round_trips_through_a_hash(health: NamespaceHealth) -> None:
    assert NamespaceHealth.from_fields(health.to_fields()) == health
    assert (
        NamespaceHealth.from_fields({k.encode(): v.encode() for k, v in health.to_fields().items()}) == health
    )


def test_a_role_hash_missing_a_field_reads_it_as_its_initial_value() -> None:
    assert RoleState.from_fields({b"epoch": b"3"}) == RoleState("primary", 3)
    assert RoleState.from_fields({b"active": b"secondary"}) == RoleState("secondary", 0)


def test_namespace_health_keeps_unavailability_through_redis_and_a_missing_flag_reads_available() -> None:
    down = NamespaceHealth(available=False, since=3.0)

    assert down.to_fields() == {"available": "0", "since": "3.0"}
    assert NamespaceHealth.from_fields(down.to_fields()) == down
    assert NamespaceHealth.from_fields({b"since": b"3.0"}) == NamespaceHealth(available=True, since=3.0)
