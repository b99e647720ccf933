"""Sending to the local Service Bus with the public SDK: single, list, batch, all or nothing, size limits."""

from __future__ import annotations

import datetime as dt

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.exceptions import MessageSizeExceededError, ServiceBusError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, sb_client

pytestmark = pytest.mark.timeout(60)

KB = 1024


def test_every_message_property_round_trips(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a message with every settable property
    sent = ServiceBusMessage(
        b"\x00binary\xff",
        message_id="id-1",
        correlation_id="corr-1",
        subject="label-1",
        content_type="application/octet-stream",
        reply_to="replies",
        to="someone",
        partition_key="pk-1",
        time_to_live=dt.timedelta(hours=1),
        application_properties={"text": "v", "number": 42, "flag": True, "real": 1.5},
    )
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(sent)
        # When it is received, Then everything comes back as sent, with the broker's properties added
        with client.get_queue_receiver(unique_name) as receiver:
            [got] = receive(receiver, 1)
            assert b"".join(got.body) == b"\x00binary\xff"
            assert (got.message_id, got.correlation_id, got.subject) == ("id-1", "corr-1", "label-1")
            assert (got.content_type, got.reply_to) == ("application/octet-stream", "replies")
            assert got.to == "someone"
            assert got.partition_key == "pk-1"
            assert got.time_to_live == dt.timedelta(hours=1)
            # pyamqp hands AMQP strings in application properties out as bytes (against Azure too)
            assert got.application_properties == {b"text": b"v", b"number": 42, b"flag": True, b"real": 1.5}
            assert got.sequence_number is not None and got.sequence_number > 0
            assert got.enqueued_time_utc is not None
            assert abs(got.enqueued_time_utc - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)
            assert got.delivery_count == 0 and got.lock_token is not None
            assert got.locked_until_utc is not None and got.locked_until_utc > dt.datetime.now(dt.UTC)
            receiver.complete_message(got)


def test_single_list_and_batch_arrive_in_order(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with sb_client(shared_namespace) as client:
        # Given a single message, a list of three and a batch of twenty
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("single"))
            sender.send_messages([ServiceBusMessage(f"list-{i}") for i in range(3)])
            batch = sender.create_message_batch()
            for i in range(20):
                batch.add_message(ServiceBusMessage(f"batch-{i}"))
            sender.send_messages(batch)
        # Then all 24 arrive once, in send order, with increasing sequence numbers
        with client.get_queue_receiver(unique_name) as receiver:
            got = receive(receiver, 24)
            expected = ["single"] + [f"list-{i}" for i in range(3)] + [f"batch-{i}" for i in range(20)]
            assert [str(m) for m in got] == expected
            seqs = [m.sequence_number for m in got]
            assert seqs == sorted(seqs) and len(set(seqs)) == 24
            for message in got:
                receiver.complete_message(message)
            assert receiver.peek_messages(max_message_count=50) == []


def test_batch_is_rejected_as_a_whole(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a session-enabled queue
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, requires_session=True)
    with sb_client(shared_namespace) as client:
        # When a batch whose last message lacks a session id is sent
        with client.get_queue_sender(unique_name) as sender:
            batch = sender.create_message_batch()
            batch.add_message(ServiceBusMessage("ok-1", session_id="s"))
            batch.add_message(ServiceBusMessage("ok-2", session_id="s"))
            batch.add_message(ServiceBusMessage("no session"))
            with pytest.raises(ServiceBusError):
                sender.send_messages(batch)
            # Then the same sender still works for a valid message
            sender.send_messages(ServiceBusMessage("after", session_id="s"))
        # And only that one message was stored: none of the rejected batch
        with client.get_queue_receiver(unique_name, session_id="s") as receiver:
            assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["after"]
    with admin_client(shared_namespace) as admin:
        assert admin.get_queue_runtime_properties(unique_name).total_message_count == 1


def test_list_is_rejected_as_a_whole(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, requires_session=True)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_sender(unique_name) as sender,
        pytest.raises(ServiceBusError),
    ):
        sender.send_messages([ServiceBusMessage("ok", session_id="s"), ServiceBusMessage("no session")])
    with admin_client(shared_namespace) as admin:
        assert admin.get_queue_runtime_properties(unique_name).total_message_count == 0


def test_default_size_limit_is_256_kb(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(unique_name) as sender:
            # Given a message just under 256 KB, When it is sent, Then it is accepted
            sender.send_messages(ServiceBusMessage(b"a" * (250 * KB)))
            # Given one over 256 KB, When it is sent, Then MessageSizeExceededError and nothing is stored
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"b" * (257 * KB)))
            # And a batch cannot grow past the limit either
            batch = sender.create_message_batch()
            assert batch.max_size_in_bytes <= 256 * KB
        with client.get_queue_receiver(unique_name) as receiver:
            peeked = receiver.peek_messages(max_message_count=10)
            assert [len(b"".join(m.body)) for m in peeked] == [250 * KB]


def test_size_limit_is_configurable_per_entity(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a queue whose limit is 64 KB
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, max_message_size_in_kilobytes=64)
        assert admin.get_queue(unique_name).max_message_size_in_kilobytes == 64
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(unique_name) as sender:
            # When a 100 KB message is sent, Then it is refused; a 32 KB one is accepted
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * (100 * KB)))
            sender.send_messages(ServiceBusMessage(b"y" * (32 * KB)))
            # And a batch (the SDK sizes batches at 256 KB whatever the entity) carrying a 100 KB message
            # is refused by the namespace itself
            batch: ServiceBusMessageBatch = sender.create_message_batch()
            batch.add_message(ServiceBusMessage(b"z" * (100 * KB)))
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(batch)
        with client.get_queue_receiver(unique_name) as receiver:
            assert [len(b"".join(m.body)) for m in receiver.peek_messages(max_message_count=10)] == [32 * KB]
