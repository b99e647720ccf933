"""Batches that encode each message once (bridge.servicebus.batches) hold the SDK's own bytes.

Every test fills a batch made by ``make_batch`` and one made by the SDK alone
(``ServiceBusMessageBatch(max_size_in_bytes=...)``) with the same messages and compares what a send
would put on the wire: the data sections, the size, the count, and where the batch is full.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.amqp import AmqpAnnotatedMessage
from azure.servicebus.exceptions import MessageSizeExceededError

from bridge.core.envelope import Envelope
from bridge.servicebus.batches import EncodeOnceTransport, encodes_as_the_sdk, make_batch
from bridge.servicebus.messages import OutgoingMessage, to_message

LIMIT = 8192


def envelope(i: int, body: bytes = b"payload", ttl: float | None = None) -> Envelope:
    """A message with every field; without ``ttl`` (the SDK stamps a message with a TTL with the time it
    is added to a batch, so two batches of it differ in those bytes)."""
    return Envelope(
        entity="orders",
        message_id=f"m-{i}",
        body=body,
        accepted_at=1_700_000_000.0,
        content_type="application/json",
        correlation_id="c",
        subject="s",
        session_id=None,
        partition_key=f"k{i % 3}",
        time_to_live=ttl,
        scheduled_enqueue_time_utc=datetime(2030, 1, 1, tzinfo=UTC),
        application_properties={"n": i, "big": 2**40, "f": 0.5, "b": b"\x00\xff", "t": timedelta(seconds=3)},
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )


def wire(batch: ServiceBusMessageBatch) -> tuple[list[bytes], int, int]:
    """What a send of ``batch`` carries: its data sections, its size and its count."""
    return [bytes(section) for section in batch._message[5]], batch.size_in_bytes, len(batch)


def fill(batch: ServiceBusMessageBatch, messages: list[OutgoingMessage]) -> int:
    """Adds messages until one does not fit; how many went in."""
    for count, message in enumerate(messages):
        try:
            batch.add_message(message)
        except MessageSizeExceededError:
            return count
    return len(messages)


def test_this_sdk_is_checked_as_encoding_the_same_bytes() -> None:
    assert encodes_as_the_sdk()
    assert make_batch(LIMIT)._amqp_transport is EncodeOnceTransport


def test_a_batch_of_bridge_messages_holds_the_sdks_bytes_and_is_full_at_the_same_message() -> None:
    messages = [to_message(envelope(i, b"x" * (17 * i))) for i in range(60)]
    ours, theirs = make_batch(LIMIT), ServiceBusMessageBatch(max_size_in_bytes=LIMIT)
    taken = fill(ours, messages)
    assert 1 < taken < len(messages)  # the batch filled up before the messages ran out
    assert fill(theirs, messages) == taken
    assert wire(ours) == wire(theirs)


def test_messages_with_a_time_to_live_take_the_same_room() -> None:
    messages = [to_message(envelope(i, b"x" * (17 * i), ttl=90.5)) for i in range(60)]
    ours, theirs = make_batch(LIMIT), ServiceBusMessageBatch(max_size_in_bytes=LIMIT)
    taken = fill(ours, messages)
    assert 1 < taken < len(messages)
    assert fill(theirs, messages) == taken
    assert wire(ours)[1:] == wire(theirs)[1:]
    assert [len(section) for section in wire(ours)[0]] == [len(section) for section in wire(theirs)[0]]


def test_sdk_messages_and_annotated_messages_encode_the_same() -> None:
    messages: list[OutgoingMessage] = []
    for i in range(10):
        sb = ServiceBusMessage(
            f"body {i}", message_id=f"sb-{i}", session_id="s", time_to_live=timedelta(seconds=5)
        )
        messages.append(sb.raw_amqp_message)
        messages.append(AmqpAnnotatedMessage(value_body={"i": i}, properties={"message_id": f"v-{i}"}))
    ours, theirs = make_batch(LIMIT), ServiceBusMessageBatch(max_size_in_bytes=LIMIT)
    assert fill(ours, messages) == fill(theirs, messages) == len(messages)
    assert wire(ours) == wire(theirs)


def test_a_message_too_large_for_the_batch_is_refused_and_leaves_it_unchanged() -> None:
    ours = make_batch(1024)
    first, third = to_message(envelope(1)), to_message(envelope(3))
    ours.add_message(first)
    before = wire(ours)
    try:
        ours.add_message(to_message(envelope(2, b"y" * 2000)))
    except MessageSizeExceededError:
        pass
    else:
        raise AssertionError("a 2,000-byte body fitted a 1,024-byte batch")
    assert wire(ours) == before
    ours.add_message(third)  # the refused message's bytes are not appended in its place
    theirs = ServiceBusMessageBatch(max_size_in_bytes=1024)
    theirs.add_message(first)
    theirs.add_message(third)
    assert wire(ours) == wire(theirs)


def test_adding_a_message_other_than_the_one_measured_encodes_that_message() -> None:
    measured, other = to_message(envelope(1)), to_message(envelope(2))
    batch = make_batch(LIMIT)
    outgoing_measured = ServiceBusMessage(body=None)
    outgoing_measured._message = EncodeOnceTransport.to_outgoing_amqp_message(measured)
    outgoing_other = ServiceBusMessage(body=None)
    outgoing_other._message = EncodeOnceTransport.to_outgoing_amqp_message(other)
    EncodeOnceTransport.get_message_encoded_size(outgoing_measured._message)
    EncodeOnceTransport.add_batch(batch, outgoing_other)
    theirs = ServiceBusMessageBatch(max_size_in_bytes=LIMIT)
    theirs.add_message(other)
    assert [bytes(s) for s in batch._message[5]] == [bytes(s) for s in theirs._message[5]]


def test_threads_packing_at_once_each_get_their_own_messages_bytes() -> None:
    messages = {t: [to_message(envelope(t * 1000 + i)) for i in range(300)] for t in range(4)}
    expected: dict[int, list[bytes]] = {}
    for t, own in messages.items():
        theirs = ServiceBusMessageBatch(max_size_in_bytes=1024 * 1024)
        assert fill(theirs, own) == len(own)
        expected[t] = wire(theirs)[0]
    results: dict[int, list[list[bytes]]] = {t: [] for t in messages}

    def pack(t: int) -> None:
        for _ in range(3):
            ours = make_batch(1024 * 1024)
            fill(ours, messages[t])
            results[t].append(wire(ours)[0])

    threads = [threading.Thread(target=pack, args=(t,)) for t in messages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {t: [expected[t]] * 3 for t in messages}
