"""The wait after an abandoned (timed-out) send: which outcomes start it, what it refuses, how long a
retry waits (``bridge.core.abandoned``)."""

from __future__ import annotations

import pytest

from bridge.core import abandoned
from bridge.core.decisions import PRIMARY, SECONDARY, backlog_target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([Outcome.success()], False),
        ([Outcome.failure(ErrorClass.TRANSIENT, "busy")], False),
        ([Outcome.failure(ErrorClass.OUTAGE, "connection refused")], False),
        ([Outcome.success(), Outcome.failure(ErrorClass.TRANSIENT, "t", timeout=True)], True),
        ([Outcome.failure(ErrorClass.OUTAGE, "deadline", timeout=True)], True),
        ([], False),
    ],
)
def test_only_a_timeout_leaves_a_send_whose_fate_is_unknown(outcomes: list[Outcome], expected: bool) -> None:
    ids = [f"m{i}" for i in range(len(outcomes))]
    assert bool(abandoned.timed_out(ids, outcomes)) is expected


def test_wait_left_is_per_namespace_and_path_and_never_negative() -> None:
    waits = {("primary", "orders"): 110.0}
    assert abandoned.wait_left(waits, "primary", "orders", 100.0) == pytest.approx(10.0)
    assert abandoned.wait_left(waits, "primary", "orders", 120.0) == 0.0
    assert abandoned.wait_left(waits, "secondary", "orders", 100.0) == 0.0
    assert abandoned.wait_left(waits, "primary", "invoices", 100.0) == 0.0


def test_a_refusal_is_transient_and_says_why_without_counting_as_a_timeout() -> None:
    outcome = abandoned.refused("primary", "orders", 2.5)
    assert not outcome.ok and outcome.error_class is ErrorClass.TRANSIENT and not outcome.timeout
    assert "AbandonedSendWait" in (outcome.error or "") and "2.5s" in (outcome.error or "")


def test_a_retry_waits_for_the_longest_wait_of_its_targets() -> None:
    backlog = "ns/x-servicebus-transfer/0"
    waits = {("primary", "orders"): 105.0, ("secondary", backlog): 108.0}
    assert abandoned.retry_floor(waits, (PRIMARY,), "orders", 100.0) == pytest.approx(5.0)
    assert abandoned.retry_floor(waits, (PRIMARY, backlog_target(backlog)), "orders", 100.0) == pytest.approx(
        8.0
    )
    assert abandoned.retry_floor(waits, (SECONDARY,), "orders", 100.0) == 0.0
    assert abandoned.retry_floor(waits, (), "orders", 100.0) == 0.0


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("3|primary|orders", (3, "primary", "orders")),
        ("0|secondary|ns/x-servicebus-transfer/1", (0, "secondary", "ns/x-servicebus-transfer/1")),
        ("1|primary|a|b", (1, "primary", "a|b")),
        ("x|primary|orders", None),
        ("1|tertiary|orders", None),
        ("junk", None),
    ],
)
def test_fields_round_trip_and_junk_is_ignored(field: str, expected: object) -> None:
    assert abandoned.decode_field(field) == expected
    if expected is not None:
        shard, role, path = expected  # type: ignore[misc]
        assert abandoned.encode_field(shard, role, path) == field


def test_a_send_may_go_during_the_wait_only_when_it_carries_every_abandoned_message_again() -> None:
    assert abandoned.resent(frozenset({"m1", "m2"}), ["m1", "m2", "m3"])
    assert not abandoned.resent(frozenset({"m1", "m2"}), ["m2", "m3"])  # m1 went elsewhere meanwhile
    assert not abandoned.resent(None, ["m1"])  # a wait inherited from another tenure: nothing known
    assert not abandoned.resent(frozenset(), ["m1"])


def test_which_messages_were_abandoned_and_when_the_wait_can_end() -> None:
    timeout = Outcome.failure(ErrorClass.TRANSIENT, "t", timeout=True)
    busy = Outcome.failure(ErrorClass.TRANSIENT, "busy")
    ok = Outcome.success()
    assert abandoned.timed_out(["a", "b", "c"], [ok, timeout, busy]) == {"b"}
    assert abandoned.all_accepted({"b"}, ["b", "c"], [ok, busy])
    assert not abandoned.all_accepted({"b", "x"}, ["b", "c"], [ok, ok])
    assert not abandoned.all_accepted({"b"}, ["b"], [timeout])
    assert not abandoned.all_accepted(set(), ["b"], [ok])


def test_no_wait_recorded_means_no_wait_at_any_time() -> None:
    assert abandoned.wait_left({}, "primary", "orders", now=0.5) == 0.0


def test_a_resend_is_the_whole_batch_abandoned_or_more() -> None:
    assert abandoned.resent(["a", "b"], ["a", "b"]) is True
    assert abandoned.resent(["a"], ["a", "b"]) is True
    assert abandoned.resent(["a", "c"], ["a", "b"]) is False
    assert abandoned.resent([], ["a"]) is False


def test_outcomes_must_match_the_message_ids_one_for_one() -> None:
    with pytest.raises(ValueError):
        abandoned.timed_out(["a", "b"], [Outcome.success()])
    with pytest.raises(ValueError):
        abandoned.all_accepted(["a"], ["a", "b"], [Outcome.success()])


def test_a_refused_send_says_how_long_the_path_still_waits() -> None:
    assert abandoned.refused("primary", "orders", 2.25).error == (
        "AbandonedSendWait: a send to orders on primary timed out; nothing newer goes there for 2.2s more"
        " (the namespace may still commit it)"
    )
