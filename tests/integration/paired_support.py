"""Helpers for the paired-mode ping/syphon tests: settings, backlog filling, reading namespaces back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)

from bridge.core.envelope import Envelope
from bridge.core.paired import EngageFailover, StartTimer, backlog_queue_paths
from bridge.delivery.context import DeliveryContext
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import LocalStack
from bridge.paired.syphon import BacklogSyphon, QueueReport
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import BacklogMessage, to_backlog_message
from bridge.servicebus.pool import NamespacePool
from bridge.settings import NamespaceSettings, Settings
from bridge.state.cost import CostStore
from bridge.state.paired import PairedStore
from tests.integration.worker_support import count_in

# Seconds-level paired timing so the tests run in seconds (defaults are the .NET ones, tested elsewhere).
PAIRED_SETTINGS = {
    "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "2",
    "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "1",
    "BRIDGE_PAIRED__SYPHON_RETRY_INTERVAL": "0.5",
    "BRIDGE_PAIRED__SYPHON_RECEIVE_WAIT": "1",
    "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "3",
    "BRIDGE_PAIRED__SYPHON_LEASE_TTL": "3",
}
BACKLOG_LOCK = timedelta(seconds=5)
"""Lock duration of the tests' backlog queues (1 min in production): a killed syphon's locks end soon."""


def namespace_settings(ns: LocalNamespace) -> NamespaceSettings:
    """Settings naming one local namespace."""
    return NamespaceSettings(
        connection_string=ns.connection_string,  # type: ignore[arg-type]
        management_endpoint=ns.management_endpoint,
        certificate=ns.certificate,  # type: ignore[arg-type]
    )


def active_all_settings(redis_url: str, pair: tuple[LocalNamespace, LocalNamespace], entity: str) -> Settings:
    """Both namespaces of ``pair``, ``entity`` in active mode with policy ``all``, short deadlines."""
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(pair[0]),
            "secondary": namespace_settings(pair[1]),
            "entities": {entity: {"replication": "active", "success_policy": "all"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
        }
    )


def full_settings(stack: LocalStack) -> Settings:
    """What a bridge process of ``stack`` sees: Redis, both namespaces, the entities, short deadlines."""
    return Settings.model_validate(
        {
            "redis_url": stack.redis.url,
            "primary": namespace_settings(stack.primary),
            "secondary": namespace_settings(stack.secondary),
            "entities": stack.entities,
            "retry": {"attempt_deadline": 3, "retry_total": 0},
        }
    )


def backlog_paths(stack: LocalStack, count: int = 2) -> tuple[str, ...]:
    """The backlog queue paths the bridge derives for ``stack``'s primary namespace."""
    primary = full_settings(stack).primary
    assert primary is not None
    return backlog_queue_paths(primary.namespace_name, count)


def create_backlog_queues(stack: LocalStack, count: int = 2) -> tuple[str, ...]:
    """Create the backlog queues in the secondary (what ``bridge provision`` does; short locks here)."""
    paths = backlog_paths(stack, count)
    with NamespaceAdmin(namespace_settings(stack.secondary)) as admin:
        for path in paths:
            if admin.get_queue(path) is None:
                admin.create_queue(path, lock_duration=BACKLOG_LOCK, max_delivery_count=2**31 - 1)
    return paths


def create_entities(
    ns: LocalNamespace,
    queues: Iterable[str] = (),
    sessions: Iterable[str] = (),
    topics: dict[str, Sequence[str]] | None = None,
) -> None:
    """Create queues, session queues and topics with subscriptions in ``ns``."""
    with NamespaceAdmin(namespace_settings(ns)) as admin:
        for name in queues:
            admin.create_queue(name)
        for name in sessions:
            admin.create_queue(name, requires_session=True)
        for topic, subscriptions in (topics or {}).items():
            admin.create_topic(topic)
            for subscription in subscriptions:
                admin.create_subscription(topic, subscription)


@contextmanager
def stack_pool(stack: LocalStack) -> Iterator[NamespacePool]:
    """A namespace pool of the test process on ``stack``'s namespaces."""
    pool = NamespacePool(full_settings(stack))
    try:
        yield pool
    finally:
        pool.close()


def envelope(entity: str, i: int, **fields: Any) -> Envelope:
    """A message for ``entity`` with a recognisable body and MessageId."""
    message_id = fields.pop("message_id", f"{entity}-{i}-{uuid.uuid4().hex[:6]}")
    return Envelope(
        entity=entity,
        message_id=message_id,
        body=f"{entity} #{i}".encode(),
        accepted_at=time.time(),
        **fields,
    )


def fill_backlog(pool: NamespacePool, queue: str, envelopes: Sequence[Envelope]) -> list[str]:
    """Alias ``envelopes`` into backlog queue ``queue`` in order (as a failed-over worker does)."""
    messages = []
    for env in envelopes:
        aliased = to_backlog_message(env)
        assert isinstance(aliased, BacklogMessage), aliased
        messages.append(aliased.message)
    for start in range(0, len(messages), 500):
        result = pool.send("secondary", queue, messages[start : start + 500])
        assert result.ok, result.failed
    return [env.message_id for env in envelopes]


