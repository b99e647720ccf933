"""The live ledger's verdict and running totals (``bridge.core.live_ledger``), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.core.live_ledger import (
    EventKey,
    LedgerInput,
    OpenMessage,
    Unreadable,
    add_counts,
    add_entity_events,
    add_event_counts,
    event_figures,
    overdue,
    verdict,
)

NOW = 1_000_000.0


def test_running_totals_add_the_new_facts_and_take_away_the_old() -> None:
    totals = {"orders": {"accepted": 5, "open": 2}}
    # a batch: one open message of orders got delivered, one new message of payments arrived
    after = {"orders": {"accepted": 1, "open": 0, "delivered": 1}, "payments": {"accepted": 1, "open": 1}}
    before = {"orders": {"accepted": 1, "open": 1}}

    assert add_counts(totals, after, before) == {
        "orders": {"accepted": 5, "open": 1, "delivered": 1},
        "payments": {"accepted": 1, "open": 1},
    }
    assert totals == {"orders": {"accepted": 5, "open": 2}}  # not changed in place


def test_event_totals_add_each_batch_row_to_its_key() -> None:
    # Given totals of (events, units) per (entity, kind, namespace, path, result)
    sent: EventKey = ("orders", "sent", "primary", "direct", None)
    ping: EventKey = ("orders", "received", "secondary", None, "ping")
    totals = {sent: (3, 5)}
    # When a batch adds to a known key and twice to a new one
    merged = add_event_counts(totals, [(sent, 2, 4), (ping, 1, 1), (ping, 1, 2)])
    # Then each key sums its events and its units apart, and the old totals are left as they were
    assert merged == {sent: (5, 9), ping: (2, 3)}
    assert totals == {sent: (3, 5)}


def test_overdue_is_open_longer_than_the_threshold_oldest_first() -> None:
    messages = [
        OpenMessage("orders", "young", NOW - 10),
        OpenMessage("orders", "old", NOW - 500),
        OpenMessage("payments", "older", NOW - 900),
        OpenMessage("orders", "edge", NOW - 300),
    ]
    assert [m.message_id for m in overdue(messages, NOW, 300)] == ["older", "old"]


@pytest.mark.parametrize(
    ("events", "open_at", "unreadable", "overflow", "expected"),
    [
        (0, None, (), {}, "no data"),
        (0, NOW - 900, (), {}, "no data"),
        (10, None, (), {}, "ok"),
        (10, NOW - 10, (), {}, "ok"),
        (10, NOW - 900, (), {}, "overdue"),
        (10, None, (Unreadable("j.parquet", "ArrowInvalid: truncated"),), {}, "incomplete"),
        (10, None, (), {"orders": 3}, "incomplete"),
        (10, NOW - 900, (Unreadable("j.parquet", "bad"),), {}, "overdue"),
    ],
)
def test_the_verdict(
    events: int,
    open_at: float | None,
    unreadable: tuple[Unreadable, ...],
    overflow: dict[str, int],
    expected: str,
) -> None:
    opened = [] if open_at is None else [OpenMessage("orders", "m1", open_at)]
    data = LedgerInput(
        counts={"orders": {"accepted": 1, "open": len(opened)}},
        open_messages=opened,
        events=events,
        unreadable=unreadable,
        overflow=overflow,
    )
    assert verdict(data, NOW, 300)["verdict"] == expected


def test_no_data_never_reads_as_nothing_lost() -> None:
    ledger = verdict(LedgerInput(counts={}, open_messages=[], events=0), NOW, 300)

    assert ledger["verdict"] == "no data"
    assert ledger["reasons"] == ["no journal event read yet: nothing can be said about lost messages"]


def test_each_entity_lists_its_oldest_overdue_ids_and_says_what_was_unreadable() -> None:
    opened = [OpenMessage("orders", f"m{i}", NOW - 1000 + i) for i in range(5)]
    data = LedgerInput(
        counts={"orders": {"accepted": 9, "open": 5, "pending_backlog": 1}},
        open_messages=opened,
        events=40,
        unreadable=[Unreadable("date=x/j.parquet", "ArrowInvalid: not a Parquet file")],
    )

    ledger = verdict(data, NOW, 300, listed=2)

    orders = ledger["entities"]["orders"]
    assert (orders["overdue"], orders["pending"]) == (5, 6)
    assert [m["message_id"] for m in orders["overdue_ids"]] == ["m0", "m1"]
    assert orders["overdue_ids"][0]["age"] == 1000
    assert "could not read date=x/j.parquet: ArrowInvalid: not a Parquet file" in ledger["reasons"]


def test_an_overdue_id_says_when_it_was_accepted_and_its_age_to_the_millisecond() -> None:
    accepted_at = NOW - 400.12345
    data = LedgerInput(counts={}, open_messages=[OpenMessage("orders", "m1", accepted_at)], events=1)

    (listed,) = verdict(data, NOW, 300)["entities"]["orders"]["overdue_ids"]

    assert listed == {"message_id": "m1", "accepted_at": accepted_at, "age": 400.123}


def test_each_entity_row_holds_its_counts_failovers_operations_and_overflow() -> None:
    # Given orders with counts and failovers, and payments with 101 overdue messages but no counts yet,
    # some operations, and an event lost to a full journal
    late = [OpenMessage("payments", f"p{i}", NOW - 1000 - i) for i in range(101)]
    data = LedgerInput(
        counts={"orders": {"accepted": 4, "delivered": 3, "pending_backlog": 1}},
        open_messages=late,
        events=50,
        failovers={"orders": 2},
        operations={"payments": 5},
        overflow={"payments": 1},
    )

    ledger = verdict(data, NOW, 300)

    assert ledger["entities"]["orders"] == {
        "accepted": 4,
        "delivered": 3,
        "pending_backlog": 1,
        "pending": 1,
        "overdue": 0,
        "overdue_ids": [],
        "failovers": 2,
        "operations": 0,
        "journal_overflow": 0,
    }
    payments = ledger["entities"]["payments"]
    assert (payments["pending"], payments["failovers"], payments["operations"]) == (0, 0, 5)
    assert payments["journal_overflow"] == 1 and payments["overdue"] == 101
    assert len(payments["overdue_ids"]) == 100  # the oldest hundred by default


def test_the_published_ledger_states_its_figures_and_every_reason() -> None:
    # Given an overdue message, an unreadable file, events lost to a full journal and skewed clocks
    data = LedgerInput(
        counts={"orders": {"accepted": 3, "open": 1, "clock_skewed": 2}},
        open_messages=[OpenMessage("orders", "m1", NOW - 400)],
        events=12,
        overflow={"orders": 4, "payments": 0},
        unreadable=[Unreadable("j.parquet", "truncated")],
        clock=NOW - 5,
    )

    ledger = verdict(data, NOW, 300.0)

    # Then the publication gives each figure and one reason per problem, none for what is fine
    del ledger["entities"]
    assert ledger == {
        "verdict": "overdue",
        "reasons": [
            "1 accepted messages have no end after 300 s",
            "could not read j.parquet: truncated",
            "orders: 4 events found a full journal and are missing",
            "orders: 2 messages were sent or handled before their acceptance by the journal's times: the"
            " hosts' clocks disagree (their latencies are below the truth)",
        ],
        "overdue": 1,
        "overdue_after": 300.0,
        "events": 12,
        "journal_clock": NOW - 5,
        "unreadable": [{"path": "j.parquet", "error": "truncated"}],
    }


def test_a_message_suppressed_and_never_handled_is_named_lost() -> None:
    # A receiver completed m3 as a duplicate of another id's fingerprint: delivered, never handled
    data = LedgerInput(
        counts={"orders": {"accepted": 3, "delivered": 3, "handled": 2, "suppressed_unhandled": 1}},
        open_messages=[],
        events=14,
    )

    ledger = verdict(data, NOW, 300)

    assert ledger["entities"]["orders"]["suppressed_unhandled"] == 1
    assert ledger["reasons"] == [
        "orders: 1 messages were completed by a receiver as duplicates but never handled (their MessageId's "
        "fingerprint matched another id's): lost"
    ]


def test_an_entitys_event_record_keeps_the_first_and_last_time_and_sums_quarantines_without_an_id() -> None:
    totals: dict[str, dict[str, Any]] = {}
    add_entity_events(totals, "orders", 20.0, 30.0, 1)
    add_entity_events(totals, "orders", 10.0, 25.0, 2)  # an earlier first, not a later last
    add_entity_events(totals, "orders", 15.0, 40.0, 0)  # a later last
    add_entity_events(totals, "orders", None, None, 0)  # a group with no time changes neither
    assert totals == {"orders": {"first_event_at": 10.0, "last_event_at": 40.0, "quarantined_without_id": 3}}
    add_entity_events(totals, "audit", None, None, 4)
    assert totals["audit"] == {"first_event_at": None, "last_event_at": None, "quarantined_without_id": 4}


def test_event_figures_sum_events_failovers_and_overflow_per_entity() -> None:
    rows = [
        ["orders", "sent", "ns1", "direct", None, 3, 3],
        ["orders", "failover_engaged", None, None, None, 1, 1],
        ["orders", "role_swapped", None, None, None, 2, 2],
        ["orders", "journal_overflow", None, None, None, 1, 7],  # units: the entries that found it full
        ["payments", "accepted", None, None, None, 5, 5],
    ]
    figures = event_figures(rows)
    assert figures.events == {"orders": 7, "payments": 5}
    assert figures.failovers == {"orders": 3}
    assert figures.overflow == {"orders": 7}
