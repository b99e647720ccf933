"""Two ping runs that overlap while a ping is slow ping the primary once; a ping that restores an entity
shows its primary back in the status.

Real parts: the stack's Redis and local namespaces; the primary answers slowly through its fault control
(``stall``: transfers settle only after a delay). Two ping runs in this process stand for two beats, or a
run that outlasts its interval while the next one fires.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.core.error_classes import ErrorClass
from bridge.core.roles import NamespaceHealth
from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.paired.ping import PingReport, claim_ms, ping_failed_over
from bridge.settings import Settings
from bridge.status.collect import collect_status
from tests.integration.paired_support import (
    create_entities,
    full_settings,
    mark_failed_over,
    paired_state,
)
from tests.integration.worker_support import make_stack

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(120)

INTERVAL = 1.0
STALL = 2.5
"""Seconds the primary holds each transfer and CBS answer: longer than the interval, both within
the attempt deadline (10 s)."""


def _settings(stack: LocalStack) -> Settings:
    base = full_settings(stack).model_dump()
    base["retry"] = {"attempt_deadline": 10, "retry_total": 0}
    base["paired"] = {"ping_primary_interval": INTERVAL, "ping_mode": "message"}
    return Settings.model_validate(base)


@pytest.fixture
def stack_ctx(make_stack: Any) -> Iterator[tuple[LocalStack, DeliveryContext, DeliveryContext]]:
    stack = make_stack({"orders": {"replication": "paired"}})
    create_entities(stack.primary, queues=["orders"])
    first, second = DeliveryContext.build(_settings(stack)), DeliveryContext.build(_settings(stack))
    try:
        yield stack, first, second
    finally:
        first.close()
        second.close()


def test_a_ping_slower_than_the_interval_is_not_sent_again_by_an_overlapping_run(
    stack_ctx: tuple[LocalStack, DeliveryContext, DeliveryContext],
) -> None:
    stack, first, second = stack_ctx
    mark_failed_over(stack, "orders")
    stack.primary.control.stall(delay=STALL)
    reports: dict[str, PingReport] = {}

    def run(name: str, ctx: DeliveryContext) -> None:
        reports[name] = ping_failed_over(ctx)

    # Given a ping run whose ping the primary holds for longer than the ping interval
    slow = threading.Thread(target=run, args=("first", first))
    slow.start()
    # When another run (another beat, the next firing) comes one interval later, the ping still in flight
    time.sleep(INTERVAL * 1.2)
    assert slow.is_alive(), "the first ping answered before the second run: the stall did not hold it"
    run("second", second)
    slow.join(30)
    # Then the primary was pinged once, by the first run, and that ping restored the entity
    assert reports["first"].pinged == ["orders"]
    assert reports["second"].pinged == []
    assert reports["first"].restored == ["orders"]
    assert not paired_state(stack, "orders").failed_over


def test_a_ping_that_restores_the_entity_shows_its_primary_available(
    stack_ctx: tuple[LocalStack, DeliveryContext, DeliveryContext],
) -> None:
    """The primary's health record said down (a send failed in the outage); no message goes there after
    the restore. The ping that restored the entity is what shows the primary back in ``bridge status``."""
    stack, ctx, _ = stack_ctx
    failed_at = ctx.clock() - 5
    down = NamespaceHealth(
        available=False,
        since=failed_at,
        last_error="the primary is down",
        last_error_at=failed_at,
        error_class=ErrorClass.OUTAGE,
    )
    assert ctx.roles.set_health("orders", "primary", down)
    mark_failed_over(stack, "orders")
    before = collect_status(ctx.settings, ctx.redis)
    assert not _entity(before, "orders")["namespaces"]["primary"]["available"]
    # When the ping gets through
    report = ping_failed_over(ctx)
    # Then the entity is restored and its primary shows available, with the error kept for the operator
    assert report.restored == ["orders"]
    after = _entity(collect_status(ctx.settings, ctx.redis), "orders")["namespaces"]["primary"]
    assert after["available"]
    assert after["since"] >= failed_at
    assert after["last_error"] == "the primary is down"


def _entity(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in status["entities"] if e["name"] == name)


def test_a_run_killed_during_its_ping_delays_the_next_ping_by_one_pings_bound(
    stack_ctx: tuple[LocalStack, DeliveryContext, DeliveryContext],
) -> None:
    stack, killed, ctx = stack_ctx
    mark_failed_over(stack, "orders")
    # Given a run that claimed the entity's ping as a run does and died before releasing the claim
    assert killed.paired.claim_ping("orders", "a-killed-run", claim_ms(killed.settings))
    claimed_at = time.monotonic()
    # Then the next runs leave the entity alone while the claim lasts
    assert ping_failed_over(ctx).pinged == []
    # And one ping's bound later (the attempt deadline, 10 s, and a second), not a whole run's ping_timeout
    # (120 s), a run pings it and the entity is restored
    deadline = claimed_at + 30
    while time.monotonic() < deadline and paired_state(stack, "orders").failed_over:
        ping_failed_over(ctx)
        time.sleep(INTERVAL)
    assert not paired_state(stack, "orders").failed_over, "the killed run's claim still holds the ping"
    assert time.monotonic() - claimed_at >= claim_ms(ctx.settings) / 1000 - INTERVAL
