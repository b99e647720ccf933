"""Pure timing of the syphon and the beat claim: tables, no network."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from celery.beat import ScheduleEntry
from celery.schedules import crontab, schedule

from bridge.core.beat import claim_ttl_ms
from bridge.core.paired import PairedState
from bridge.core.syphon import split_reason
from bridge.core.syphon_timing import (
    LockSpan,
    lease_renew_interval,
    lease_ttl_ms,
    lock_renewal_due,
    lock_span,
    may_poll,
    receive_wait,
)
from workers.beat_scheduler import entry_interval

CORE = Path(__file__).resolve().parents[2] / "bridge" / "core"
FORBIDDEN = {"redis", "azure", "celery", "kombu", "pyspark", "time", "asyncio", "threading"}
HEALTHY = PairedState()
TIMER = PairedState(failing_since=10.0)
FAILED_OVER = PairedState(failing_since=10.0, failed_over_at=20.0)


@pytest.mark.parametrize("module", ["syphon_timing", "beat"])
def test_core_modules_stay_pure(module: str) -> None:
    tree = ast.parse((CORE / f"{module}.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & FORBIDDEN


@pytest.mark.parametrize(
    ("remaining", "long_poll", "expected"),
    [(60.0, 1.0, 1.0), (0.4, 1.0, 0.4), (0.0, 1.0, 0.0), (-2.0, 1.0, 0.0), (900.0, 900.0, 900.0)],
)
def test_receive_wait_is_the_long_poll_cut_to_the_budget(
    remaining: float, long_poll: float, expected: float
) -> None:
    assert receive_wait(remaining, long_poll) == expected


@pytest.mark.parametrize(
    ("ttl", "every", "ms"), [(30.0, 10.0, 30000), (3.0, 1.0, 3000), (0.0004, 0.0004 / 3, 1)]
)
def test_lease_renewal_three_times_per_ttl(ttl: float, every: float, ms: int) -> None:
    assert lease_renew_interval(ttl) == pytest.approx(every)
    assert lease_ttl_ms(ttl) == ms


def test_lease_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        lease_renew_interval(0)


@pytest.mark.parametrize(
    ("received_at", "locked_until", "now", "margin", "due"),
    [
        (100.0, 160.0, 129.9, 10.0, False),  # less than half of a 60 s lock used, 30 s left
        (100.0, 160.0, 130.0, 10.0, True),
        (100.0, 105.0, 103.0, 0.0, True),  # a 5 s lock: renew after 2.5 s
        (100.0, 104.0, 101.0, 3.0, False),  # 3 s left of a 4 s lock, a 3 s send still fits
        (100.0, 104.0, 101.1, 3.0, True),  # 2.9 s left: a 3 s send would outlast it
        (100.0, None, 1000.0, 10.0, False),  # lock time unknown: never
    ],
)
def test_lock_renewal_after_half_the_lock_time_or_before_a_send_could_outlast_it(
    received_at: float, locked_until: float | None, now: float, margin: float, due: bool
) -> None:
    assert lock_renewal_due(received_at, locked_until, now, margin) is due


@pytest.mark.parametrize(
    ("call", "duration", "left", "span"),
    [
        # The queue's LockDuration known: it alone decides, whatever Service Bus's clock said (``left``)
        (0.1, 4.0, (34.0, 34.0), LockSpan(4.0, 4.0)),
        (0.1, 4.0, (-26.0, -26.0), LockSpan(4.0, 4.0)),
        (0.1, 4.0, None, LockSpan(4.0, 4.0)),
        # Unknown: the expiries against our clock, measured from the call's start and its return
        (0.5, None, (59.0, 59.5), LockSpan(59.5, 60.0)),
        (0.5, None, (4.0, 4.5), LockSpan(4.5, 60.0)),  # a queue with a short lock: the marker keeps a minute
        (0.5, None, (90.0, 90.0), LockSpan(60.0, 90.0)),  # a clock behind Service Bus's: renew by the minute
        (0.5, None, (-26.0, -26.0), LockSpan(0.0, 60.0)),  # a clock ahead: renew at once, mark a minute
        (0.5, None, None, None),
    ],
)
def test_a_lock_span_needs_no_clock_but_ours_when_the_lock_duration_is_known(
    call: float, duration: float | None, left: tuple[float, float] | None, span: LockSpan | None
) -> None:
    assert lock_span(call, duration, left, assumed=60.0) == span


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([HEALTHY], True),
        ([FAILED_OVER, HEALTHY], True),
        ([FAILED_OVER], False),
        ([TIMER], False),  # the FailoverInterval timer runs: not healthy, nothing to deliver to
        ([FAILED_OVER, TIMER], False),
        ([], False),
    ],
)
def test_the_syphon_polls_only_while_some_paired_entity_is_healthy(
    states: list[PairedState], expected: bool
) -> None:
    assert may_poll(states) is expected


@pytest.mark.parametrize(("interval", "ms"), [(1.0, 800), (60.0, 48000), (0.5, 400), (0.0001, 1)])
def test_a_beat_claim_lives_most_of_one_interval(interval: float, ms: int) -> None:
    assert claim_ttl_ms(interval) == ms


def test_a_beat_claim_needs_an_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        claim_ttl_ms(0)


@pytest.mark.parametrize(
    ("reason", "code", "details"),
    [
        (
            "expired_in_backlog: TTL ended at 1.000 before delivery to orders",
            "expired_in_backlog",
            "TTL ended at 1.000 before delivery to orders",
        ),
        (
            "destination_missing: gone: NamespaceEntityNotFoundError: x",
            "destination_missing",
            "gone: NamespaceEntityNotFoundError: x",
        ),
        ("plain", "plain", ""),
    ],
)
def test_dead_letter_reason_is_the_code_and_the_rest_its_description(
    reason: str, code: str, details: str
) -> None:
    assert split_reason(reason) == (code, details)


@pytest.mark.parametrize(
    ("run_every", "expected"),
    [(schedule(timedelta(seconds=1)), 1.0), (schedule(0.5), 0.5), (crontab(minute="*/5"), None)],
)
def test_only_fixed_interval_schedules_are_claimed(run_every: object, expected: float | None) -> None:
    entry = ScheduleEntry(name="x", task="bridge.x", schedule=run_every)
    assert entry_interval(entry) == expected


def test_lock_renewal_waits_for_half_the_lock_time_without_a_margin() -> None:
    assert lock_renewal_due(0.0, 1.5, 0.6) is False
    assert lock_renewal_due(0.0, 1.5, 0.75) is True
    assert lock_renewal_due(0.0, 1.5, 0.6, margin=1.0) is True


def test_a_lease_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^lease TTL must be positive$"):
        lease_renew_interval(0.0)
