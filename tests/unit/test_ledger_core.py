"""The ledger's pure rules (``bridge.core.ledger``): the billing model (billable operations per kind), the
failover timeline, as tables."""

from __future__ import annotations

import pytest

from bridge.core.ledger import (
    DEFAULT_PRICE_PER_MILLION,
    OPERATION_KINDS,
    EventCount,
    Operations,
    TimelineEvent,
    billable_operations,
    estimate_cost,
    failover_timeline,
    price_table,
    summarize,
)


def _count(entity: str, kind: str, ns: str | None, path: str | None = None, result: str | None = None,
           events: int = 1, units: int | None = None) -> EventCount:  # fmt: skip
    return EventCount(entity, kind, ns, path, result, events, events if units is None else units)


def test_a_message_through_a_backlog_queue_costs_four_operations() -> None:
    # Given one message sent to a backlog queue, syphoned to the primary, no receiver events (implied).
    counts = [
        _count("orders", "sent", "ns2", "backlog"),
        _count("orders", "syphoned", "ns2"),
        _count("orders", "sent", "ns1", "syphon"),
    ]

    operations = billable_operations(counts)

    assert operations == [
        Operations("orders", "ns1", "receive_implied", 1),
        Operations("orders", "ns1", "syphon_send", 1),
        Operations("orders", "ns2", "backlog_receive", 1),
        Operations("orders", "ns2", "backlog_send", 1),
    ]
    assert sum(op.operations for op in operations) == 4


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        # direct send, the receiver journaled its receive: measured, not implied
        (
            [_count("e", "sent", "ns1", "direct", events=3), _count("e", "received", "ns1", events=3)],
            [Operations("e", "ns1", "receive", 3), Operations("e", "ns1", "send", 3)],
        ),
        # a backup send and no receiver events: one implied receive on the backup
        (
            [_count("e", "sent", "ns2", "backup")],
            [Operations("e", "ns2", "receive_implied", 1), Operations("e", "ns2", "send", 1)],
        ),
        # schedule-mode pings count two operations each; failed sends are not billed
        (
            [
                _count("e", "ping", "ns1", result="accepted", events=2, units=4),
                _count("e", "send_failed", "ns1"),
            ],
            [Operations("e", "ns1", "ping", 4)],
        ),
        # the syphon's empty long polls are billed; calls that returned messages are the per-message receives
        (
            [
                _count("~backlog:ns1", "syphon_receive", "ns2", result="empty", events=2, units=40),
                _count("~backlog:ns1", "syphon_receive", "ns2", result="messages", events=1, units=1),
            ],
            [Operations("~backlog:ns1", "ns2", "syphon_poll", 40)],
        ),
        # a restore barrier is a billed send of its own kind, never an implied application receive
        (
            [_count("e", "sent", "ns2", "barrier", events=2)],
            [Operations("e", "ns2", "barrier_send", 2)],
        ),
    ],
)
def test_billable_operations_per_kind(counts: list[EventCount], expected: list[Operations]) -> None:
    assert billable_operations(counts) == expected


def test_cost_of_resilience_is_the_ratio_to_one_send_and_one_receive_per_message() -> None:
    prices = price_table({"send": 2.0, "receive": 2.0, "backlog_send": 2.0, "backlog_receive": 2.0,
                          "syphon_send": 2.0, "receive_implied": 2.0})  # fmt: skip
    # Given one message delivered through the backlog (4 operations at 2 per million each)
    operations = [
        Operations("e", "ns1", "syphon_send", 1),
        Operations("e", "ns1", "receive_implied", 1),
        Operations("e", "ns2", "backlog_send", 1),
        Operations("e", "ns2", "backlog_receive", 1),
    ]

    estimate = estimate_cost(operations, delivered=1, prices=prices)

    assert estimate.operations == 4
    assert estimate.cost == pytest.approx(8e-6)
    assert estimate.baseline_operations == 2
    assert estimate.resilience_ratio == pytest.approx(2.0)
    assert estimate_cost([], delivered=0, prices=prices).resilience_ratio is None


def test_price_table_refuses_unknown_kinds_and_negative_prices() -> None:
    assert price_table({"ping": 0.5})["ping"] == 0.5
    with pytest.raises(ValueError, match="unknown operation kind"):
        price_table({"sends": 1.0})
    with pytest.raises(ValueError, match="negative"):
        price_table({"send": -1.0})


