"""Paired mode: backlog paths, the FailoverInterval timer, ping, backlog rotation, syphon decisions."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from bridge.core.aliasing import ExpiredInBacklog, NotAliased, Restored
from bridge.core.error_classes import ErrorClass
from bridge.core.message_fields import MessageFields
from bridge.core.outcomes import Outcome
from bridge.core.paired import (
    PING_CONTENT_TYPE,
    PING_SCHEDULE_AHEAD,
    BacklogRotation,
    EngageFailover,
    FailoverPolicy,
    MarkAvailable,
    PairedState,
    RecordError,
    RecordPing,
    RemoveFromRotation,
    StartTimer,
    apply_change,
    apply_changes,
    backlog_queue_index,
    backlog_queue_path,
    backlog_queue_paths,
    choose_backlog,
    failover_due,
    on_backlog_failure,
    on_ping,
    on_primary_failure,
    on_primary_success,
    ping_due,
    ping_message,
    rendezvous_backlog,
    route,
    seconds_until_failover,
)
from bridge.core.syphon import (
    Barrier,
    SyphonAction,
    SyphonDecision,
    plan_received,
    syphon_after_send,
    syphon_before_send,
)

OK = Outcome.success()
BUSY = Outcome.failure(ErrorClass.TRANSIENT, "busy")
TIMEOUT = Outcome.failure(ErrorClass.TRANSIENT, "OperationTimeoutError", timeout=True)
DOWN = Outcome.failure(ErrorClass.OUTAGE, "refused")
AUTH = Outcome.failure(ErrorClass.CONFIGURATION, "bad key")
MISSING = Outcome.failure(ErrorClass.CONFIGURATION, "no such entity", entity_missing=True)
TOO_BIG = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "too big")

POLICY = FailoverPolicy(failover_interval=60.0)
IMMEDIATE = FailoverPolicy(failover_interval=0.0)
T0 = 1_000.0


def test_backlog_paths() -> None:
    assert backlog_queue_path("contoso", 0) == "contoso/x-servicebus-transfer/0"
    assert backlog_queue_paths("ns1", 3) == (
        "ns1/x-servicebus-transfer/0",
        "ns1/x-servicebus-transfer/1",
        "ns1/x-servicebus-transfer/2",
    )
    assert backlog_queue_index("contoso/x-servicebus-transfer/7") == 7
    for path in ("orders", "contoso/x-servicebus-transfer/x", "a/b/c", "/x-servicebus-transfer/1"):
        assert backlog_queue_index(path) is None


@pytest.mark.parametrize(("namespace", "index"), [("", 0), ("a/b", 0), ("ns", -1)])
def test_bad_backlog_path_arguments(namespace: str, index: int) -> None:
    with pytest.raises(ValueError, match="must"):
        backlog_queue_path(namespace, index)


HEALTHY = PairedState()
TIMING = PairedState(failing_since=T0, last_error="refused", last_error_at=T0)
FAILED_OVER = PairedState(
    failing_since=T0, failed_over_at=T0 + 60, last_error="refused", last_error_at=T0 + 60
)


@pytest.mark.parametrize(
    ("state", "outcome", "now", "policy", "expected"),
    [
        # a transient failure is recorded but starts no timer
        (HEALTHY, BUSY, T0, POLICY, (RecordError(T0, "busy"),)),
        # a non-transient failure, or a timeout, starts it
        (HEALTHY, DOWN, T0, POLICY, (RecordError(T0, "refused"), StartTimer(T0))),
        (HEALTHY, AUTH, T0, POLICY, (RecordError(T0, "bad key"), StartTimer(T0))),
        (HEALTHY, TIMEOUT, T0, POLICY, (RecordError(T0, "OperationTimeoutError"), StartTimer(T0))),
        # a running timer is not restarted
        (TIMING, DOWN, T0 + 30, POLICY, (RecordError(T0 + 30, "refused"),)),
        # the interval passed with no successful send: failover engages, whatever the latest class
        (
            TIMING,
            DOWN,
            T0 + 60,
            POLICY,
            (RecordError(T0 + 60, "refused"), EngageFailover(T0 + 60, "no successful send for 60s: refused")),
        ),
        (
            TIMING,
            BUSY,
            T0 + 61,
            POLICY,
            (RecordError(T0 + 61, "busy"), EngageFailover(T0 + 61, "no successful send for 60s: busy")),
        ),
        # interval 0: immediate
        (
            HEALTHY,
            DOWN,
            T0,
            IMMEDIATE,
            (
                RecordError(T0, "refused"),
                StartTimer(T0),
                EngageFailover(T0, "no successful send for 0s: refused"),
            ),
        ),
        # a message-permanent failure is the message's fault
        (HEALTHY, TOO_BIG, T0, POLICY, ()),
        (TIMING, TOO_BIG, T0 + 90, POLICY, ()),
        # already failed over: nothing more to engage
        (FAILED_OVER, DOWN, T0 + 200, POLICY, (RecordError(T0 + 200, "refused"),)),
    ],
)
def test_primary_failure_table(
    state: PairedState, outcome: Outcome, now: float, policy: FailoverPolicy, expected: tuple[object, ...]
) -> None:
    assert on_primary_failure(state, outcome, now, policy) == expected


def test_the_timer_story() -> None:
    # Given a healthy entity and FailoverInterval 60 s
    state = HEALTHY
    # When the primary refuses at T0, and again at T0+30
    state = apply_changes(state, on_primary_failure(state, DOWN, T0, POLICY))
    state = apply_changes(state, on_primary_failure(state, DOWN, T0 + 30, POLICY))
    # Then the timer runs from T0 and the entity still routes to the primary
    assert state.failing_since == T0
    assert route(state, T0 + 30, POLICY) == ("primary", ())
    assert seconds_until_failover(state, T0 + 30, POLICY) == 30.0
    # When a send at T0+59 succeeds, the timer is reset
    reset = apply_changes(state, on_primary_success(state, T0 + 59))
    assert reset.healthy
    # When instead nothing succeeds until T0+60, failover engages on the next failure
    state = apply_changes(state, on_primary_failure(state, DOWN, T0 + 60, POLICY))
    assert state.failed_over
    assert route(state, T0 + 61, POLICY) == ("backlog", ())
    # And a ping is due at once, then every ping_primary_interval
    assert ping_due(state, T0 + 60, POLICY)
    state = apply_changes(state, on_ping(DOWN, T0 + 60))
    assert not ping_due(state, T0 + 119, POLICY)
    assert ping_due(state, T0 + 120, POLICY)
    # When the ping succeeds, the entity is available again at once
    state = apply_changes(state, on_ping(OK, T0 + 120))
    assert state.healthy
    assert route(state, T0 + 120, POLICY) == ("primary", ())


def test_route_engages_an_expired_timer_even_without_a_new_failure() -> None:
    where, changes = route(TIMING, T0 + 60, POLICY)
    assert where == "backlog"
    assert changes == (EngageFailover(T0 + 60, "failover_interval passed with no successful send"),)
    assert failover_due(TIMING, T0 + 60, POLICY)
    assert not failover_due(TIMING, T0 + 59.9, POLICY)
    assert seconds_until_failover(HEALTHY, T0, POLICY) is None
    assert seconds_until_failover(FAILED_OVER, T0, POLICY) == 0.0


def test_changes_have_set_if_absent_semantics() -> None:
    # Two workers racing: the first failure's time wins, a second EngageFailover does not move it
    assert apply_change(TIMING, StartTimer(T0 + 5)).failing_since == T0
    engaged = apply_change(TIMING, EngageFailover(T0 + 60, "x"))
    assert apply_change(engaged, EngageFailover(T0 + 70, "y")) == engaged
    # EngageFailover without a timer (route after a restart) also sets failing_since
    assert apply_change(HEALTHY, EngageFailover(T0, "x")) == PairedState(
        failing_since=T0, failed_over_at=T0, last_failover_at=T0
    )
    back = apply_change(engaged, MarkAvailable(T0 + 99, "ping"))
    assert back.healthy
    assert back.last_failover_at == T0 + 60  # the status page still shows when it happened
    assert back.last_error == "refused"  # the last error stays visible
    assert apply_change(HEALTHY, RecordPing(T0)).last_ping_at == T0


def test_primary_success_on_a_healthy_entity_changes_nothing() -> None:
    assert on_primary_success(HEALTHY, T0) == ()
    assert on_primary_success(TIMING, T0) == (MarkAvailable(T0, "primary send succeeded"),)
    assert not ping_due(HEALTHY, T0, POLICY)


@pytest.mark.parametrize("state", [HEALTHY, TIMING, FAILED_OVER, PairedState(last_ping_at=0.125)])
def test_paired_state_round_trips_through_a_hash(state: PairedState) -> None:
    assert PairedState.from_fields(state.to_fields()) == state
    assert PairedState.from_fields({k.encode(): v.encode() for k, v in state.to_fields().items()}) == state


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(failover_interval=-1.0), "failover_interval"),
        (dict(ping_primary_interval=0.0), "ping"),
        (dict(ping_timeout=0.0), "ping"),
    ],
)
def test_failover_policy_validation(bad: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FailoverPolicy(**bad)


def test_ping_messages() -> None:
    plain = ping_message("message", "sess-1", T0)
    assert (plain.content_type, plain.time_to_live, plain.session_id) == (PING_CONTENT_TYPE, 1.0, "sess-1")
    assert plain.scheduled_enqueue_time_utc is None
    assert not plain.cancel_after_schedule
    scheduled = ping_message("schedule", "sess-2", T0)
    assert scheduled.scheduled_enqueue_time_utc == datetime.fromtimestamp(T0, tz=UTC) + PING_SCHEDULE_AHEAD
    assert scheduled.cancel_after_schedule


# ---- backlog rotation


@pytest.mark.parametrize(
    ("removed", "current", "draw", "readmit_after", "chosen"),
    [
        ({}, None, 0.0, None, 0),
        ({}, None, 0.55, None, 5),
        ({}, None, 0.999999, None, 9),
        ({}, 3, 0.9, None, 3),  # keeps its current queue
        ({3: T0}, 3, 0.0, None, 0),  # current left the rotation: a new random pick
        ({0: T0, 1: T0}, None, 0.0, None, 2),  # picks among those still in rotation
        ({i: T0 for i in range(10)}, None, 0.5, None, None),  # all failed: stay in outbox
        ({i: T0 for i in range(10)}, None, 0.5, 30.0, 5),  # readmitted after 30 s (now is T0 + 30)
        ({i: T0 for i in range(10)}, None, 0.5, 31.0, None),
    ],
)
def test_choose_backlog_table(
    removed: dict[int, float],
    current: int | None,
    draw: float,
    readmit_after: float | None,
    chosen: int | None,
) -> None:
    rotation = BacklogRotation(count=10, removed=removed)
    assert choose_backlog(rotation, T0 + 30, lambda: draw, current, readmit_after) == chosen


def test_random_choice_spreads_over_the_rotation() -> None:
    rotation = BacklogRotation(count=10, removed={4: T0})
    rand = random.Random(7).random
    picks = {choose_backlog(rotation, T0, rand) for _ in range(500)}
    assert picks == set(range(10)) - {4}


def test_a_failed_backlog_queue_leaves_the_rotation_for_everyone() -> None:
    # Given two workers on queues 2 and 5
    rotation = BacklogRotation(count=10)
    # When queue 2 fails for the first worker
    removal = on_backlog_failure(2, DOWN, T0)
    assert removal == RemoveFromRotation(2, T0, "refused")
    shared = rotation.apply(removal)
    # Then the first picks another queue and the second keeps its own; nobody picks 2 again
    assert choose_backlog(shared, T0, lambda: 0.25, current=2) == 3
    assert choose_backlog(shared, T0, lambda: 0.2, current=5) == 5
    assert 2 not in shared.in_rotation(T0, None)
    # A message-permanent failure is not the queue's fault
    assert on_backlog_failure(2, TOO_BIG, T0) is None
    assert on_backlog_failure(2, BUSY, T0) == RemoveFromRotation(2, T0, "busy")


def test_rotation_round_trips_and_ignores_indexes_beyond_the_count() -> None:
    rotation = BacklogRotation(count=10, removed={1: 2.5, 9: T0})
    assert BacklogRotation.from_fields(10, rotation.to_fields()) == rotation
    assert BacklogRotation.from_fields(5, {b"1": b"2.5", b"9": b"3.0", b"x": b"1"}).removed == {1: 2.5}
    with pytest.raises(ValueError, match="at least 1"):
        BacklogRotation(count=0)


# ---- syphon

RESTORED = Restored(MessageFields("m", time_to_live=5.0), "orders")


@pytest.mark.parametrize(
    ("decision", "destination_state", "expected"),
    [
        (RESTORED, HEALTHY, SyphonDecision(SyphonAction.SEND)),
        (RESTORED, TIMING, SyphonDecision(SyphonAction.SET_ASIDE, "destination orders is failed over")),
        (RESTORED, FAILED_OVER, SyphonDecision(SyphonAction.SET_ASIDE, "destination orders is failed over")),
        (
            ExpiredInBacklog("orders", 5.0),
            HEALTHY,
            SyphonDecision(SyphonAction.DEAD_LETTER, ExpiredInBacklog("orders", 5.0).reason),
        ),
        (NotAliased("not_aliased: x"), HEALTHY, SyphonDecision(SyphonAction.DEAD_LETTER, "not_aliased: x")),
        (
            NotAliased("not_aliased: x"),
            FAILED_OVER,
            SyphonDecision(SyphonAction.DEAD_LETTER, "not_aliased: x"),
        ),
    ],
)
def test_syphon_before_send(
    decision: Restored | ExpiredInBacklog | NotAliased,
    destination_state: PairedState,
    expected: SyphonDecision,
) -> None:
    assert syphon_before_send(decision, destination_state) == expected


@pytest.mark.parametrize(
    ("outcome", "action"),
    [
        (OK, SyphonAction.COMPLETE),
        (MISSING, SyphonAction.DEAD_LETTER),
        (TOO_BIG, SyphonAction.DEAD_LETTER),
        (BUSY, SyphonAction.SET_ASIDE),
        (TIMEOUT, SyphonAction.SET_ASIDE),
        (DOWN, SyphonAction.STOP),
        (AUTH, SyphonAction.STOP),  # a wrong key is not the message's fault: never dead-letter for it
    ],
)
def test_syphon_after_send(outcome: Outcome, action: SyphonAction) -> None:
    decision = syphon_after_send(outcome, "orders")
    assert decision.action is action
    if outcome is MISSING:
        assert decision.reason.startswith("destination_missing: orders")


def _restored(destination: str, i: int) -> Restored:
    return Restored(MessageFields(f"{destination}-{i}"), destination)


def test_plan_received_sets_aside_a_failed_over_destination_and_lets_the_others_through() -> None:
    # Given a batch led by a failed-over destination's messages, a healthy one's behind them, a bad one
    batch = [
        _restored("down", 0),
        _restored("down", 1),
        _restored("up", 0),
        NotAliased("not_aliased: x"),
        _restored("up", 1),
    ]
    states = {"down": FAILED_OVER, "up": HEALTHY}
    # When the syphon plans it
    plan = plan_received(batch, states.__getitem__)
    # Then the failed-over ones are set aside, the healthy ones go, the bad one is dead-lettered
    assert [d.action for d in plan] == [
        SyphonAction.SET_ASIDE,
        SyphonAction.SET_ASIDE,
        SyphonAction.SEND,
        SyphonAction.DEAD_LETTER,
        SyphonAction.SEND,
    ]


def test_plan_received_keeps_a_held_destination_behind_its_set_aside_messages() -> None:
    # Given a healthy destination that already has messages set aside (e.g. a settlement failed)
    batch = [_restored("orders", 0), _restored("other", 0), _restored("orders", 1)]
    plan = plan_received(batch, lambda _: HEALTHY, held={"orders"})
    # Then its new messages follow them there; the other destination is not held back
    assert [d.action for d in plan] == [SyphonAction.SET_ASIDE, SyphonAction.SEND, SyphonAction.SET_ASIDE]
    assert "set aside" in plan[0].reason


def test_rendezvous_sticks_a_key_and_moves_only_the_keys_of_a_queue_that_left() -> None:
    keys = [f"session-{i}" for i in range(600)]
    before = {k: rendezvous_backlog(k, [0, 1, 2]) for k in keys}
    after = {k: rendezvous_backlog(k, [0, 2]) for k in keys}
    # Every queue gets a fair share, and removing queue 1 moves only the keys that were on it
    assert all(150 <= sum(1 for v in before.values() if v == q) <= 250 for q in (0, 1, 2))
    assert {k for k in keys if before[k] != after[k]} == {k for k in keys if before[k] == 1}
    assert rendezvous_backlog("k", []) is None
    assert rendezvous_backlog("k", [0, 1, 2]) == rendezvous_backlog("k", [2, 1, 0])


def test_a_restore_barrier_passes_only_behind_its_destinations_messages() -> None:
    barrier = Barrier("orders", 0, "t1")
    # Healthy and nothing set aside before it: it passes
    assert [d.action for d in plan_received([_restored("orders", 0), barrier], lambda _: HEALTHY)] == [
        SyphonAction.SEND,
        SyphonAction.PASS_BARRIER,
    ]
    # An earlier message of its destination set aside (or the destination failed over): it follows it
    assert plan_received([barrier], lambda _: HEALTHY, held={"orders"})[0].action is SyphonAction.SET_ASIDE
    assert plan_received([barrier], lambda _: FAILED_OVER)[0].action is SyphonAction.SET_ASIDE
    # Another destination's messages do not hold it back
    states = {"other": FAILED_OVER, "orders": HEALTHY}
    plan = plan_received([_restored("other", 0), barrier], states.__getitem__)
    assert [d.action for d in plan] == [SyphonAction.SET_ASIDE, SyphonAction.PASS_BARRIER]


def test_a_queue_that_left_because_the_address_refused_is_back_once_the_address_accepts() -> None:
    refused = Outcome.failure(ErrorClass.OUTAGE, "connection refused", address_refused=True)
    other = Outcome.failure(ErrorClass.OUTAGE, "link detached")
    rotation = BacklogRotation(count=3)
    for index, outcome in ((0, refused), (1, other)):
        change = on_backlog_failure(index, outcome, T0)
        assert change is not None and change.refused is (outcome is refused)
        rotation = rotation.apply(change)
    # Out while nobody knows better; only the refused one comes back when the address accepts again
    assert rotation.in_rotation(T0 + 1, readmit_after=60) == (2,)
    assert rotation.refused_out(T0 + 1, readmit_after=60)
    assert rotation.in_rotation(T0 + 1, readmit_after=60, accepting=True) == (0, 2)
    # Readmitted by time as before, whatever the reason
    assert rotation.in_rotation(T0 + 60, readmit_after=60) == (0, 1, 2)
    assert not rotation.refused_out(T0 + 60, readmit_after=60)
    # A later failure of another kind makes the queue an ordinary removal again
    rotation = rotation.apply(RemoveFromRotation(0, T0 + 2, "link detached"))
    assert rotation.in_rotation(T0 + 3, readmit_after=60, accepting=True) == (2,)
    # And the flag survives the round trip through Redis's fields
    again = rotation.apply(RemoveFromRotation(2, T0 + 4, "refused", refused=True))
    assert BacklogRotation.from_fields(3, again.to_fields()) == again
    assert BacklogRotation.from_fields(3, again.to_fields()).refused == frozenset({2})


@pytest.mark.parametrize(
    ("outcome", "decision"),
    [
        (
            Outcome.failure(ErrorClass.CONFIGURATION, "gone", entity_missing=True),
            SyphonDecision(SyphonAction.DEAD_LETTER, "destination_missing: orders: gone"),
        ),
        (
            Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "too big"),
            SyphonDecision(SyphonAction.DEAD_LETTER, "rejected_by_primary: too big"),
        ),
        (Outcome.failure(ErrorClass.TRANSIENT, "busy"), SyphonDecision(SyphonAction.SET_ASIDE, "busy")),
        (Outcome(False, ErrorClass.TRANSIENT), SyphonDecision(SyphonAction.SET_ASIDE, "transient")),
        (Outcome.failure(ErrorClass.OUTAGE, "refused"), SyphonDecision(SyphonAction.STOP, "refused")),
        (Outcome(False, ErrorClass.OUTAGE), SyphonDecision(SyphonAction.STOP, "outage")),
    ],
)
def test_the_syphon_says_why_after_a_failed_send(outcome: Outcome, decision: SyphonDecision) -> None:
    assert syphon_after_send(outcome, "orders") == decision


def test_a_barrier_set_aside_says_what_it_waits_behind() -> None:
    plan = plan_received([Barrier("orders", 0, "t1")], lambda _: FAILED_OVER)

    assert plan == [SyphonDecision(SyphonAction.SET_ASIDE, "barrier behind orders's messages")]


@pytest.mark.parametrize(
    ("options", "valid"),
    [
        ({"failover_interval": 0.0}, True),  # fail over at the first failure
        ({"failover_interval": 0.5, "ping_primary_interval": 0.5, "ping_timeout": 0.5}, True),
        ({"failover_interval": -1.0}, False),
        ({"ping_primary_interval": 0.0}, False),
        ({"ping_timeout": 0.0}, False),
    ],
)
def test_failover_policy_bounds(options: dict[str, float], valid: bool) -> None:
    if valid:
        FailoverPolicy(**options)
    else:
        with pytest.raises(
            ValueError, match=r"^failover_interval must be >= 0, ping intervals and timeouts > 0$"
        ):
            FailoverPolicy(**options)


def test_the_paired_state_keeps_when_failover_was_last_engaged_through_redis() -> None:
    state = PairedState(last_failover_at=12.5)

    assert state.to_fields() == {"last_failover_at": "12.5"}
    assert PairedState.from_fields({b"last_failover_at": b"12.5"}) == state


@pytest.mark.parametrize(
    ("state", "change", "after"),
    [
        # engaging keeps the timer's start, so status shows how long the primary has been failing
        (
            PairedState(failing_since=5.0),
            EngageFailover(20.0, "interval"),
            PairedState(failing_since=5.0, failed_over_at=20.0, last_failover_at=20.0),
        ),
        (
            PairedState(last_error="old", last_error_at=1.0),
            RecordError(9.0, "refused"),
            PairedState(last_error="refused", last_error_at=9.0),
        ),
    ],
)
def test_apply_change_in_full(state: PairedState, change: object, after: PairedState) -> None:
    assert apply_change(state, change) == after  # type: ignore[arg-type]


def test_failover_stays_due_while_engaged_whatever_the_timer() -> None:
    policy = FailoverPolicy(failover_interval=60.0)

    assert failover_due(PairedState(failed_over_at=10.0), 11.0, policy) is True
    assert failover_due(PairedState(failing_since=10.0, failed_over_at=10.0), 11.0, policy) is True


def test_a_ping_records_itself_and_its_verdict() -> None:
    assert on_ping(Outcome.success(), 30.0) == (
        RecordPing(30.0),
        MarkAvailable(30.0, "ping accepted by the primary"),
    )
    assert on_ping(Outcome.failure(ErrorClass.OUTAGE, "refused"), 31.0) == (
        RecordPing(31.0),
        RecordError(31.0, "refused"),
    )
    assert on_ping(Outcome(False, ErrorClass.OUTAGE), 32.0) == (RecordPing(32.0), RecordError(32.0, "outage"))


def test_a_scheduled_ping_keeps_its_session_id() -> None:
    assert ping_message("schedule", "s-1", 0.0).session_id == "s-1"


def test_a_rotation_round_trips_through_redis_fields_and_drops_queues_past_the_count() -> None:
    rotation = BacklogRotation(3, removed={0: 1.5, 2: 2.5}, refused=frozenset({2}))

    fields = rotation.to_fields()

    assert fields == {"0": "1.5", "2": "2.5", "0.refused": "0", "2.refused": "1"}
    assert BacklogRotation.from_fields(3, fields) == rotation
    assert BacklogRotation.from_fields(2, fields) == BacklogRotation(2, removed={0: 1.5})
