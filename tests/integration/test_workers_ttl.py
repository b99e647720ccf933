"""A message's TimeToLive counts from acceptance: what waited in the outbox arrives with what is left of
it, and what expired there is dead-lettered locally, never sent.

Real parts throughout: ``bridge worker`` processes (or a drain run in this process), Redis, local
namespaces read back through the azure-servicebus SDK. The outbox wait is a worker that is not running yet.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from azure.servicebus import ServiceBusClient

from bridge.core.expiry import EXPIRED_BEFORE_DELIVERY
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import ShardDrainer
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import LocalStack, wait_until
from bridge.journal.store import JournalStore
from bridge.outbox.problems import list_problems
from bridge.producer import Producer
from bridge.settings import JournalSettings, Settings
from tests.integration.paired_support import (
    active_all_settings,
    create_backlog_queues,
    mark_failed_over,
    namespace_settings,
    text,
)
from tests.integration.worker_support import entity_status, make_stack, outbox_depth, producer, receive_all

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(180)

TTL = 60.0
WAIT = 4.0
"""Seconds the messages wait in the outbox before a worker starts (at least; its start-up adds more)."""


def _ttl_seconds(value: Any) -> float:
    assert isinstance(value, dt.timedelta), value
    return value.total_seconds()


def _expired_locally(stack: LocalStack, entity: str, message_id: str) -> None:
    """The message is in the local dead-letter stream, journaled and counted, with the expiry code."""
    client = redis.Redis.from_url(stack.redis.url)
    try:
        wait_until(lambda: outbox_depth(stack, entity) == 0, 30, what="an empty outbox")
        problems = list_problems(client, entity, "deadletter")
        assert [p["original"]["id"] for p in problems] == [message_id]
        assert problems[0]["code"] == EXPIRED_BEFORE_DELIVERY
        assert problems[0]["reason"].startswith(f"{EXPIRED_BEFORE_DELIVERY}: TTL of 1.5s ended at ")
        events = JournalStore(client, JournalSettings()).read(entity, 1000)
        dead = [e for _, e in events if e.kind == "dead_lettered"]
        assert [(e.message_id, e.where) for e in dead] == [(message_id, "local")]
        assert (dead[0].reason or "").startswith(EXPIRED_BEFORE_DELIVERY)
        sent = {e.message_id for _, e in events if e.kind == "sent"}
        assert message_id not in sent
    finally:
        client.close()
    assert entity_status(stack, entity)["dead_letter_depth"] == 1


@pytest.mark.parametrize("mode", ["passive", "active"])
def test_a_message_that_waited_in_the_outbox_is_sent_with_the_rest_of_its_ttl_and_an_expired_one_is_not(
    make_stack: Any, mode: str
) -> None:
    stack = make_stack({"orders": {"replication": mode}})
    # Given a message with 60 s to live and one with 1.5 s, accepted while no worker runs
    with producer(stack) as p:
        accepted = time.time()
        live = p.send("orders", b"live", time_to_live=TTL)
        expired = p.send("orders", b"expired", time_to_live=1.5)
    time.sleep(WAIT)
    # When a worker starts after the wait
    stack.start_worker()
    namespaces = [stack.primary, stack.secondary] if mode == "active" else [stack.primary]
    for ns in namespaces:
        got = receive_all(ns, "orders", 1)
        # Then the namespace holds the live one with what was left of its TTL when it was sent
        assert [m.message_id for m in got] == [live]
        waited = time.time() - accepted
        ttl = _ttl_seconds(got[0].time_to_live)
        assert TTL - waited - 1.0 <= ttl <= TTL - WAIT + 0.5, (ttl, waited)
    # And the expired one never reached a namespace: it is in the local dead-letter stream with its reason
    _expired_locally(stack, "orders", expired)


def _drain(drainer: ShardDrainer, sent: int) -> int:
    """One drain run of ``drainer`` until the shard is empty; the batches it sent as packed with their read
    (both counted over the drainer's runs)."""
    report = drainer.run(budget=30, idle_reads=1, block_ms=20)
    assert report.sent == sent
    return report.packed_ahead


def _links_known(settings: Settings, entity: str, body: bytes) -> tuple[DeliveryContext, ShardDrainer]:
    """A delivery context whose links to both namespaces know their batch size (a batch of ``body`` went
    to both, not packed ahead), and the drainer that sent it."""
    ctx = DeliveryContext.build(settings)
    try:
        with Producer(settings=settings) as p:
            p.send(entity, body)
        drainer = ShardDrainer(ctx, entity, 0)
        assert _drain(drainer, 1) == 0
    except BaseException:
        ctx.close()
        raise
    return ctx, drainer


def _received_with_the_rest_of_its_ttl(
    namespaces: Sequence[LocalNamespace], entity: str, count: int, live: str, accepted: float, wait: float
) -> None:
    """Each namespace holds ``live`` (of ``count`` messages) with what was left of ``TTL`` when it was sent
    (at least ``wait`` after ``accepted``, and before now)."""
    for ns in namespaces:
        got = {m.message_id: m for m in receive_all(ns, entity, count)}
        assert len(got) == count
        waited = time.time() - accepted
        ttl = _ttl_seconds(got[live].time_to_live)
        assert TTL - waited - 1.0 <= ttl <= TTL - wait + 0.5, (ttl, waited)


def test_an_active_batch_packed_with_its_read_carries_the_rest_of_its_ttl(
    redis_url: str, namespace_pair: tuple[LocalNamespace, LocalNamespace], unique_name: str
) -> None:
    entity = unique_name
    settings = active_all_settings(redis_url, namespace_pair, entity)
    # Given links that know their batch size (a batch went to both namespaces)
    ctx, _ = _links_known(settings, entity, b"first")
    try:
        # And a message with 60 s to live that waited in the outbox meanwhile
        with Producer(settings=settings) as p:
            accepted = time.time()
            live = p.send(entity, b"live", time_to_live=TTL)
        time.sleep(WAIT)
        # When a new drainer reads it, its message built and packed with the read, and sends it
        assert _drain(ShardDrainer(ctx, entity, 0), 1) == 1
    finally:
        ctx.close()
    # Then both namespaces got it with what was left of its TTL, not the TTL it was accepted with
    _received_with_the_rest_of_its_ttl(namespace_pair, entity, 2, live, accepted, WAIT)


STALL = 1.5
"""Seconds each send waits for its settlement while the namespaces stall (more than ``BUILT_TTL_SLACK``)."""


def test_an_active_batch_read_ahead_while_the_one_before_was_slow_carries_the_rest_of_its_ttl(
    redis_url: str, namespace_pair: tuple[LocalNamespace, LocalNamespace], unique_name: str
) -> None:
    entity = unique_name
    settings = active_all_settings(redis_url, namespace_pair, entity)
    # Given links that know their batch size, and a drainer that reads a few entries at a time (the last
    # entries it read were large)
    ctx, drainer = _links_known(settings, entity, b"x" * 150_000)
    try:
        # And namespaces that take STALL seconds to settle each send
        for ns in namespace_pair:
            ns.control.stall(delay=STALL)
        # When a first batch is sent while the next one, with a message with 60 s to live, is read ahead
        # and packed; the first batch's send takes STALL seconds
        with Producer(settings=settings) as p:
            for i in range(20):
                p.send(entity, f"m{i}".encode())
            accepted = time.time()
            live = p.send(entity, b"live", time_to_live=TTL)
        _drain(drainer, 22)
    finally:
        for ns in namespace_pair:
            ns.control.restore()
        ctx.close()
    # Then the message went with what was left of its TTL when it was sent, not when it was packed
    _received_with_the_rest_of_its_ttl(namespace_pair, entity, 22, live, accepted, STALL)


def test_an_active_copy_resent_after_an_outage_carries_the_rest_of_its_ttl(
    redis_url: str, namespace_pair: tuple[LocalNamespace, LocalNamespace], unique_name: str
) -> None:
    entity = unique_name
    primary, secondary = namespace_pair
    settings = active_all_settings(redis_url, namespace_pair, entity)
    ctx = DeliveryContext.build(settings)
    try:
        # Given a message with 60 s to live sent while the secondary is down: the primary takes it at once
        secondary.control.outage()
        with Producer(settings=settings) as p:
            accepted = time.time()
            live = p.send(entity, b"live", time_to_live=TTL)
        report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=1, block_ms=20)
        assert report.sent == 0 and report.retry_after is not None
        # When the secondary is back after WAIT seconds and the copy it misses is sent again
        time.sleep(max(WAIT, report.retry_after))
        secondary.control.restore()
        assert _drain(ShardDrainer(ctx, entity, 0), 1) == 0
    finally:
        secondary.control.restore()
        ctx.close()
    # Then the primary's copy has (nearly) the whole TTL, the secondary's what was left when it was resent
    (first,) = receive_all(primary, entity, 1)
    assert TTL - (time.time() - accepted) - 1.0 <= _ttl_seconds(first.time_to_live) <= TTL
    _received_with_the_rest_of_its_ttl([secondary], entity, 1, live, accepted, WAIT)


