"""Duplicate detection of the local Service Bus (``requires_duplicate_detection``), through the public SDK.

A repeated MessageId within the entity's window is accepted (the send succeeds, as on Azure) and dropped.
The window itself is a few minutes here; that it ends is not waited for (the model's unit of time is the
same clock as TTL, which ``test_emulator_ttl_schedule.py`` exercises).
"""

from __future__ import annotations

import datetime as dt

import pytest
from azure.servicebus import ServiceBusMessage

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(60)


def test_repeated_message_id_is_accepted_and_dropped(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    # Given a queue with duplicate detection
    with admin_client(shared_namespace) as admin:
        admin.create_queue(
            unique_name,
            requires_duplicate_detection=True,
            duplicate_detection_history_time_window=dt.timedelta(minutes=1),
        )
    with sb_client(shared_namespace) as client:
        # When the same MessageId is sent twice, alone and again inside a batch, Then every send succeeds
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="order-1"))
            sender.send_messages(ServiceBusMessage("retry", message_id="order-1"))
            batch = sender.create_message_batch()
            batch.add_message(ServiceBusMessage("other", message_id="order-2"))
            batch.add_message(ServiceBusMessage("retry in batch", message_id="order-1"))
            sender.send_messages(batch)
        # And only the first copy of each MessageId is delivered
        with client.get_queue_receiver(unique_name) as receiver:
            got = receive(receiver, 2)
            assert [(m.message_id, str(m)) for m in got] == [("order-1", "first"), ("order-2", "other")]
            for message in got:
                receiver.complete_message(message)
            receive_nothing(receiver, wait=0.5)
        # And completing the first copy does not reopen the window for its MessageId
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("late retry", message_id="order-1"))
        with client.get_queue_receiver(unique_name) as receiver:
            assert receiver.peek_messages(max_message_count=10, sequence_number=1) == []


def test_without_duplicate_detection_both_copies_arrive(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("one", message_id="same"))
            sender.send_messages(ServiceBusMessage("two", message_id="same"))
        with client.get_queue_receiver(unique_name) as receiver:
            assert [str(m) for m in receive(receiver, 2)] == ["one", "two"]


def test_topic_duplicate_detection(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a topic with duplicate detection and one subscription
    with admin_client(shared_namespace) as admin:
        admin.create_topic(unique_name, requires_duplicate_detection=True)
        admin.create_subscription(unique_name, "all")
    with sb_client(shared_namespace) as client:
        with client.get_topic_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("a", message_id="evt-1"))
            sender.send_messages(ServiceBusMessage("a again", message_id="evt-1"))
        # Then the subscription holds one copy
        with client.get_subscription_receiver(unique_name, "all") as receiver:
            [message] = receive(receiver, 1)
            assert str(message) == "a"
            receiver.complete_message(message)
            receive_nothing(receiver, wait=0.5)
