"""Handlers for ``bridge receive --handler tests.integration.receiver_handlers:<name>`` in the receiver tests.

Each call is recorded in the receiver's own Redis (``BRIDGE_REDIS_URL``, or ``RX_TEST_CALLS_URL``), list
``test:rx:calls``, as a JSON object (MessageId, pid, session, content type, body, delivery count, namespace,
a phase), so a test can count handler calls across processes and restarts. Knobs come from the environment:
``RX_TEST_SLEEP`` (``slow``), ``RX_TEST_TRIGGER`` and ``RX_TEST_CONTROL`` (``outage_after``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis

from bridge.core.received import ReceivedMessage
from bridge.emulator.control_client import ControlClient

CALLS = "test:rx:calls"
_local = threading.local()


def _client() -> redis.Redis:
    client = getattr(_local, "client", None)
    if client is None:
        # RX_TEST_CALLS_URL: a plain Redis for the record when the receiver's own is a Cluster
        client = redis.Redis.from_url(os.environ.get("RX_TEST_CALLS_URL", os.environ["BRIDGE_REDIS_URL"]))
        _local.client = client
    return client


def _record(message: ReceivedMessage, phase: str = "call") -> None:
    entry: dict[str, Any] = {
        "id": message.message_id,
        "pid": os.getpid(),
        "session": message.session_id,
        "content_type": message.content_type,
        "body": message.body.decode("utf-8", "replace"),
        "delivery_count": message.delivery_count,
        "namespace": message.namespace,
        "entity": message.entity,
        "phase": phase,
    }
    _client().rpush(CALLS, json.dumps(entry))


def record(message: ReceivedMessage) -> None:
    """Record the call and succeed."""
    _record(message)


def fail(message: ReceivedMessage) -> None:
    """Record the call and raise (the copy is abandoned, then dead-lettered on its last delivery)."""
    _record(message)
    raise ValueError(f"cannot handle {message.message_id}")


def slow(message: ReceivedMessage) -> None:
    """Record a start, sleep ``RX_TEST_SLEEP`` seconds, record an end."""
    _record(message, "start")
    time.sleep(float(os.environ.get("RX_TEST_SLEEP", "3")))
    _record(message, "end")


def outage_after(message: ReceivedMessage) -> None:
    """Record the call; for MessageId ``RX_TEST_TRIGGER``, switch on an outage of the namespace whose fault
    control is ``RX_TEST_CONTROL`` before returning: the handler succeeds, its done mark is written, and
    the completion that follows cannot reach Service Bus."""
    _record(message)
    if message.message_id == os.environ.get("RX_TEST_TRIGGER"):
        ControlClient(os.environ["RX_TEST_CONTROL"]).outage()


def calls(client: redis.Redis) -> list[dict[str, Any]]:
    """Every recorded call, oldest first (for the tests)."""
    return [json.loads(raw) for raw in client.lrange(CALLS, 0, -1)]


def append_id(message: ReceivedMessage) -> None:
    """Append the MessageId as a line to the file ``RX_TEST_IDS`` names (no Redis: any ``redis_url`` form)."""
    with open(os.environ["RX_TEST_IDS"], "a") as out:
        out.write(message.message_id + "\n")