def test_a_paired_entity_aliases_the_rest_of_the_ttl_into_the_backlog_queue(make_stack: Any) -> None:
    stack = make_stack(
        {"orders": {"replication": "paired"}},
        settings={
            "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "1",
            "BRIDGE_PAIRED__ENABLE_SYPHON": "false",
            "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "3600",
        },
    )
    (queue,) = create_backlog_queues(stack, 1)
    stack.primary.control.outage()
    mark_failed_over(stack, "orders")
    # Given a failed-over paired entity and messages that wait in the outbox while no worker runs
    with producer(stack) as p:
        accepted = time.time()
        live = p.send("orders", b"live", session_id="s", time_to_live=TTL)
        expired = p.send("orders", b"expired", session_id="s", time_to_live=1.5)
    time.sleep(WAIT)
    # When a worker starts after the wait
    stack.start_worker()
    got = receive_all(stack.secondary, queue, 1)
    # Then the backlog message's TTL alias is what was left when it was aliased
    assert [m.message_id for m in got] == [live]
    props = {text(k): v for k, v in (got[0].application_properties or {}).items()}
    waited = time.time() - accepted
    ttl = float(props["x-ms-timetolive"])
    assert TTL - waited - 1.0 <= ttl <= TTL - WAIT + 0.5, (ttl, waited)
    # And the expired one went to the local dead-letter stream, not to the backlog
    _expired_locally(stack, "orders", expired)


