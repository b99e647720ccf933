"""Which idle senders the pool reopens (``bridge.servicebus.refresh.due``), as a table."""

from __future__ import annotations

import pytest

from bridge.servicebus.refresh import due


@pytest.mark.parametrize(
    ("last_used", "now", "expected"),
    [
        ({}, 100.0, []),
        ({"q1": 99.0}, 100.0, []),
        ({"q1": 70.0}, 100.0, ["q1"]),  # exactly refresh_after: due
        ({"q1": 50.0, "q2": 10.0, "q3": 95.0}, 100.0, ["q2", "q1"]),  # oldest first, fresh ones left alone
    ],
)
def test_due(last_used: dict[str, float], now: float, expected: list[str]) -> None:
    assert due(last_used, now, refresh_after=30.0) == expected
