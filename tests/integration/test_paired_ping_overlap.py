"""Two ping runs that overlap while a ping is slow ping the primary once.

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

from bridge.delivery.context import DeliveryContext
from bridge.embedded.stack import LocalStack
from bridge.paired.ping import PingReport, ping_failed_over
from bridge.settings import Settings
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
