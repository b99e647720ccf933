"""Fault state: scopes, precedence, validation and change notifications."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bridge.emulator.errors import ArgumentError
from bridge.emulator.faults import ActiveFault, FaultChange, FaultKind, FaultState, PenaltyWindow


def test_nothing_is_active_at_first() -> None:
    state = FaultState()
    assert state.for_namespace() is None
    assert state.for_entity("q1") is None
    assert state.snapshot() == {"namespace": None, "entities": {}}


def test_namespace_fault_applies_to_every_entity() -> None:
    state = FaultState()
    state.set("busy", probability=0.5)
    fault = state.for_entity("any/Subscriptions/thing")
    assert fault == ActiveFault(FaultKind.BUSY, None, 0.5, None)


@pytest.mark.parametrize(
    ("faults", "path", "expected"),
    [
        # Entity scope beats namespace scope for busy/stall ...
        ([("busy", None), ("stall", "q1")], "q1", ("stall", "q1")),
        ([("busy", None), ("stall", "q1")], "Q1", ("stall", "q1")),
        ([("busy", None), ("stall", "q1")], "q2", ("busy", None)),
        # ... but a namespace outage or blackhole always wins.
        ([("outage", None), ("busy", "q1")], "q1", ("outage", None)),
        ([("blackhole", None), ("busy", "q1")], "q1", ("blackhole", None)),
        # Ancestors: a topic's fault reaches its subscriptions, a queue's its dead-letter sub-queue.
        ([("outage", "t1")], "t1/Subscriptions/s1", ("outage", "t1")),
        (
            [("outage", "t1"), ("busy", "t1/subscriptions/s1")],
            "T1/Subscriptions/S1",
            ("busy", "t1/subscriptions/s1"),
        ),
        ([("stall", "q1")], "q1/$deadletterqueue", ("stall", "q1")),
        # A path prefix that is not a path boundary does not match.
        ([("outage", "q1")], "q10", None),
    ],
)
def test_precedence(
    faults: list[tuple[str, str | None]], path: str, expected: tuple[str, str] | None
) -> None:
    state = FaultState()
    for kind, entity in faults:
        state.set(kind, entity=entity)
    found = state.for_entity(path)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found.kind.value, found.entity) == expected


def test_setting_a_scope_again_replaces_its_fault_and_reports_both() -> None:
    state = FaultState()
    changes: list[FaultChange] = []
    state.subscribe(changes.append)
    first = state.set("busy", entity="q1")
    second = state.set("outage", entity="q1")
    assert state.for_entity("q1") == second
    assert changes[-1] == FaultChange(started=(second,), ended=(first,))


def test_clear_one_entity_keeps_the_rest() -> None:
    state = FaultState()
    state.set("outage")
    state.set("busy", entity="q1")
    state.set("busy", entity="q2")
    ended = state.clear("Q1")
    assert [f.entity for f in ended] == ["q1"]
    assert state.for_namespace() is not None
    assert set(state.snapshot()["entities"]) == {"q2"}


def test_clear_everything() -> None:
    state = FaultState()
    changes: list[FaultChange] = []
    state.subscribe(changes.append)
    state.set("outage")
    state.set("stall", entity="q1", delay=2)
    ended = state.clear()
    assert {f.kind for f in ended} == {FaultKind.OUTAGE, FaultKind.STALL}
    assert state.active() == []
    assert changes[-1].ended == ended


def test_clear_with_nothing_active_tells_nobody() -> None:
    state = FaultState()
    changes: list[FaultChange] = []
    state.subscribe(changes.append)
    assert state.clear() == ()
    assert state.clear("q1") == ()
    assert changes == []


def test_unsubscribe_and_failing_listener() -> None:
    state = FaultState()
    heard: list[FaultChange] = []

    def broken(change: FaultChange) -> None:
        raise RuntimeError("listener bug")

    state.subscribe(broken)
    unsubscribe = state.subscribe(heard.append)
    state.set("outage")
    assert len(heard) == 1 and state.for_namespace() is not None
    unsubscribe()
    state.clear()
    assert len(heard) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "meltdown"}, "fault: unknown kind 'meltdown'"),
        ({"kind": "busy", "probability": 1.5}, "probability"),
        ({"kind": "busy", "probability": -0.1}, "probability"),
        ({"kind": "busy", "probability": math.nan}, "probability"),
        ({"kind": "busy", "probability": "half"}, "probability"),
        ({"kind": "busy", "probability": True}, "probability"),
        ({"kind": "outage", "probability": 0.5}, "probability: applies to busy and throttle only"),
        ({"kind": "throttle"}, "window: required"),
        ({"kind": "throttle", "window": 0}, "window"),
        ({"kind": "throttle", "window": math.nan}, "window"),
        (
            {"kind": "throttle", "window": 1, "entity": "q1"},
            "entity: throttle applies to the whole namespace",
        ),
        ({"kind": "busy", "window": 1}, "window: applies to throttle only"),
        ({"kind": "stall", "delay": -1}, "delay"),
        ({"kind": "stall", "delay": math.inf}, "delay"),
        ({"kind": "stall", "delay": "1s"}, "delay"),
        ({"kind": "busy", "delay": 1}, "delay: applies to stall only"),
        ({"kind": "blackhole", "entity": "q1"}, "entity: blackhole applies to the whole namespace"),
        ({"kind": "outage", "entity": " / "}, "entity"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(kwargs: dict[str, Any], field: str) -> None:
    state = FaultState()
    state.set("busy", entity="q1", probability=0.25)
    before = state.snapshot()
    heard: list[FaultChange] = []
    state.subscribe(heard.append)
    with pytest.raises(ArgumentError, match=field):
        state.set(**kwargs)
    assert state.snapshot() == before
    assert heard == []


@pytest.mark.parametrize(
    ("probability", "draw", "expected"),
    [(1.0, 0.999, True), (0.0, 0.0, False), (0.3, 0.29, True), (0.3, 0.3, False)],
)
def test_busy_trips_by_probability(probability: float, draw: float, expected: bool) -> None:
    fault = FaultState().set("busy", probability=probability)
    assert fault.trips(lambda: draw) is expected


def test_non_busy_faults_always_trip_without_drawing() -> None:
    def never() -> float:
        raise AssertionError("must not draw")

    assert ActiveFault(FaultKind.STALL, delay=None).trips(never)
    assert ActiveFault(FaultKind.BUSY, probability=1.0).trips(never)


def test_snapshot_is_json() -> None:
    state = FaultState()
    state.set("stall", entity="Q1", delay=None)
    state.set("busy", probability=0.5)
    snap = json.loads(json.dumps(state.snapshot()))
    assert snap == {
        "namespace": {"fault": "busy", "entity": None, "probability": 0.5, "delay": None, "window": None},
        "entities": {
            "Q1": {"fault": "stall", "entity": "Q1", "probability": 1.0, "delay": None, "window": None}
        },
    }


@pytest.mark.parametrize(
    ("draws", "times", "refused"),
    [
        # a draw below the probability trips the throttle and opens the window ...
        ([0.1], [0.0, 0.5, 1.9], [True, True, True]),
        # ... which refuses everything inside it without drawing, then requests are judged afresh
        ([0.1, 0.9, 0.1, 0.1], [0.0, 2.0, 2.5, 4.4, 4.6], [True, False, True, True, True]),
        # draws above the probability never trip it
        ([0.9, 0.9, 0.9], [0.0, 1.0, 2.0], [False, False, False]),
    ],
)
def test_penalty_window(draws: list[float], times: list[float], refused: list[bool]) -> None:
    fault = FaultState().set("throttle", probability=0.5, window=2.0)
    window = PenaltyWindow()
    pending = iter(draws)
    assert [window.refuses(fault, at, lambda: next(pending)) for at in times] == refused


def test_penalty_window_ignores_other_faults() -> None:
    busy = FaultState().set("busy", probability=1.0)
    assert not PenaltyWindow().refuses(busy, 0.0, lambda: 0.0)
    assert not PenaltyWindow().refuses(None, 0.0, lambda: 0.0)
