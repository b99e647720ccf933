"""NamespacePool sends through the real SDK to a real local namespace: fields, batching, size limits."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from bridge.core.envelope import Envelope
from bridge.core.paired import PING_CONTENT_TYPE
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import MessagePermanentError
from bridge.servicebus.messages import ping_message, to_message
from tests.integration.servicebus_support import body_of, drain, pool_for

pytestmark = pytest.mark.timeout(120)

PROPERTIES = {
    "text": "häagen",
    "small": 42,
    "negative": -7,
    "big": 2**40,
    "ratio": 0.25,
    "flag": True,
    "raw": b"\x00\xff",
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "when": datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC),
    "span": timedelta(seconds=3, milliseconds=500),
}


def envelope(entity: str, index: int = 0, body: bytes = b"payload", **fields: object) -> Envelope:
    return Envelope(  # type: ignore[arg-type]  # fields are Envelope's optional keyword fields
        entity=entity, message_id=f"m-{index}", body=body, accepted_at=time.time(), **fields
    )


def test_every_envelope_field_arrives_intact(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given an envelope with every field set, scheduled one second ahead
    scheduled = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=0)
    env = envelope(
        unique_name,
        body=b"\x00binary body\xff",
        content_type="application/octet-stream",
        correlation_id="corr-1",
        subject="label-1",
        reply_to="replies",
        to="someone",
        session_id="session-1",
        partition_key="session-1",
        time_to_live=300.0,
        scheduled_enqueue_time_utc=scheduled,
        application_properties=dict(PROPERTIES),
    )
    # When the pool sends it
    with pool_for(shared_namespace) as pool:
        result = pool.send("primary", unique_name, [to_message(env)])
    assert result.failed == {} and result.accepted == [0]
    # Then the plain SDK reads back every field, and each property with its AMQP type
    (got,) = drain(shared_namespace, unique_name, 1)
    assert body_of(got) == b"\x00binary body\xff"
    assert (got.message_id, got.content_type, got.correlation_id, got.subject) == (
        "m-0",
        "application/octet-stream",
        "corr-1",
        "label-1",
    )
    assert (got.reply_to, got.to, got.session_id, got.partition_key) == (
        "replies",
        "someone",
        "session-1",
        "session-1",
    )
    assert got.time_to_live == timedelta(seconds=300)
    assert got.scheduled_enqueue_time_utc == scheduled
    assert got.enqueued_time_utc is not None and got.enqueued_time_utc >= scheduled - timedelta(seconds=0.5)
    props = got.application_properties
    assert props is not None
    # The SDK decodes AMQP strings and binaries both to bytes, timestamps to ms and timespans to ticks.
    assert props[b"text"] == "häagen".encode()
    assert (props[b"small"], props[b"negative"], props[b"big"]) == (42, -7, 2**40)
    assert props[b"ratio"] == 0.25 and props[b"flag"] is True
    assert props[b"raw"] == b"\x00\xff"
    assert props[b"id"] == PROPERTIES["id"]
    assert props[b"when"] == 1704164645123
    span = props[b"span"]
    assert span == 35_000_000 and getattr(span, "descriptor", None) == b"com.microsoft:timespan"


def test_large_sends_are_split_into_batches_in_order(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    # Given 30 messages of 20 KB: about twelve fit one 256 KB batch
    messages = [to_message(envelope(unique_name, i, body=bytes([i]) * 20_000)) for i in range(30)]
    with pool_for(shared_namespace) as pool:
        result = pool.send("primary", unique_name, messages)
    # Then all are accepted, in three batches, and arrive in order
    assert result.accepted == list(range(30)) and not result.failed
    assert result.batches == 3
    got = drain(shared_namespace, unique_name, 30)
    assert [m.message_id for m in got] == [f"m-{i}" for i in range(30)]
    assert [body_of(m)[0] for m in got] == list(range(30))


def test_oversized_message_fails_alone(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a 300 KB message between two small ones (the link allows 256 KB)
    messages = [
        to_message(envelope(unique_name, 0)),
        to_message(envelope(unique_name, 1, body=b"x" * 300_000)),
        to_message(envelope(unique_name, 2)),
    ]
    with pool_for(shared_namespace) as pool:
        result = pool.send("primary", unique_name, messages)
    # Then only the big one fails, as message-permanent, and the others arrive
    assert result.accepted == [0, 2]
    assert list(result.failed) == [1]
    assert isinstance(result.failed[1], MessagePermanentError)
    assert result.failed[1].namespace == "primary"
    assert [m.message_id for m in drain(shared_namespace, unique_name, 2)] == ["m-0", "m-2"]


def test_ping_and_schedule_then_cancel(shared_namespace: LocalNamespace, unique_name: str) -> None:
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with (
        pool_for(shared_namespace) as pool,
        ServiceBusClient.from_connection_string(shared_namespace.connection_string) as reader,
        reader.get_queue_receiver(unique_name, receive_mode=mode) as receiver,
    ):
        # The receiver's connection and link are made first: the ping lives 1 s, less than opening them
        # can take on a busy machine.
        assert receiver.receive_messages(max_wait_time=0.1) == []
        # Given a plain ping: empty, ping content type, TTL 1 s, the random session id
        result = pool.send("primary", unique_name, [ping_message("message", "s-42", time.time())])
        assert result.accepted == [0]
        (got,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert (got.content_type, got.session_id, body_of(got)) == (PING_CONTENT_TYPE, "s-42", b"")
        assert got.time_to_live == timedelta(seconds=1)
        # When the schedule mode pings: scheduled far ahead and cancelled at once
        pool.schedule_and_cancel("primary", unique_name, ping_message("schedule", "s-43", time.time()))
    # Then nothing is left, not even a scheduled message
    with (
        ServiceBusClient.from_connection_string(shared_namespace.connection_string) as client,
        client.get_queue_receiver(unique_name) as receiver,
    ):
        assert receiver.peek_messages(max_message_count=10) == []


def test_receive_settle_and_renew(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with pool_for(shared_namespace) as pool:
        messages = [to_message(envelope(unique_name, i)) for i in range(3)]
        assert pool.send("primary", unique_name, messages).accepted == [0, 1, 2]
        # When the pool peek-locks them
        got = pool.queues.receive_batch("primary", unique_name, max_count=10, max_wait=2)
        while len(got) < 3:
            more = pool.queues.receive_batch("primary", unique_name, max_count=10, max_wait=2)
            assert more
            got.extend(more)
        assert [m.message_id for m in got] == ["m-0", "m-1", "m-2"]
        # Then their locks renew, and each settles one way
        before = [m.locked_until_utc for m in got]
        renewed = pool.queues.renew_locks("primary", unique_name, got)
        assert len(renewed) == 3 and all(r >= b for r, b in zip(renewed, before, strict=True) if b)
        pool.queues.complete("primary", unique_name, got[0])
        pool.queues.dead_letter("primary", unique_name, got[1], "expired_in_backlog", "TTL ended")
        pool.queues.abandon("primary", unique_name, got[2])
        # The abandoned one comes back; the dead-lettered one is in the dead-letter queue with its reason
        again = pool.queues.receive_batch("primary", unique_name, max_count=10, max_wait=2)
        assert [m.message_id for m in again] == ["m-2"]
        pool.queues.complete("primary", unique_name, again[0])
    (dead,) = drain(shared_namespace, f"{unique_name}/$deadletterqueue", 1)
    assert dead.message_id == "m-1" and dead.dead_letter_reason == "expired_in_backlog"
    assert dead.dead_letter_error_description == "TTL ended"