def redis_client(stack: LocalStack) -> redis.Redis:
    """A client of the stack's Redis."""
    return redis.Redis.from_url(stack.redis.url, socket_timeout=5)


def mark_failed_over(stack: LocalStack, entity: str) -> None:
    """Engage failover for ``entity`` in the shared state, as the paired drainer does after the interval."""
    client = redis_client(stack)
    try:
        now = time.time()
        PairedStore(client).apply(entity, [StartTimer(now - 5), EngageFailover(now, "test: primary down")])
    finally:
        client.close()


def paired_state(stack: LocalStack, entity: str) -> Any:
    """The entity's shared paired state."""
    client = redis_client(stack)
    try:
        return PairedStore(client).get(entity)
    finally:
        client.close()


def cost(stack: LocalStack, entity: str) -> Any:
    """The entity's (or backlog queue's) billable-operation counters."""
    client = redis_client(stack)
    try:
        return CostStore(client).get(entity)
    finally:
        client.close()


def receive(
    ns: LocalNamespace,
    entity: str,
    expected: int,
    timeout: float = 30.0,
    *,
    subscription: str | None = None,
    session_id: str | None = None,
    dead_letter: bool = False,
) -> list[ServiceBusReceivedMessage]:
    """Receive-and-delete from a queue, a subscription, a session or a dead-letter queue until ``expected``
    arrived (or the timeout), plus a short extra wait that would catch unexpected copies."""
    got: list[ServiceBusReceivedMessage] = []
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    sub_queue = ServiceBusSubQueue.DEAD_LETTER if dead_letter else None
    deadline = time.monotonic() + timeout
    with ServiceBusClient.from_connection_string(ns.connection_string, retry_total=1) as client:
        if subscription is not None:
            receiver = client.get_subscription_receiver(
                entity, subscription, receive_mode=mode, sub_queue=sub_queue
            )
        else:
            receiver = client.get_queue_receiver(
                entity, receive_mode=mode, session_id=session_id, sub_queue=sub_queue
            )
        with receiver:
            while len(got) < expected and time.monotonic() < deadline:
                got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=1))
            got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=0.5))
    return got


def body(message: ServiceBusReceivedMessage) -> bytes:
    """The message's data body."""
    return b"".join(message.body)


def text(value: object) -> str:
    """A received id/property as text ("" for None)."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def syphon_settings(stack: LocalStack, entities: dict[str, Any], batch: int) -> Settings:
    """What in-process syphon runs of ``stack`` see: one backlog queue, batches of ``batch``, 1 s polls and
    pings, short deadlines."""
    return Settings.model_validate(
        {
            "redis_url": stack.redis.url,
            "primary": namespace_settings(stack.primary),
            "secondary": namespace_settings(stack.secondary),
            "entities": entities,
            "retry": {"attempt_deadline": 3, "retry_total": 0},
            "paired": {
                "backlog_queue_count": 1,
                "syphon_batch_size": batch,
                "syphon_receive_wait": 1,
                "ping_primary_interval": 1,
                "syphon_retry_interval": 0.2,
            },
        }
    )


@contextmanager
def syphon_stack(path: Path, entities: dict[str, Any]) -> Iterator[LocalStack]:
    """A started stack whose primary holds a queue per entity and whose secondary one backlog queue."""
    with LocalStack(path, entities=entities) as local:
        create_entities(local.primary, queues=list(entities))
        create_backlog_queues(local, count=1)
        yield local


@contextmanager
def fresh_context(stack: LocalStack, entities: dict[str, Any], batch: int) -> Iterator[DeliveryContext]:
    """A delivery context of this process (``syphon_settings``) on the stack's Redis, emptied first."""
    client = redis.Redis.from_url(stack.redis.url)
    client.flushall()
    client.close()
    context = DeliveryContext.build(syphon_settings(stack, entities, batch))
    try:
        yield context
    finally:
        context.close()


def syphon(ctx: DeliveryContext, queue: str, seconds: float) -> QueueReport:
    """One syphon run of ``queue`` for ``seconds`` (its lease taken for granted)."""
    return BacklogSyphon(ctx, queue, lambda: True).run(ctx.clock() + seconds)


def lose_aside_records(ctx: DeliveryContext, queue: str) -> None:
    """Delete every ``bridge:{aside:<queue>}:*`` key (the records and the scan's own), as an ``everysec``
    crash or a lagging replica does."""
    lost = list(ctx.redis.scan_iter(match=f"*{{aside:{queue}}}*"))
    assert lost, "nothing was set aside to lose"
    ctx.redis.delete(*lost)


def syphon_until_empty(
    stack: LocalStack, ctx: DeliveryContext, queue: str, seconds: float = 40, run: float = 2
) -> None:
    """Syphon runs of ``run`` seconds until ``queue`` is empty (a run that recovered records waits out the
    locks: 5 s + 2 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and count_in(stack.secondary, queue):
        syphon(ctx, queue, run)
        time.sleep(0.2)
