"""The drainer's settle plan: from a batch's settlements and the tenure's state to what happens to each
entry and to the shard (``bridge.core.settle``). Pure: no Redis, no namespace."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pytest

from bridge.core.abandoned import Waits
from bridge.core.decisions import (
    PRIMARY,
    SECONDARY,
    Ack,
    DeadLetter,
    Hold,
    Retry,
    SendNext,
    Settlement,
    backlog_target,
)
from bridge.core.paired import RecordError
from bridge.core.roles import Role, Swap
from bridge.core.settle import (
    Acknowledge,
    DeadLetterEntry,
    Fate,
    HoldKey,
    SettlePlan,
    StayPending,
    Stop,
    plan_settlement,
)
from bridge.errors import InvariantError

NOW = 1000.0
ENTITY = "orders"
BACKLOG = "ns/x-servicebus-transfer/0"

ACK = Ack((PRIMARY,))
TOO_BIG = DeadLetter("message_permanent on primary: too big")
DOWN = Retry(2.0, "outage on primary: refused", (PRIMARY,))
BARRIER = Retry(0.5, "ordered restore", (PRIMARY,), backoff=False)
MISSING_SECONDARY = Retry(1.0, "outage on secondary", (SECONDARY,), delivered_to=(PRIMARY,))
WAIT = Hold(30.0, "waits for the primary: too large once aliased")
QUEUE_GONE = Hold(5.0, "backlog queue 0 failed")


def _plan(
    settlements: Sequence[Settlement],
    keys: Sequence[str] | None = None,
    *,
    held: Collection[str] = (),
    waits: Waits | None = None,
    own_waits: Collection[tuple[Role, str]] = (),
) -> SettlePlan:
    keys = [f"entry:{i}" for i in range(len(settlements))] if keys is None else keys
    return plan_settlement(
        settlements, keys, held=held, waits=waits or {}, own_waits=own_waits, entity=ENTITY, now=NOW
    )


CASES: list[tuple[str, list[Settlement], list[str], list[str], tuple[Fate, ...], Stop | None]] = [
    # (case, settlements, keys, keys held already, fates, stop)
    ("every entry accepted", [ACK, ACK], ["key:a", "key:b"], [], (Acknowledge(), Acknowledge()), None),
    (
        "a dead-letter among acks",
        [ACK, TOO_BIG, ACK],
        ["key:a", "key:a", "key:b"],
        [],
        (Acknowledge(), DeadLetterEntry(TOO_BIG.reason), Acknowledge()),
        None,
    ),
    (
        "a retry stops the shard; an ack of another key after it is still an ack",
        [DOWN, ACK],
        ["key:a", "key:b"],
        [],
        (StayPending(), Acknowledge()),
        Stop(NOW + 2.0, 2.0, True, DOWN.reason, NOW, (PRIMARY,)),
    ),
    (
        "the first retry decides the stop; every retry remembers where it landed",
        [MISSING_SECONDARY, DOWN],
        ["key:a", "key:b"],
        [],
        (StayPending((PRIMARY,)), StayPending()),
        Stop(NOW + 1.0, 1.0, True, MISSING_SECONDARY.reason, NOW, (SECONDARY,)),
    ),
    (
        "a planned wait is not a backoff",
        [BARRIER, BARRIER],
        ["key:a", "key:b"],
        [],
        (StayPending(), StayPending()),
        Stop(NOW + 0.5, 0.5, False, BARRIER.reason, NOW, (PRIMARY,)),
    ),
    (
        "a hold holds its key once; other keys go on",
        [WAIT, WAIT, ACK],
        ["key:a", "key:a", "key:b"],
        [],
        (HoldKey("key:a", NOW + 30.0, 30.0, WAIT.reason), StayPending(), Acknowledge()),
        None,
    ),
    (
        "a key held already is not held again",
        [QUEUE_GONE, WAIT],
        ["key:a", "key:b"],
        ["key:a"],
        (StayPending(), HoldKey("key:b", NOW + 30.0, 30.0, WAIT.reason)),
        None,
    ),
    (
        "holds, a dead-letter and a retry in one batch",
        [WAIT, TOO_BIG, DOWN, ACK],
        ["key:a", "key:b", "key:c", "entry:9"],
        [],
        (
            HoldKey("key:a", NOW + 30.0, 30.0, WAIT.reason),
            DeadLetterEntry(TOO_BIG.reason),
            StayPending(),
            Acknowledge(),
        ),
        Stop(NOW + 2.0, 2.0, True, DOWN.reason, NOW, (PRIMARY,)),
    ),
]


@pytest.mark.parametrize(
    ("settlements", "keys", "held", "fates", "stop"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_settle_plan_table(
    settlements: list[Settlement],
    keys: list[str],
    held: list[str],
    fates: tuple[Fate, ...],
    stop: Stop | None,
) -> None:
    plan = _plan(settlements, keys, held=held)
    assert plan.fates == fates
    assert plan.stop == stop
    assert plan.now == NOW


def test_a_key_held_for_its_backlog_queue_waits_for_the_namespaces_its_hold_names() -> None:
    # Given a hold for a backlog queue that left the rotation: the failover's end or the queue's namespace
    # coming back decides the key again
    hold = Hold(5.0, "its backlog queue 0 left the rotation", awaits=("primary", "secondary"))
    # Then the held key waits for both, not for the primary alone
    assert _plan([hold], ["key:a"]).fates == (
        HoldKey("key:a", NOW + 5.0, 5.0, hold.reason, ("primary", "secondary")),
    )


@pytest.mark.parametrize(
    ("settlements", "behind"),
    [
        ([ACK, ACK], True),
        ([], True),
        ([ACK, TOO_BIG], False),
        ([ACK, WAIT], False),
        ([DOWN], False),
        ([ACK, Ack((PRIMARY,), changes=(RecordError(NOW, "x"),))], False),
    ],
)
def test_only_a_batch_accepted_whole_without_changes_is_settled_behind(
    settlements: list[Settlement], behind: bool
) -> None:
    assert _plan(settlements).behind is behind


def test_changes_are_applied_once_each_in_order_and_every_alert_is_kept() -> None:
    swap = Swap("primary", "secondary", 1, 2, NOW, "outage")
    error = RecordError(NOW, "refused")
    settlements: list[Settlement] = [
        Retry(1.0, "down", (PRIMARY,), changes=(swap,), alerts=("auth failed",)),
        Retry(1.0, "down", (PRIMARY,), changes=(swap, error), alerts=("auth failed",)),
        Ack((SECONDARY,), changes=(error,)),
    ]
    plan = _plan(settlements)
    assert plan.changes == (swap, error)
    assert plan.alerts == ("auth failed", "auth failed")


@pytest.mark.parametrize(
    ("retry", "waits", "own", "retry_after"),
    [
        # an inherited wait on the path the retry waits for raises the backoff to its end
        (DOWN, {("primary", ENTITY): NOW + 7.0}, [], 7.0),
        # ... but never lowers it
        (DOWN, {("primary", ENTITY): NOW + 1.0}, [], 2.0),
        # the tenure's own wait holds nothing back: its retry carries the abandoned messages
        (DOWN, {("primary", ENTITY): NOW + 7.0}, [("primary", ENTITY)], 2.0),
        # a wait on a path the retry does not wait for
        (DOWN, {("secondary", ENTITY): NOW + 7.0}, [], 2.0),
        (DOWN, {("primary", "invoices"): NOW + 7.0}, [], 2.0),
        # a backlog queue is its own path
        (Retry(0.1, "q", (backlog_target(BACKLOG),)), {("secondary", BACKLOG): NOW + 3.0}, [], 3.0),
        # a wait that is over
        (DOWN, {("primary", ENTITY): NOW - 1.0}, [], 2.0),
    ],
)
def test_a_retry_waits_for_inherited_abandoned_sends_on_its_paths(
    retry: Retry, waits: Waits, own: list[tuple[Role, str]], retry_after: float
) -> None:
    plan = _plan([retry], waits=waits, own_waits=own)
    assert plan.stop is not None
    assert plan.stop.until == NOW + retry_after and plan.stop.retry_after == pytest.approx(retry_after)
    assert (plan.stop.backoff, plan.stop.reason) == (True, retry.reason)


@pytest.mark.parametrize(
    ("waits", "floor"),
    [
        ({}, NOW),
        # a namespace seen back never ends the backoff before an inherited abandoned send's wait
        ({("primary", ENTITY): NOW + 7.0}, NOW + 7.0),
        ({("primary", ENTITY): NOW + 1.0}, NOW + 1.0),
        ({("secondary", ENTITY): NOW + 7.0}, NOW),
    ],
)
def test_a_backoff_may_end_early_but_not_before_the_inherited_waits_of_its_paths(
    waits: Waits, floor: float
) -> None:
    plan = _plan([DOWN], waits=waits)
    assert plan.stop is not None and plan.stop.floor == pytest.approx(floor)


def test_settlements_and_keys_must_pair_up() -> None:
    with pytest.raises(InvariantError):
        _plan([ACK, ACK], ["key:a"])


def test_a_send_decision_left_over_is_a_bug_found_before_anything_is_carried_out() -> None:
    with pytest.raises(InvariantError, match="unexpected decision"):
        _plan([ACK, SendNext((SECONDARY,))], ["key:a", "key:b"])  # type: ignore[list-item]
