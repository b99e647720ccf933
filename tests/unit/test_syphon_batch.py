"""The syphon's batch plan (``bridge.core.syphon_batch``): what is settled first, what is sent together,
which barriers pass, what is set aside when a run stops, which numbers are recorded before deferral."""

from __future__ import annotations

from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.syphon import SyphonAction, SyphonDecision
from bridge.core.syphon_batch import (
    STOPPED,
    after_send,
    leftovers,
    passing_barriers,
    send_groups,
    settle_first,
    to_record,
)

SEND = SyphonDecision(SyphonAction.SEND)
ASIDE = SyphonDecision(SyphonAction.SET_ASIDE, "destination orders is failed over")
DEAD = SyphonDecision(SyphonAction.DEAD_LETTER, "not_aliased: x")
BARRIER = SyphonDecision(SyphonAction.PASS_BARRIER)

# A batch: orders, audit, a bad message, orders, audit's barrier, orders' barrier.
PLAN = [SEND, SEND, DEAD, SEND, BARRIER, BARRIER]
DESTINATIONS = ["orders", "audit", None, "orders", "audit", "orders"]


def test_settle_first_takes_everything_but_sends_and_barriers() -> None:
    assert settle_first([SEND, ASIDE, DEAD, BARRIER]) == {1: ASIDE, 2: DEAD}


def test_send_groups_keep_receive_order_within_and_first_appearance_across() -> None:
    groups = send_groups(PLAN, DESTINATIONS)
    assert groups == {"orders": [0, 3], "audit": [1]}
    assert list(groups) == ["orders", "audit"]


def test_after_send_completes_the_accepted_and_judges_the_failed() -> None:
    # Given a group of three where the second failed for a passing reason
    busy = Outcome.failure(ErrorClass.TRANSIENT, "server busy")
    verdict = after_send([4, 7, 9], {0, 2}, {1: busy}, "orders")
    # Then the others complete, the second is set aside, and the run may wait before polling again
    assert [verdict.decisions[i].action for i in (4, 7, 9)] == [
        SyphonAction.COMPLETE,
        SyphonAction.SET_ASIDE,
        SyphonAction.COMPLETE,
    ]
    assert verdict.passing_failure and verdict.stopped is None


def test_after_send_an_outage_stops_the_run_and_sets_the_message_aside() -> None:
    down = Outcome.failure(ErrorClass.OUTAGE, "connection lost")
    verdict = after_send([2], set(), {0: down}, "orders")
    assert verdict.decisions == {2: SyphonDecision(SyphonAction.SET_ASIDE, "connection lost")}
    assert verdict.stopped == "primary failed for orders: connection lost"
    assert not verdict.passing_failure  # a stop is no reason to wait a retry interval: the run ends


def test_after_send_a_missing_destination_dead_letters() -> None:
    missing = Outcome.failure(ErrorClass.MESSAGE_PERMANENT, "gone", entity_missing=True)
    verdict = after_send([0], set(), {0: missing}, "orders")
    assert verdict.decisions[0].action is SyphonAction.DEAD_LETTER
    assert verdict.decisions[0].reason.startswith("destination_missing: orders")


def test_barriers_pass_when_nothing_of_their_destination_was_set_aside_before_them() -> None:
    assert passing_barriers(PLAN, DESTINATIONS, set_aside=set(), stopped=False) == {4: BARRIER, 5: BARRIER}


def test_a_barrier_behind_a_set_aside_message_of_its_destination_does_not_pass() -> None:
    # orders' message 3 was set aside: orders' barrier (5) waits; audit's (4) passes
    assert passing_barriers(PLAN, DESTINATIONS, set_aside={3}, stopped=False) == {4: BARRIER}
    # a set-aside message after the barrier does not hold it
    assert passing_barriers([BARRIER, SEND], ["orders", "orders"], set_aside={1}, stopped=False) == {
        0: BARRIER
    }


def test_no_barrier_passes_once_the_run_stopped() -> None:
    assert passing_barriers(PLAN, DESTINATIONS, set_aside=set(), stopped=True) == {}


def test_leftovers_are_set_aside_in_index_order() -> None:
    left = leftovers({5, 1, 3})
    assert list(left) == [1, 3, 5]
    assert all(d == SyphonDecision(SyphonAction.SET_ASIDE, STOPPED) for d in left.values())


def test_to_record_lists_the_set_aside_numbers_by_destination() -> None:
    decisions = {0: ASIDE, 1: DEAD, 2: ASIDE, 3: ASIDE, 4: SEND}
    destinations = ["orders", None, "audit", "orders", "orders"]
    numbers = [10, 11, 12, 13, 14]
    assert to_record(decisions, destinations, numbers) == {"orders": [10, 13], "audit": [12]}
    # a set-aside message with no destination (cannot be restored) has nothing to hold
    assert to_record({0: ASIDE}, [None], [7]) == {}
