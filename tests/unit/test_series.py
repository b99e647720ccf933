"""The report's time series as tables: bucket sizes, the outbox's depth, outage and failover bands."""

from __future__ import annotations

import pytest

from bridge.core.series import (
    Band,
    bucket_count,
    bucket_seconds,
    failover_bands,
    open_messages,
    outage_bands,
)


@pytest.mark.parametrize(
    ("span", "step"),
    [
        (0.0, 1),
        (239.0, 1),
        (240.0, 2),
        (600.0, 5),
        (3_600.0, 30),  # an hour: 120 points of 30 s
        (7 * 86_400.0, 3_600),  # a week's outage: 168 points of an hour
        (400 * 86_400.0, 172_800),  # past the nicest step: whole days
    ],
)
def test_bucket_seconds_keeps_a_chart_under_its_points(span: float, step: int) -> None:
    assert bucket_seconds(100.0, 100.0 + span) == step
    assert bucket_count(100.0, 100.0 + span, step) <= 241


def test_bucket_count_holds_the_last_event() -> None:
    assert bucket_count(0.0, 0.0, 1) == 1
    assert bucket_count(0.0, 9.99, 5) == 2
    assert bucket_count(0.0, 10.0, 5) == 3


@pytest.mark.parametrize(
    ("accepted", "settled", "depth"),
    [
        ([3, 2, 0, 0], [1, 0, 4, 0], [2, 4, 0, 0]),
        ([0, 0], [2, 0], [0, 0]),  # settlements of messages accepted before the journal: never negative
        ([5], [0], [5]),
    ],
)
def test_open_messages_is_the_running_difference(
    accepted: list[int], settled: list[int], depth: list[int]
) -> None:
    assert open_messages(accepted, settled) == depth


@pytest.mark.parametrize(
    ("ok", "failed", "bands"),
    [
        # failing from bucket 1, a success in bucket 4 ends it
        ([1, 0, 0, 0, 1], [0, 2, 1, 0, 0], [(1, 4)]),
        # a bucket with both keeps the band open; it runs to the end of the journal
        ([1, 0, 1, 0], [0, 1, 1, 0], [(1, 4)]),
        # a bucket with successes and failures opens nothing
        ([2, 1], [0, 1], []),
        # two outages
        ([0, 1, 0, 1], [1, 0, 1, 0], [(0, 1), (2, 3)]),
        ([0, 0], [0, 0], []),
    ],
)
def test_outage_bands(ok: list[int], failed: list[int], bands: list[tuple[int, int]]) -> None:
    found = outage_bands("primary (east)", ok, failed, 1000.0, 10)
    assert found == [Band("outage", "primary (east)", 1000.0 + 10 * a, 1000.0 + 10 * b) for a, b in bands]


def test_failover_bands_are_the_segments_off_the_primary() -> None:
    segments = [
        (0.0, 5.0, "primary", False),
        (5.0, 9.0, "secondary", False),
        (9.0, 12.0, "primary", True),
        (12.0, 20.0, "primary", False),
    ]
    assert failover_bands("orders", segments) == [
        Band("failover", "orders on secondary", 5.0, 9.0),
        Band("failover", "orders in backlog", 9.0, 12.0),
    ]