def test_failover_timeline_tells_who_was_active_when() -> None:
    events = [
        TimelineEvent(10.0, "role_swapped", "primary", "secondary"),
        TimelineEvent(20.0, "failover_engaged"),
        TimelineEvent(25.0, "backlog_rotation_changed", queue="1", result="removed"),
        TimelineEvent(50.0, "failover_ended"),
        TimelineEvent(60.0, "role_swapped", "secondary", "primary"),
    ]

    timeline = failover_timeline(events, start=0.0, end=100.0)

    assert [(s.start, s.end, s.active, s.failed_over) for s in timeline.segments] == [
        (0.0, 10.0, "primary", False),
        (10.0, 20.0, "secondary", False),
        (20.0, 50.0, "secondary", True),
        (50.0, 60.0, "secondary", False),
        (60.0, 100.0, "primary", False),
    ]
    assert (timeline.swaps, timeline.failovers, timeline.rotation_changes) == (2, 1, 1)
    assert timeline.seconds_on_secondary == 50.0
    assert timeline.seconds_failed_over == 30.0


def test_a_timeline_without_events_is_one_segment_on_the_primary() -> None:
    timeline = failover_timeline([], start=5.0, end=9.0)

    assert [(s.start, s.end, s.active) for s in timeline.segments] == [(5.0, 9.0, "primary")]
    # a repeated swap to the role already active changes nothing
    again = failover_timeline([TimelineEvent(6.0, "role_swapped", "secondary", "primary")], 5.0, 9.0)
    assert [(s.active, s.seconds) for s in again.segments] == [("secondary", 1.0), ("primary", 3.0)]


def test_summary_sums_every_contract_key() -> None:
    totals = summarize({"a": {"accepted": 2, "lost": 1}, "b": {"accepted": 3}})

    assert totals["accepted"] == 5
    assert totals["lost"] == 1
    assert totals["broker_duplicates"] == 0


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0, "0"),
        (4e-06, "0.000004"),
        (2.3e-05, "0.000023"),
        (1e-09, "< 0.000001"),
        (-1e-09, "> -0.000001"),
        (0.012, "0.01"),
        (1.5, "1.50"),
        (1234.5, "1,234"),  # no decimals from 100 on: 1,234 (banker's rounding of .5 to even)
        (-3.25, "-3.25"),
    ],
)
def test_a_report_number_is_never_in_exponent_form(value: float, shown: str) -> None:
    from bridge.ledger.html import decimal

    assert decimal(value) == shown


def test_placeholder_kinds_are_the_billed_kinds_nobody_priced() -> None:
    from bridge.core.ledger import placeholder_kinds

    billed = [
        Operations("e", "ns1", "send", 3),
        Operations("e", "ns1", "ping", 1),
        Operations("e", "ns2", "send", 1),
    ]
    assert placeholder_kinds(billed, ["send", "syphon_poll"]) == ["ping"]
    assert placeholder_kinds(billed, []) == ["ping", "send"]
    assert placeholder_kinds([], []) == []


def test_the_default_price_table_prices_every_kind_at_the_placeholder() -> None:
    assert price_table() == dict.fromkeys(OPERATION_KINDS, DEFAULT_PRICE_PER_MILLION)
    assert price_table({"ping": 0})["ping"] == 0.0  # a free kind is allowed
    with pytest.raises(ValueError) as caught:
        price_table({"sends": 1.0})
    assert str(caught.value) == f"unknown operation kind 'sends' (known: {', '.join(OPERATION_KINDS)})"


def test_rows_of_one_kind_add_up_and_a_missing_namespace_reads_as_a_question_mark() -> None:
    counts = [_count("e", "received", None, events=2), _count("e", "received", None, events=3)]

    assert billable_operations(counts) == [Operations("e", "?", "receive", 5)]


def test_the_cost_estimate_and_its_json_form() -> None:
    prices = price_table({"send": 3.0, "receive": 5.05, "ping": 1 / 3})
    operations = [Operations("e", "ns1", "send", 2_000_000), Operations("e", "ns1", "ping", 1)]

    estimate = estimate_cost(operations, delivered=2_000_001, prices=prices)

    assert estimate.cost == 6.0 + (1 / 3) / 1_000_000
    assert estimate.baseline_cost == 2_000_001 * 8.05 / 1_000_000
    assert estimate.as_dict() == {
        "operations": 2_000_001,
        "estimated_cost": 6.0,
        "baseline_operations": 4_000_002,
        "baseline_cost": 16.100008,
        "resilience_ratio": 0.3727,
        "currency": "USD",
    }
    assert estimate_cost([], delivered=0, prices=prices, currency="EUR").as_dict() == {
        "operations": 0,
        "estimated_cost": 0.0,
        "baseline_operations": 0,
        "baseline_cost": 0.0,
        "resilience_ratio": None,
        "currency": "EUR",
    }


