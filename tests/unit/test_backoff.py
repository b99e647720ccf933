"""Capped exponential backoff with full jitter: ceilings, bounds, cap monotonicity, injected randomness."""

from __future__ import annotations

import random

import pytest

from bridge.core.backoff import BackoffPolicy, backoff_ceiling, compute_backoff, resume_at, scout_due


@pytest.mark.parametrize(
    ("attempt", "base", "factor", "cap", "ceiling"),
    [
        (0, 0.8, 2.0, 120.0, 0.8),
        (1, 0.8, 2.0, 120.0, 1.6),
        (2, 0.8, 2.0, 120.0, 3.2),
        (7, 0.8, 2.0, 120.0, 102.4),
        (8, 0.8, 2.0, 120.0, 120.0),
        (50, 0.8, 2.0, 120.0, 120.0),
        (100_000, 0.8, 2.0, 120.0, 120.0),  # would overflow a float
        (3, 1.0, 1.0, 5.0, 1.0),  # factor 1: constant
        (3, 0.0, 2.0, 5.0, 0.0),
        (0, 10.0, 2.0, 5.0, 5.0),  # base above the cap
    ],
)
def test_ceiling_table(attempt: int, base: float, factor: float, cap: float, ceiling: float) -> None:
    assert backoff_ceiling(attempt, base, factor, cap) == pytest.approx(ceiling)


@pytest.mark.parametrize(
    ("draw", "expected"),
    [(0.0, 0.0), (0.25, 0.8), (0.5, 1.6), (1.0, 3.2), (-1.0, 0.0), (7.0, 3.2)],
)
def test_full_jitter_scales_the_ceiling_by_the_draw(draw: float, expected: float) -> None:
    assert compute_backoff(2, 0.8, 2.0, 120.0, lambda: draw) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(5))
def test_delays_stay_within_zero_and_the_cap(seed: int) -> None:
    rand = random.Random(seed).random
    for attempt in range(200):
        delay = compute_backoff(attempt, 0.5, 2.0, 30.0, rand)
        assert 0.0 <= delay <= 30.0
        assert delay <= backoff_ceiling(attempt, 0.5, 2.0, 30.0)


def test_ceiling_is_monotone_and_reaches_the_cap() -> None:
    ceilings = [backoff_ceiling(n, 0.5, 2.0, 30.0) for n in range(40)]
    assert ceilings == sorted(ceilings)
    assert ceilings[-1] == 30.0
    assert max(ceilings) == 30.0


@pytest.mark.parametrize(
    ("attempt", "base", "factor", "cap"),
    [(-1, 1.0, 2.0, 5.0), (0, -1.0, 2.0, 5.0), (0, 1.0, 2.0, -5.0), (0, 1.0, 0.5, 5.0)],
)
def test_invalid_parameters_are_refused(attempt: int, base: float, factor: float, cap: float) -> None:
    with pytest.raises(ValueError, match="must"):
        backoff_ceiling(attempt, base, factor, cap)


def test_policy_uses_the_azure_names() -> None:
    policy = BackoffPolicy(retry_backoff_factor=0.8, retry_backoff_max=120.0)
    assert policy.ceiling(3) == pytest.approx(6.4)
    assert policy.delay(3, lambda: 0.5) == pytest.approx(3.2)
    with pytest.raises(ValueError, match="must"):
        BackoffPolicy(retry_backoff_factor=-1.0)


@pytest.mark.parametrize(
    ("not_before", "floor", "now", "expected"),
    [
        (130.0, 100.0, 101.0, None),  # a backoff, nothing to keep: at once
        (130.0, 101.0, 101.0, None),
        (130.0, 105.0, 101.0, 105.0),  # an inherited abandoned send's wait is kept
        (103.0, 105.0, 101.0, 103.0),  # ... but never lengthens the backoff
        (130.0, None, 101.0, 130.0),  # a planned wait runs out
        (None, 100.0, 101.0, None),  # no wait at all
    ],
)
def test_a_namespace_seen_back_ends_a_backoff_at_its_floor(
    not_before: float | None, floor: float | None, now: float, expected: float | None
) -> None:
    assert resume_at(not_before, floor, now) == expected


@pytest.mark.parametrize(
    ("last", "now", "interval", "due"),
    [
        (None, 50.0, 1.0, True),
        (49.5, 50.0, 1.0, False),
        (49.0, 50.0, 1.0, True),
        (51.0, 50.0, 1.0, True),  # a clock that went back does not stop scouting
        (None, 50.0, None, False),  # scouting off
    ],
)
def test_a_process_asks_for_the_scout_once_per_interval(
    last: float | None, now: float, interval: float | None, due: bool
) -> None:
    assert scout_due(last, now, interval) is due


def test_a_scout_is_not_due_again_in_the_same_instant() -> None:
    assert scout_due(10.0, 10.0, 5.0) is False
    assert scout_due(10.0, 15.0, 5.0) is True
    assert scout_due(10.0, 9.0, 5.0) is True  # the clock went back: ask again