def test_a_scheduled_message_counts_its_ttl_from_the_later_of_acceptance_and_its_scheduled_time(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(shared_namespace),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
        }
    )
    # Given two scheduled messages with 60 s to live: one due in an hour, one due 1 s after acceptance
    now = dt.datetime.now(dt.UTC)
    with Producer(settings=settings) as p:
        later = p.send(
            entity, b"later", time_to_live=TTL, scheduled_enqueue_time_utc=now + dt.timedelta(hours=1)
        )
        soon = p.send(
            entity, b"soon", time_to_live=TTL, scheduled_enqueue_time_utc=now + dt.timedelta(seconds=1)
        )
    # When they wait in the outbox for longer than the second one's schedule, then a drain sends them
    time.sleep(WAIT)
    ctx = DeliveryContext.build(settings)
    try:
        assert ShardDrainer(ctx, entity, 0).run(budget=5).sent == 2
    finally:
        ctx.close()
    # Then the one not due yet keeps its whole TTL (Service Bus counts it from the scheduled time), and the
    # one whose time passed in the outbox has what is left counted from its scheduled time
    with (
        ServiceBusClient.from_connection_string(shared_namespace.connection_string, retry_total=1) as client,
        client.get_queue_receiver(entity) as receiver,
    ):
        peeked = {m.message_id: m for m in receiver.peek_messages(max_message_count=10, sequence_number=1)}
    assert set(peeked) == {later, soon}
    assert _ttl_seconds(peeked[later].time_to_live) == TTL
    waited = (dt.datetime.now(dt.UTC) - now).total_seconds() - 1
    assert TTL - waited - 1.0 <= _ttl_seconds(peeked[soon].time_to_live) <= TTL - (WAIT - 1) + 0.5
