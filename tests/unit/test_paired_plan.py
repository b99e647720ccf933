"""Paired mode's batch plan (``bridge.core.paired_plan``), the function production runs: tables, no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from bridge.core.backoff import BackoffPolicy
from bridge.core.barriers import BarrierStatus, barrier_due, barrier_token, next_barrier_token, read_barrier
from bridge.core.decisions import PRIMARY, Ack, DeadLetter, Hold, Retry, Settlement, backlog_target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.paired import (
    BacklogRotation,
    EngageFailover,
    FailoverPolicy,
    MarkAvailable,
    PairedState,
    RecordError,
    RemoveFromRotation,
    StartTimer,
    rendezvous_backlog,
)
from bridge.core.paired_plan import (
    OUT_OF_ROTATION,
    QUEUE_AWAITS,
    REROUTE_DELAY,
    BacklogView,
    BatchEntry,
    PairedPlan,
    PairedView,
    plan_batch,
)
from bridge.core.paired_settle import CurrentBacklog, settle_batch
from bridge.core.replication import RetryContext
from bridge.errors import InvariantError

OK = Outcome.success()
BUSY = Outcome.failure(ErrorClass.TRANSIENT, "busy")
DOWN = Outcome.failure(ErrorClass.OUTAGE, "refused")
AUTH = Outcome.failure(ErrorClass.CONFIGURATION, "bad key")
TOO_BIG = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "too big")

NOW = 5_000.0
# draw 0.5 and attempt 2 with factor 0.5: ceiling 2.0, delay 1.0; a random pick takes the middle candidate
CTX = RetryContext(now=NOW, attempt=2, backoff=BackoffPolicy(0.5, 30.0), rand=lambda: 0.5)
DELAY = 1.0
PING = 45.0
POLICY = FailoverPolicy(failover_interval=60.0, ping_primary_interval=PING)
IMMEDIATE = FailoverPolicy(failover_interval=0.0, ping_primary_interval=PING)
READMIT = 30.0
NS = "ns1"

HEALTHY = PairedState()
TIMING = PairedState(failing_since=NOW - 30)
EXPIRED = PairedState(failing_since=NOW - 60)
FAILED_OVER = PairedState(failing_since=NOW - 120, failed_over_at=NOW - 60)
ENGAGE = EngageFailover(NOW, "failover_interval passed with no successful send")

# Where rendezvous hashing puts the table's keys among four queues (checked below).
A, B, C = "a", "b", "c"  # a -> 2, b -> 3, c -> 1 (2 without queue 1)
REFUSED = "too_large_for_backlog: 262200 > 262144"
WAITS = Hold(PING, f"waits for the primary: {REFUSED}")


def path(index: int) -> str:
    return f"{NS}/x-servicebus-transfer/{index}"


def view(
    state: PairedState = FAILED_OVER,
    *,
    policy: FailoverPolicy = POLICY,
    ordered: bool = True,
    ledger: dict[int, str] | None = None,
    removed: dict[int, float] | None = None,
    current: int | None = None,
    sticky: dict[str, int] | None = None,
    readmit_after: float | None = READMIT,
    backlog: bool = True,
) -> PairedView:
    side = BacklogView(BacklogRotation(4, removed or {}), current, sticky or {}) if backlog else None
    return PairedView(
        state=state,
        policy=policy,
        retry=CTX,
        namespace=NS,
        ordered=ordered,
        readmit_after=readmit_after,
        syphon_retry_interval=1.5,
        ledger=ledger or {},
        backlog=side,
    )


def entries(*keys: str | None, refused: tuple[int, ...] = ()) -> list[BatchEntry]:
    return [BatchEntry(key, REFUSED if i in refused else None) for i, key in enumerate(keys)]


def sends(plan: PairedPlan) -> dict[int, tuple[int, ...]]:
    assert all(send.path == path(send.index) for send in plan.to_backlog)
    assert [send.index for send in plan.to_backlog] == sorted(send.index for send in plan.to_backlog)
    return {send.index: send.members for send in plan.to_backlog}


def test_the_tables_keys_land_where_they_say() -> None:
    assert [rendezvous_backlog(k, (0, 1, 2, 3)) for k in (A, B, C)] == [2, 3, 1]
    assert rendezvous_backlog(C, (0, 2, 3)) == 2


TIMEOUT = 900.0
SENT_NOW = "sent:" + barrier_token("n1", NOW - 10, 0)
SENT_LONG_AGO = "sent:" + barrier_token("n1", NOW - TIMEOUT, 0)
RESENT = "sent:" + barrier_token("n2", NOW - 10, 2)


@pytest.mark.parametrize(
    ("status", "due"),
    [
        ("open", True),
        ("wait:" + barrier_token("n1", NOW, 0), True),
        (SENT_NOW, False),
        (RESENT, False),
        (SENT_LONG_AGO, True),  # not passed within the timeout: lost, a new barrier is due
        ("sent:t1", True),  # a token without a send time counts as overdue
        ("", False),
    ],
)
def test_barrier_due(status: str, due: bool) -> None:
    assert barrier_due(status, NOW, TIMEOUT) is due


@pytest.mark.parametrize(
    ("status", "read"),
    [
        ("open", BarrierStatus("open")),
        ("wait:" + barrier_token("n1", NOW, 1), BarrierStatus("sending", NOW, 1)),
        (SENT_NOW, BarrierStatus("waiting", NOW - 10, 0)),
        (SENT_LONG_AGO, BarrierStatus("lost", NOW - TIMEOUT, 0, overdue=True)),
        (RESENT, BarrierStatus("lost", NOW - 10, 2)),  # re-sent after a loss: shown lost until passed
        ("sent:t1", BarrierStatus("lost", None, 0, overdue=True)),
    ],
)
def test_read_barrier(status: str, read: BarrierStatus) -> None:
    assert read_barrier(status, NOW, TIMEOUT) == read


@pytest.mark.parametrize(
    ("status", "resends"),
    [("open", 0), (SENT_LONG_AGO, 1), ("wait:" + barrier_token("n1", NOW, 3), 3), ("sent:t1", 1)],
)
def test_a_replacement_barrier_counts_its_resends(status: str, resends: int) -> None:
    token = next_barrier_token(status, "n9", NOW, TIMEOUT)
    assert token == barrier_token("n9", NOW, resends)
    assert read_barrier("sent:" + token, NOW + 1, TIMEOUT).resends == resends


# ---- the primary


@pytest.mark.parametrize(
    ("state", "ordered", "ledger", "to_primary", "barriers"),
    [
        (HEALTHY, True, {}, (0, 1, 2), ()),
        (TIMING, True, {}, (0, 1, 2), ()),  # a running timer still sends to the primary
        (HEALTHY, False, {0: "open"}, (0, 1, 2), ()),  # fast mode keeps no ledger: straight to the primary
        # ordered restore: a barrier to each queue not known to hold one yet, the primary waits
        (HEALTHY, True, {0: "open", 2: SENT_NOW, 5: "wait:t2"}, (), (0, 5)),
        (HEALTHY, True, {2: SENT_NOW}, (), ()),
        # a barrier not passed within the timeout is lost: another one goes to its queue
        (HEALTHY, True, {2: SENT_NOW, 3: SENT_LONG_AGO}, (), (3,)),
    ],
)
def test_primary_route_table(
    state: PairedState,
    ordered: bool,
    ledger: dict[int, str],
    to_primary: tuple[int, ...],
    barriers: tuple[int, ...],
) -> None:
    v = view(state, ordered=ordered, ledger=ledger, backlog=False)
    plan = plan_batch(entries(A, None, A), v)
    assert (plan.route, plan.to_primary, plan.barriers) == ("primary", to_primary, barriers)
    assert plan.to_backlog == () and plan.open == () and plan.changes == ()
    if to_primary:
        assert plan.decided == {}
        return
    waiting = ", ".join(str(i) for i in sorted(ledger))
    wait = Retry(
        1.5,
        f"ordered restore: this shard's messages in backlog queue(s) {waiting} are not syphoned yet",
        (PRIMARY,),
        backoff=False,
    )
    assert settle_batch(plan, v, {}).settlements == (wait, wait, wait)


@pytest.mark.parametrize(
    ("state", "policy", "outcome", "expected"),
    [
        (HEALTHY, POLICY, OK, Ack((PRIMARY,))),
        (TIMING, POLICY, OK, Ack((PRIMARY,), changes=(MarkAvailable(NOW, "primary send succeeded"),))),
        (HEALTHY, POLICY, TOO_BIG, DeadLetter("message_permanent on primary: too big")),
        (
            HEALTHY,
            POLICY,
            BUSY,
            Retry(DELAY, "transient on primary: busy", (PRIMARY,), changes=(RecordError(NOW, "busy"),)),
        ),
        (
            HEALTHY,
            POLICY,
            DOWN,
            Retry(
                DELAY,
                "outage on primary: refused",
                (PRIMARY,),
                changes=(RecordError(NOW, "refused"), StartTimer(NOW)),
            ),
        ),
        (
            TIMING,
            POLICY,
            DOWN,
            Retry(DELAY, "outage on primary: refused", (PRIMARY,), changes=(RecordError(NOW, "refused"),)),
        ),
        (
            HEALTHY,
            POLICY,
            AUTH,
            Retry(
                DELAY,
                "configuration on primary: bad key",
                (PRIMARY,),
                changes=(RecordError(NOW, "bad key"), StartTimer(NOW)),
                alerts=("configuration error on primary: bad key",),
            ),
        ),
        # the retry is not later than the moment failover engages (0.25 s left, backoff 1 s)
        (
            PairedState(failing_since=NOW - 59.75),
            POLICY,
            DOWN,
            Retry(0.25, "outage on primary: refused", (PRIMARY,), changes=(RecordError(NOW, "refused"),)),
        ),
        # failover_interval 0: the first failure engages it, and the next round goes to the backlog at once
        (
            HEALTHY,
            IMMEDIATE,
            DOWN,
            Retry(
                0.0,
                "outage on primary: refused",
                (PRIMARY,),
                changes=(
                    RecordError(NOW, "refused"),
                    StartTimer(NOW),
                    EngageFailover(NOW, "no successful send for 0s: refused"),
                ),
            ),
        ),
    ],
)
def test_primary_outcome_table(
    state: PairedState, policy: FailoverPolicy, outcome: Outcome, expected: Settlement
) -> None:
    v = view(state, policy=policy, backlog=False)
    plan = plan_batch(entries(A), v)
    assert plan.to_primary == (0,)
    settled = settle_batch(plan, v, {0: outcome})
    assert settled.settlements == (expected,)
    assert settled.current == ()


# ---- the backlog: where each entry goes, which keys wait

LEFT = "its backlog queue {} left the rotation; its messages there go first"

PLACEMENT: list[tuple[str, list[BatchEntry], dict[str, Any], dict[int, tuple[int, ...]], dict[int, Hold]]] = [
    ("ordered: new keys go to their rendezvous queue", entries(A, B, A), {}, {2: (0, 2), 3: (1,)}, {}),
    ("ordered: a key keeps the queue it sticks to", entries(A), {"sticky": {A: 1}}, {1: (0,)}, {}),
    (
        "ordered: a new key is placed among the queues in rotation only",
        entries(C),
        {"removed": {1: NOW}},
        {2: (0,)},
        {},
    ),
    (
        "ordered: a key whose queue left the rotation waits until it may be readmitted; the others go",
        entries(A, B, A),
        {"sticky": {A: 1}, "removed": {1: NOW - 10}},
        {3: (1,)},
        {
            0: Hold(20.0, LEFT.format(1), awaits=QUEUE_AWAITS),
            2: Hold(20.0, LEFT.format(1), awaits=QUEUE_AWAITS),
        },
    ),
    (
        "ordered: never readmitted, the held key looks again after one ping interval",
        entries(A),
        {"sticky": {A: 1}, "removed": {1: NOW - 10}, "readmit_after": None},
        {},
        {0: Hold(PING, LEFT.format(1), awaits=QUEUE_AWAITS)},
    ),
    (
        "ordered: a queue about to be readmitted is looked at again soon, not at once",
        entries(A),
        {"sticky": {A: 1}, "removed": {1: NOW - 29.95}},
        {},
        {0: Hold(0.1, LEFT.format(1), awaits=QUEUE_AWAITS)},
    ),
    (
        "ordered: a queue beyond the count (the count was lowered) holds its key like a removed one",
        entries(A),
        {"sticky": {A: 7}},
        {},
        {0: Hold(READMIT, LEFT.format(7), awaits=QUEUE_AWAITS)},
    ),
    (
        "keyless: this worker's current queue",
        entries(None, None),
        {"current": 1},
        {1: (0, 1)},
        {},
    ),
    (
        "keyless: no current queue, a random one in rotation, kept for the batch",
        entries(None, None),
        {},
        {2: (0, 1)},
        {},
    ),
    (
        "keyless: the current queue left the rotation, a random one among the rest",
        entries(None, None),
        {"current": 1, "removed": {1: NOW}},
        {2: (0, 1)},
        {},
    ),
    (
        "fast: keys do not stick, everything goes to the current queue",
        entries(A, B, None),
        {"ordered": False, "current": 0, "sticky": {A: 1}},
        {0: (0, 1, 2)},
        {},
    ),
    (
        "ordered: keyed and keyless entries, one send per queue, in queue order",
        entries(B, None, A, None),
        {"current": 0},
        {0: (1, 3), 2: (2,), 3: (0,)},
        {},
    ),
    (
        "cannot be aliased: waits for the primary and holds back the later entries of its key only",
        entries(A, B, A, refused=(0,)),
        {},
        {3: (1,)},
        {0: WAITS, 2: WAITS},
    ),
    (
        "cannot be aliased, keyless: waits alone",
        entries(None, None, refused=(0,)),
        {"current": 1},
        {1: (1,)},
        {0: WAITS},
    ),
    (
        "cannot be aliased after its key's first entry went: only it and the later ones wait",
        entries(A, A, A, refused=(1,)),
        {},
        {2: (0,)},
        {1: WAITS, 2: WAITS},
    ),
    (
        "fast: a refused message holds back its key too",
        entries(A, A, B, refused=(0,)),
        {"ordered": False, "current": 3},
        {3: (2,)},
        {0: WAITS, 1: WAITS},
    ),
]


@pytest.mark.parametrize(
    ("batch", "options", "to_backlog", "decided"),
    [case[1:] for case in PLACEMENT],
    ids=[case[0] for case in PLACEMENT],
)
def test_backlog_placement_table(
    batch: list[BatchEntry],
    options: dict[str, Any],
    to_backlog: dict[int, tuple[int, ...]],
    decided: dict[int, Hold],
) -> None:
    v = view(**options)
    plan = plan_batch(batch, v)
    assert plan.route == "backlog" and plan.to_primary == () and plan.barriers == ()
    assert sends(plan) == to_backlog
    assert dict(plan.decided) == decided
    # every key held is named with the Hold of its first held entry
    first: dict[str, Hold] = {}
    for position, hold in sorted(decided.items()):
        key = batch[position].key
        if key is not None:
            first.setdefault(key, hold)
    assert dict(plan.held) == first


@pytest.mark.parametrize(
    ("batch", "options", "opened", "assigned"),
    [
        (entries(A, B, A), {}, (2, 3), {A: 2, B: 3}),
        (entries(A), {"sticky": {A: 1}}, (1,), {}),  # already sticks: nothing new to record
        (entries(None), {"current": 1}, (1,), {}),  # a keyless send opens its queue too
        (entries(A, B), {"sticky": {A: 1}, "removed": {1: NOW}}, (3,), {B: 3}),  # the held key opens nothing
        (entries(A, refused=(0,)), {}, (), {}),  # nothing sent: nothing recorded
        (entries(A, B), {"ordered": False, "current": 1}, (), {}),  # fast mode keeps no ledger
    ],
)
def test_ledger_intent_table(
    batch: list[BatchEntry], options: dict[str, Any], opened: tuple[int, ...], assigned: dict[str, int]
) -> None:
    plan = plan_batch(batch, view(**options))
    assert plan.open == opened
    assert dict(plan.assign) == assigned


def test_every_queue_out_of_rotation_retries_the_batch_and_records_the_error() -> None:
    # Given every backlog queue removed just now
    v = view(removed=dict.fromkeys(range(4), NOW))
    # When a batch is planned
    plan = plan_batch(entries(A, None), v)
    # Then the batch is still on the backlog route, nothing is sent, the error is recorded, and the shard
    # backs off
    assert plan.route == "backlog" and plan.to_backlog == () and plan.open == ()
    retry = Retry(DELAY, OUT_OF_ROTATION, (PRIMARY,), changes=(RecordError(NOW, OUT_OF_ROTATION),))
    assert settle_batch(plan, v, {}).settlements == (retry, retry)
    # And once they may be readmitted, they are used again
    assert sends(plan_batch(entries(None), view(removed=dict.fromkeys(range(4), NOW - READMIT)))) == {2: (0,)}


def test_an_expired_timer_engages_failover_on_every_settlement_of_the_batch() -> None:
    # Given a FailoverInterval timer that has just run out: the batch goes to the backlog
    v = view(EXPIRED, sticky={B: 1}, removed={1: NOW - 10})
    plan = plan_batch(entries(A, B), v)
    assert plan.changes == (ENGAGE,)
    # When the send of A's entry is accepted (B's queue left the rotation)
    settled = settle_batch(plan, v, {0: OK})
    # Then both settlements carry the engagement, before their own changes
    assert settled.settlements == (
        Ack((backlog_target(path(2)),), changes=(ENGAGE,)),
        Hold(20.0, LEFT.format(1), changes=(ENGAGE,), awaits=QUEUE_AWAITS),
    )
    # And with nothing in rotation it comes before the recorded error
    empty = view(EXPIRED, removed=dict.fromkeys(range(4), NOW))
    retry = settle_batch(plan_batch(entries(A), empty), empty, {}).settlements[0]
    assert isinstance(retry, Retry)
    assert retry.changes == (ENGAGE, RecordError(NOW, OUT_OF_ROTATION))


def test_the_backlog_route_needs_the_backlog_view() -> None:
    with pytest.raises(InvariantError, match="backlog view"):
        plan_batch(entries(A), view(backlog=False))


# ---- the backlog: outcomes


def _removed(index: int, outcome: Outcome) -> tuple[RemoveFromRotation, ...]:
    return (RemoveFromRotation(index, NOW, outcome.error or ""),)


def _queue_failed(delay: float, error: str, outcome: Outcome) -> Hold:
    """The hold of a message whose backlog queue 2 failed with ``outcome`` (it waits for the queue)."""
    return Hold(delay, f"backlog queue 2 failed: {error}", changes=_removed(2, outcome), awaits=QUEUE_AWAITS)


@pytest.mark.parametrize(
    ("key", "ordered", "outcome", "expected"),
    [
        (A, True, OK, Ack((backlog_target(path(2)),))),
        (None, True, OK, Ack((backlog_target(path(2)),))),
        # refused for good: the message may fit the primary un-aliased; the queue is not at fault
        (A, True, TOO_BIG, Hold(PING, "rejected by backlog queue 2: too big")),
        (None, True, TOO_BIG, Hold(PING, "rejected by backlog queue 2: too big")),
        # the queue failed: it leaves the rotation; a key that sticks to it waits for it ...
        (A, True, DOWN, _queue_failed(READMIT, "refused", DOWN)),
        (A, True, BUSY, _queue_failed(READMIT, "busy", BUSY)),
        (A, True, AUTH, _queue_failed(READMIT, "bad key", AUTH)),
        # ... any other message tries another queue shortly
        (None, True, DOWN, _queue_failed(REROUTE_DELAY, "refused", DOWN)),
        (A, False, DOWN, _queue_failed(REROUTE_DELAY, "refused", DOWN)),
    ],
)
def test_backlog_outcome_table(
    key: str | None, ordered: bool, outcome: Outcome, expected: Settlement
) -> None:
    v = view(ordered=ordered, current=2)
    plan = plan_batch(entries(key), v)
    assert sends(plan) == {2: (0,)}
    assert settle_batch(plan, v, {0: outcome}).settlements == (expected,)


def test_a_failed_queue_holds_a_sticky_key_one_ping_interval_when_never_readmitted() -> None:
    v = view(readmit_after=None)
    plan = plan_batch(entries(A), v)
    assert settle_batch(plan, v, {0: DOWN}).settlements == (
        Hold(PING, "backlog queue 2 failed: refused", changes=_removed(2, DOWN), awaits=QUEUE_AWAITS),
    )


@pytest.mark.parametrize(
    ("outcomes", "current"),
    [
        ((OK, OK), (CurrentBacklog(1, adopt=True),)),
        ((DOWN, DOWN), (CurrentBacklog(1, adopt=False),)),
        # a later batch of the send failed: forgotten, then adopted again (its first message went)
        ((OK, DOWN), (CurrentBacklog(1, adopt=False), CurrentBacklog(1, adopt=True))),
        ((TOO_BIG, OK), ()),  # the message's fault, not the queue's; adopted only when the first went
        ((OK, TOO_BIG), (CurrentBacklog(1, adopt=True),)),
    ],
)
def test_current_queue_updates_table(
    outcomes: tuple[Outcome, Outcome], current: tuple[CurrentBacklog, ...]
) -> None:
    v = view(current=1)
    plan = plan_batch(entries(None, None), v)
    assert settle_batch(plan, v, dict(enumerate(outcomes))).current == current


def test_current_queue_updates_follow_the_sends_in_queue_order() -> None:
    # Given a keyless entry for the current queue 0 and a key for queue 2
    v = view(current=0)
    plan = plan_batch(entries(None, A), v)
    assert sends(plan) == {0: (0,), 2: (1,)}
    # When queue 0 fails and queue 2 takes its message
    settled = settle_batch(plan, v, {0: DOWN, 1: OK})
    # Then queue 0 stops being current and queue 2 becomes it
    assert settled.current == (CurrentBacklog(0, adopt=False), CurrentBacklog(2, adopt=True))


def test_a_sent_entry_without_an_outcome_is_a_bug() -> None:
    v = view(current=1)
    plan = plan_batch(entries(None, None), v)
    with pytest.raises(InvariantError, match="no outcome"):
        settle_batch(plan, v, {0: OK})


def test_a_barrier_token_carries_its_send_time_in_milliseconds() -> None:
    assert barrier_token("n1", 1.5, 2) == "n1.1500.2"
    assert read_barrier("sent:n1.1500.2", now=1.6, timeout=10.0) == BarrierStatus("lost", 1.5, 2, False)


def test_a_damaged_barrier_token_counts_as_overdue() -> None:
    assert read_barrier("sent:n1.soon.2", now=1.6, timeout=10.0) == BarrierStatus("lost", None, 0, True)


# ---- the backlog: the secondary's address refused connections

REFUSED_ADDRESS = Outcome.failure(ErrorClass.OUTAGE, "connection refused", address_refused=True)


def _refused_view(*, accepting: bool, sticky: dict[str, int] | None = None) -> PairedView:
    every_queue_out = BacklogRotation(4, dict.fromkeys(range(4), NOW), refused=frozenset(range(4)))
    return replace(view(), backlog=BacklogView(every_queue_out, None, sticky or {}, accepting=accepting))


def test_a_queue_whose_address_refused_is_looked_at_again_within_a_second() -> None:
    v = view(current=2)
    plan = plan_batch(entries(A), v)

    assert settle_batch(plan, v, {0: REFUSED_ADDRESS}).settlements == (
        Hold(
            1.0,
            "backlog queue 2 failed: connection refused",
            changes=(RemoveFromRotation(2, NOW, "connection refused", refused=True),),
            awaits=("primary", "secondary"),
        ),
    )


def test_a_key_held_for_a_refused_queue_waits_a_second_not_the_readmission() -> None:
    rotation = BacklogRotation(4, {2: NOW}, refused=frozenset({2}))
    plan = plan_batch(entries(A), replace(view(), backlog=BacklogView(rotation, None, {A: 2})))

    assert plan.decided == {
        0: Hold(
            1.0,
            "its backlog queue 2 left the rotation; its messages there go first",
            awaits=("primary", "secondary"),
        )
    }


def test_queues_out_because_the_address_refused_are_back_once_it_accepts() -> None:
    assert plan_batch(entries(None), _refused_view(accepting=False)).to_backlog == ()
    assert sends(plan_batch(entries(None), _refused_view(accepting=True))) != {}
