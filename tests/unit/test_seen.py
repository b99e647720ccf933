"""The receivers' record of handled ids, its pure part (``bridge.core.seen``): fingerprints, bucket
spans, and the odds of a false "already handled" that ``docs/receiving.md`` states."""

from __future__ import annotations

import pytest

from bridge.core.seen import (
    FINGERPRINT_BYTES,
    false_positive_bound,
    fingerprint,
    remembered_at,
    span_ms,
    sustained_rate_limit,
)
from bridge.settings import ReceiverSettings

WEEK = 7 * 24 * 3600


def test_a_fingerprint_has_the_same_length_whatever_the_id() -> None:
    shapes = ["a", "0" * 32, "x" * 128, "é" * 200]
    assert {len(fingerprint(m)) for m in shapes} == {FINGERPRINT_BYTES}
    assert len({fingerprint(m) for m in shapes}) == len(shapes)
    assert fingerprint("order-1") == fingerprint("order-1")


@pytest.mark.parametrize(
    ("window_ms", "span"),
    [(WEEK * 1000, 24 * 3600 * 1000), (600_000, 85_715), (3500, 500), (1, 1)],
)
def test_a_window_is_seven_spans_per_day_buckets_by_default(window_ms: int, span: int) -> None:
    assert span_ms(window_ms) == span


def test_the_odds_of_a_false_already_handled_over_a_week_at_10000_per_second() -> None:
    # docs/receiving.md: a week of new ids, each compared with at most 8 days of remembered ids
    new, remembered = 10_000 * WEEK, 10_000 * (WEEK + 24 * 3600)
    assert false_positive_bound(new, remembered) < 1e-14
    # 104 bits would not meet 1e-12: why the fingerprint has 14 bytes
    assert false_positive_bound(new, remembered, bits=104) > 1e-12


def test_the_default_bound_holds_a_window_and_a_span_of_up_to_1446_msgs_per_second() -> None:
    defaults = ReceiverSettings()
    # A week's window keeps an id up to 8 days: 691,200 s of traffic at most
    assert remembered_at(1.0, defaults.window) == 691_200
    assert remembered_at(1000.0, defaults.window) == 691_200_000
    # 10^9 ids over 8 days: above 1,446.8 msgs/s sustained the default bound fills (docs/receiving.md)
    assert round(sustained_rate_limit(defaults.max_remembered, defaults.window)) == 1447
    assert remembered_at(1446.0, defaults.window) < defaults.max_remembered
    assert remembered_at(1447.0, defaults.window) > defaults.max_remembered


def test_a_fingerprint_is_stable_across_releases() -> None:
    # Fingerprints stay in Redis across an upgrade: a changed hash would let every recorded copy through.
    assert fingerprint("m-1").hex() == "a2bf2dac83a949adc7876d74cc9e"
