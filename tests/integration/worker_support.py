"""Helpers for the send-worker tests: a stack per test, producing into it, reading namespaces back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiveMode

from bridge.core.receiving import is_ping
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import LocalStack
from bridge.producer import Producer
from bridge.settings import Settings

# Short SDK retries and deadline so failover tests run in seconds; the defaults are tested elsewhere.
FAST_SETTINGS = {
    "BRIDGE_RETRY__RETRY_TOTAL": "0",
    "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
    "BRIDGE_RETRY__OUTBOX_BACKOFF_FACTOR": "0.2",
    "BRIDGE_RETRY__OUTBOX_BACKOFF_MAX": "1",
    "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
    "BRIDGE_WORKERS__DRAIN_BUDGET": "5",
    "BRIDGE_WORKERS__LEASE_TTL": "8",
}


TEARDOWN_GRACE = 0.5
"""Seconds the stack's processes get to exit on SIGTERM after a test before they are killed. The test has
made its checks by then: a worker's warm shutdown (a syphon run finishing its budget, a drainer's blocked
``XREAD``) took 3 to 10 s per test for nothing. Tests about stopping stop the processes themselves."""


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Any]:
    """``make_stack(entities, settings=...)`` → a started LocalStack, stopped after the test."""
    stacks: list[LocalStack] = []

    def make(
        entities: Mapping[str, Mapping[str, Any]], settings: Mapping[str, str] | None = None, **options: Any
    ) -> LocalStack:
        merged = {**FAST_SETTINGS, **(settings or {})}
        stack = LocalStack(tmp_path / f"stack{len(stacks)}", entities=entities, settings=merged, **options)
        stacks.append(stack)
        return stack.start()

    try:
        yield make
    finally:
        for stack in stacks:
            stack.stop(timeout=TEARDOWN_GRACE)


def stack_settings(stack: LocalStack) -> Settings:
    """The settings a bridge process of this stack sees (for in-test producers)."""
    env = stack.env()
    entities = json.loads(env["BRIDGE_ENTITIES"])
    return Settings(redis_url=env["BRIDGE_REDIS_URL"], entities=entities)


def producer(stack: LocalStack) -> Producer:
    """A Python producer writing into the stack's outbox."""
    return Producer(settings=stack_settings(stack))


def receive_all(
    ns: LocalNamespace, entity: str, expected: int, timeout: float = 30.0, session_id: str | None = None
) -> list[ServiceBusReceivedMessage]:
    """Receive-and-delete until ``expected`` messages arrived (or the timeout), then a short extra wait
    so that unexpected extra copies are seen too."""
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + timeout
    with ServiceBusClient.from_connection_string(ns.connection_string, retry_total=1) as client:
        receiver = client.get_queue_receiver(
            entity, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE, session_id=session_id
        )
        with receiver:
            while len(got) < expected and time.monotonic() < deadline:
                got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=1))
            got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=0.5))
    return got


def count_in(ns: LocalNamespace, entity: str, *, pings: bool = True) -> int:
    """Messages currently in ``entity`` of ``ns`` (peek, nothing removed); without pings when ``pings`` is
    false.

    A probe or a ``schedule``-mode ping whose schedule answer is lost, or whose cancel fails, leaves its
    ping scheduled a year ahead; receivers drop pings, so such a leftover is not a message that went to
    the namespace.
    """
    with (
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=1) as client,
        client.get_queue_receiver(entity) as receiver,
    ):
        total, seq = 0, 0
        while True:
            batch = receiver.peek_messages(max_message_count=250, sequence_number=seq)
            if not batch:
                return total
            total += sum(1 for m in batch if pings or not is_ping(m.content_type))
            seq = batch[-1].sequence_number + 1


def status_json(stack: LocalStack) -> dict[str, Any]:
    """``bridge status --json`` run as a real process against the stack."""
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "status", "--json"],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def entity_status(stack: LocalStack, entity: str) -> dict[str, Any]:
    """One entity's entry of ``bridge status --json``."""
    for item in status_json(stack)["entities"]:
        if item["name"] == entity:
            return dict(item)
    raise AssertionError(f"{entity} not in bridge status")


def outbox_depth(stack: LocalStack, entity: str) -> int:
    """Unacknowledged messages in the entity's outbox, read straight from Redis (fast, no subprocess)."""
    import redis

    from bridge.outbox import keys

    client = redis.Redis.from_url(stack.redis.url)
    try:
        return int(client.hget(keys.stats(entity), "messages") or 0)
    finally:
        client.close()