def test_the_timeline_stretches_to_events_outside_the_window_and_counts_every_change() -> None:
    events = [
        TimelineEvent(-5.0, "failover_engaged"),  # before the window's start
        TimelineEvent(3.0, "failover_ended"),
        TimelineEvent(4.0, "backlog_rotation_changed", queue="1", result="removed"),
        TimelineEvent(6.0, "backlog_rotation_changed", queue="1", result="readmitted"),
        TimelineEvent(6.5, "failover_ended"),  # not failed over: nothing to end
        TimelineEvent(7.0, "failover_engaged"),
        TimelineEvent(7.5, "failover_engaged"),  # already failed over
        TimelineEvent(8.0, "failover_ended"),
        TimelineEvent(12.0, "role_swapped", "primary", "secondary"),  # after the window's end
    ]

    timeline = failover_timeline(events, start=0.0, end=10.0)

    assert timeline.as_dict() == {
        "swaps": 1,
        "failovers": 2,
        "rotation_changes": 2,
        "seconds_on_secondary": 0.0,
        "seconds_failed_over": 9.0,
        "segments": [
            {"start": -5.0, "end": 3.0, "active": "primary", "failed_over": True},
            {"start": 3.0, "end": 7.0, "active": "primary", "failed_over": False},
            {"start": 7.0, "end": 8.0, "active": "primary", "failed_over": True},
            {"start": 8.0, "end": 12.0, "active": "primary", "failed_over": False},
        ],
    }
    assert timeline.first_failover_at == -5.0


def test_the_first_swap_that_names_its_origin_sets_the_starting_role() -> None:
    events = [
        TimelineEvent(1.0, "role_swapped"),  # names neither role: ignored
        TimelineEvent(2.0, "role_swapped", None, "secondary"),
        TimelineEvent(4.0, "role_swapped", "secondary", "primary"),
    ]

    timeline = failover_timeline(events, start=0.0, end=10.0)

    assert [(s.start, s.end, s.active) for s in timeline.segments] == [
        (0.0, 4.0, "secondary"),
        (4.0, 10.0, "primary"),
    ]
    assert (timeline.swaps, timeline.seconds_on_secondary) == (1, 4.0)


@pytest.mark.parametrize(
    ("events", "segments"),
    [
        ([], [(5.0, 5.0, "primary", False)]),  # an empty window is still one segment
        ([TimelineEvent(5.0, "failover_engaged")], [(5.0, 9.0, "primary", True)]),
        # engaged and ended at once: the empty stretch between goes and its neighbours merge
        (
            [TimelineEvent(6.0, "failover_engaged"), TimelineEvent(6.0, "failover_ended")],
            [(5.0, 9.0, "primary", False)],
        ),
        (
            [
                TimelineEvent(6.0, "role_swapped", "primary", "secondary"),
                TimelineEvent(6.0, "failover_engaged"),
            ],
            [(5.0, 6.0, "primary", False), (6.0, 9.0, "secondary", True)],
        ),
    ],
)
def test_empty_stretches_are_dropped_and_alike_neighbours_merged(
    events: list[TimelineEvent], segments: list[tuple[float, float, str, bool]]
) -> None:
    end = 5.0 if not events else 9.0
    timeline = failover_timeline(events, start=5.0, end=end)

    assert [(s.start, s.end, s.active, s.failed_over) for s in timeline.segments] == segments


@pytest.mark.parametrize(
    ("kind", "path", "result", "control"),
    [
        ("sent", "barrier", None, True),  # a restore barrier's send
        ("received", None, "ping", True),  # a receiver's copy of a ping
        ("sent", "direct", None, False),
        ("sent", "backlog", None, False),
        ("sent", None, "ping", False),  # only a receive can be a ping's copy
        ("received", "barrier", None, False),  # only a send can be a barrier
        ("received", None, None, False),
        ("ping", None, "accepted", False),  # the ping itself is billed as a ping, not excluded here
    ],
)
def test_control_events_are_the_barrier_sends_and_the_ping_receives(
    kind: str, path: str | None, result: str | None, control: bool
) -> None:
    from bridge.core.control_events import is_control

    assert is_control(kind, path, result) is control
