"""Time-to-live and scheduled messages of the local Service Bus, through the public SDK.

TTLs and schedules are 1 to 3 s so the suite stays fast; waits poll peek or receive with generous deadlines
and nothing asserts a precise time.
"""

from __future__ import annotations

import datetime as dt

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, eventually, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(60)

SHORT = dt.timedelta(seconds=1)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_message_ttl_expiry_removes_it(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Opening a handler takes the SDK ~0.5 s, so both are open before the one-second clock starts.
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_sender(unique_name) as sender,
        client.get_queue_receiver(unique_name) as receiver,
    ):
        # Given a message that lives one second and one that lives an hour
        sender.send_messages(
            [
                ServiceBusMessage("short", time_to_live=SHORT),
                ServiceBusMessage("long", time_to_live=dt.timedelta(hours=1)),
            ]
        )
        first_look = receiver.peek_messages(max_message_count=10, sequence_number=1)
        assert [str(m) for m in first_look] == ["short", "long"]
        assert first_look[0].expires_at_utc is not None and first_look[0].enqueued_time_utc is not None
        assert first_look[0].expires_at_utc - first_look[0].enqueued_time_utc == SHORT
        # When the second has passed, Then the short one is gone (not even peekable)
        eventually(
            lambda: [str(m) for m in receiver.peek_messages(max_message_count=10, sequence_number=1)],
            lambda bodies: bodies == ["long"],
            timeout=10,
        )
        [long_lived] = receive(receiver, 1)
        assert str(long_lived) == "long"
        receiver.complete_message(long_lived)
    # And it was dropped, not dead-lettered (the queue does not ask for that)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_receiver(unique_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq,
    ):
        assert dlq.peek_messages(max_message_count=10) == []


def test_entity_default_ttl_applies(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a queue whose messages live one second by default
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, default_message_time_to_live=SHORT)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_sender(unique_name) as sender,
        client.get_queue_receiver(unique_name) as receiver,
    ):
        # When a message without a TTL and one asking for an hour are sent
        sender.send_messages(
            [ServiceBusMessage("no ttl"), ServiceBusMessage("an hour", time_to_live=dt.timedelta(hours=1))]
        )
        # Then both report the entity's one second as their effective TTL
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
        assert [(str(m), m.time_to_live) for m in peeked] == [("no ttl", SHORT), ("an hour", SHORT)]
        # And once it passes the queue is empty
        eventually(
            lambda: receiver.peek_messages(max_message_count=10, sequence_number=1),
            lambda found: found == [],
            timeout=10,
        )


def test_expired_message_is_dead_lettered_when_the_entity_asks(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    # Given a queue with dead-lettering on expiration
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, dead_lettering_on_message_expiration=True)
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("perishable", message_id="p-1", time_to_live=SHORT))
        # When its TTL passes without anyone receiving it
        with client.get_queue_receiver(unique_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            # Then it moves to the dead-letter sub-queue with the expiry reason
            [dead] = receive(dlq, 1, timeout=10)
            assert (str(dead), dead.message_id) == ("perishable", "p-1")
            assert dead.dead_letter_reason == "TTLExpiredException"
            dlq.complete_message(dead)
        with client.get_queue_receiver(unique_name) as receiver:
            assert receiver.peek_messages(max_message_count=10, sequence_number=1) == []


def test_scheduled_enqueue_time_annotation(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_sender(unique_name) as sender,
        client.get_queue_receiver(unique_name) as receiver,
    ):
        # Given a message sent with scheduled_enqueue_time_utc two seconds ahead, and one without
        due = utc_now() + dt.timedelta(seconds=2)
        sender.send_messages(ServiceBusMessage("scheduled", scheduled_enqueue_time_utc=due))
        sender.send_messages(ServiceBusMessage("now"))
        # Then only the unscheduled one is receivable at first
        [now] = receive(receiver, 1)
        assert str(now) == "now"
        receiver.complete_message(now)
        receive_nothing(receiver, wait=0.5)
        assert utc_now() < due, "the test machine was too slow to observe the schedule"
        # And when the time comes, the scheduled one is delivered, reporting its schedule
        [scheduled] = receive(receiver, 1, timeout=10)
        assert str(scheduled) == "scheduled"
        assert utc_now() >= due - dt.timedelta(milliseconds=200)
        assert scheduled.scheduled_enqueue_time_utc is not None
        assert abs(scheduled.scheduled_enqueue_time_utc - due) < dt.timedelta(seconds=1)
        # As on Azure, a scheduled message counts as enqueued when it became due, not when it was sent
        assert scheduled.enqueued_time_utc is not None
        assert scheduled.enqueued_time_utc >= due - dt.timedelta(milliseconds=2)
        receiver.complete_message(scheduled)


def test_schedule_messages_and_cancel(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_sender(unique_name) as sender,
        client.get_queue_receiver(unique_name) as receiver,
    ):
        # Given two messages scheduled three seconds ahead through schedule_messages
        due = utc_now() + dt.timedelta(seconds=3)
        keep, cancel = sender.schedule_messages([ServiceBusMessage("keep"), ServiceBusMessage("cancel")], due)
        assert keep != cancel and keep > 0 and cancel > 0
        # When one is cancelled
        sender.cancel_scheduled_messages(cancel)
        # Then nothing is receivable before the due time; peek shows the one left, by its number
        receive_nothing(receiver, wait=0.5)
        assert [m.sequence_number for m in receiver.peek_messages(max_message_count=10)] == [keep]
        assert utc_now() < due, "the test machine was too slow to observe the schedule"
        # And afterwards only the kept one arrives
        [message] = receive(receiver, 1, timeout=10)
        assert (str(message), message.sequence_number) == ("keep", keep)
        receiver.complete_message(message)
        receive_nothing(receiver, wait=1)


def test_runtime_counts_scheduled_messages(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with sb_client(shared_namespace) as client, client.get_queue_sender(unique_name) as sender:
        later = utc_now() + dt.timedelta(hours=1)
        seqs = sender.schedule_messages([ServiceBusMessage(f"s{i}") for i in range(3)], later)
        sender.cancel_scheduled_messages(seqs[0])
    with admin_client(shared_namespace) as admin:
        counts = admin.get_queue_runtime_properties(unique_name)
        assert (counts.scheduled_message_count, counts.active_message_count) == (2, 0)


def test_cancel_a_message_scheduled_on_a_topic(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_topic(unique_name)
        for subscription in ("a", "b"):
            admin.create_subscription(unique_name, subscription)
    with sb_client(shared_namespace) as client, client.get_topic_sender(unique_name) as sender:
        # Given two messages scheduled an hour ahead on a topic with two subscriptions
        later = utc_now() + dt.timedelta(hours=1)
        keep, cancel = sender.schedule_messages(
            [ServiceBusMessage("keep"), ServiceBusMessage("cancel")], later
        )
        # When one is cancelled on the topic (as the bridge's namespace probe does), it is gone from both
        sender.cancel_scheduled_messages(cancel)
        for subscription in ("a", "b"):
            with client.get_subscription_receiver(unique_name, subscription) as receiver:
                assert [m.sequence_number for m in receiver.peek_messages(max_message_count=10)] == [keep]
