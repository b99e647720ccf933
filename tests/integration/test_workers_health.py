"""A namespace's health record follows its attempts in the order they happened, not the order their
outcomes were written: a batch's success, written behind the drainer (``bridge.delivery.settler``), never
marks a namespace available again once a later batch found it down.

Real parts throughout: a drain run in this process against a private local namespace through the SDK, the
session's Redis; the outage is the namespace's fault control. The settler's acknowledgement is held (its
real call wrapped) until the next batch's failure is recorded, the order the race produces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import ShardDrainer
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.producer import Producer
from bridge.settings import Settings
from tests.integration.paired_support import namespace_settings

pytestmark = pytest.mark.timeout(120)


def test_a_success_written_after_a_later_failure_leaves_the_namespace_unavailable(
    redis_url: str, namespace_factory: Callable[..., LocalNamespace], unique_name: str
) -> None:
    entity = unique_name
    ns = namespace_factory("primary", auto_create=True)
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
        }
    )
    ctx = DeliveryContext.build(settings)
    acked = threading.Event()
    ack = ctx.reader.ack

    def ack_after_the_next_failure(*args: Any, **kwargs: Any) -> None:
        # The first batch was accepted: the namespace goes down and a second message comes; this batch's
        # bookkeeping (acknowledgement, then its health) waits until the second batch's failure is written.
        if not acked.is_set():
            acked.set()
            ns.control.outage()
            with Producer(settings=settings) as p:
                p.send(entity, b"second")
            wait_until(lambda: not ctx.roles.health(entity, "primary").available, 30, what="the failure")
        ack(*args, **kwargs)

    ctx.reader.ack = ack_after_the_next_failure  # type: ignore[method-assign]
    try:
        # Given a batch the namespace accepted, whose success is written behind the drainer
        with Producer(settings=settings) as p:
            p.send(entity, b"first")
        # When the next batch fails (the namespace is down) before that success is written
        report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=3, block_ms=2000)
        assert acked.is_set() and report.sent == 1 and report.retry_after is not None
        # Then the namespace stays unavailable: the success happened before the failure
        health = ctx.roles.health(entity, "primary")
        assert not health.available, health
    finally:
        ns.control.restore()
        ctx.close()
