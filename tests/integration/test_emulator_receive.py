"""Receiving from the local Service Bus through the public SDK: receive modes, settlement, locks, peek.

Lock durations are shortened to 2 s through the administration client so lock expiry is observable in a
fast test; waits poll instead of sleeping a fixed time wherever the SDK offers something to poll.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(60)

LOCK = dt.timedelta(seconds=2)


def send(ns: LocalNamespace, queue: str, *bodies: str) -> None:
    """Send one message per body."""
    with sb_client(ns) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(body, message_id=body) for body in bodies])


def test_peek_lock_complete_removes_the_message(shared_namespace: LocalNamespace, unique_name: str) -> None:
    send(shared_namespace, unique_name, "a", "b")
    with sb_client(shared_namespace) as client:
        with client.get_queue_receiver(unique_name) as receiver:
            # Given both messages locked, When only "a" is completed
            a, b = receive(receiver, 2)
            receiver.complete_message(a)
            # Then a locked message is not handed to another receiver while its lock holds
            with client.get_queue_receiver(unique_name) as other:
                receive_nothing(other, wait=0.5)
            receiver.complete_message(b)
        # And once both are completed the queue is empty
        with client.get_queue_receiver(unique_name) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []


def test_receive_and_delete_needs_no_settlement(shared_namespace: LocalNamespace, unique_name: str) -> None:
    send(shared_namespace, unique_name, "gone-1", "gone-2")
    with sb_client(shared_namespace) as client:
        with client.get_queue_receiver(
            unique_name, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            got = receive(receiver, 2)
            assert [str(m) for m in got] == ["gone-1", "gone-2"]
            # A message received this way carries no lock and cannot be settled
            assert got[0].lock_token is None
            with pytest.raises(ValueError, match="RECEIVE_AND_DELETE"):
                receiver.complete_message(got[0])
        with client.get_queue_receiver(unique_name) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []


def test_abandon_redelivers_with_delivery_count_plus_one(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    send(shared_namespace, unique_name, "again")
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        [first] = receive(receiver, 1)
        assert first.delivery_count == 0
        # When it is abandoned, Then it comes straight back with delivery_count 1 and a new lock token
        receiver.abandon_message(first)
        [second] = receive(receiver, 1)
        assert (str(second), second.delivery_count) == ("again", 1)
        assert second.sequence_number == first.sequence_number
        assert second.lock_token != first.lock_token
        receiver.complete_message(second)


def test_defer_then_receive_deferred_by_sequence_number(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    send(shared_namespace, unique_name, "later", "now")
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        later, now = receive(receiver, 2)
        # Given "later" deferred
        receiver.defer_message(later)
        receiver.complete_message(now)
        # Then a normal receive no longer sees it, but peek does
        receive_nothing(receiver, wait=0.5)
        peeked = receiver.peek_messages(max_message_count=10, sequence_number=later.sequence_number)
        assert [m.sequence_number for m in peeked] == [later.sequence_number]
        # And peek tells it is deferred (as Azure does: x-opt-message-state, docs/servicebus-sdk.md)
        assert [m.state for m in peeked] == [ServiceBusMessageState.DEFERRED]
        # When it is fetched by sequence number, Then it is locked and can be completed
        [deferred] = receiver.receive_deferred_messages([later.sequence_number])
        assert str(deferred) == "later" and deferred.lock_token is not None
        assert deferred.state is ServiceBusMessageState.DEFERRED
        receiver.complete_message(deferred)
        assert receiver.peek_messages(max_message_count=10) == []
        # And an unknown sequence number is an error
        with pytest.raises(ServiceBusError):
            receiver.receive_deferred_messages([later.sequence_number])


def test_dead_letter_with_reason_and_description(shared_namespace: LocalNamespace, unique_name: str) -> None:
    send(shared_namespace, unique_name, "poison")
    with sb_client(shared_namespace) as client:
        with client.get_queue_receiver(unique_name) as receiver:
            [message] = receive(receiver, 1)
            # When it is dead-lettered with a reason and a description
            receiver.dead_letter_message(message, reason="BadFormat", error_description="field x missing")
            # Then the queue is empty
            assert receiver.peek_messages(max_message_count=10) == []
        # And the dead-letter sub-queue holds it with both, and it can be completed there
        with client.get_queue_receiver(unique_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [dead] = receive(dlq, 1)
            assert str(dead) == "poison" and dead.message_id == "poison"
            assert dead.dead_letter_reason == "BadFormat"
            assert dead.dead_letter_error_description == "field x missing"
            dlq.complete_message(dead)
            assert dlq.peek_messages(max_message_count=10) == []


def test_lock_expiry_redelivers_with_delivery_count_plus_one(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, lock_duration=LOCK)
    send(shared_namespace, unique_name, "slow")
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        # Given a message received and never settled
        [first] = receive(receiver, 1)
        assert first.locked_until_utc is not None
        lock_left = first.locked_until_utc - dt.datetime.now(dt.UTC)
        assert dt.timedelta(seconds=0.5) < lock_left <= LOCK + dt.timedelta(seconds=1)
        # When its 2 s lock runs out, Then it is delivered again with delivery_count 1
        [second] = receive(receiver, 1, timeout=10)
        assert (str(second), second.delivery_count) == ("slow", 1)
        assert dt.datetime.now(dt.UTC) >= first.locked_until_utc - dt.timedelta(milliseconds=200)
        # And settling with the expired lock fails, while the new lock works
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(first)
        receiver.complete_message(second)
        assert receiver.peek_messages(max_message_count=10) == []


def test_max_delivery_count_dead_letters(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, max_delivery_count=2)
    send(shared_namespace, unique_name, "doomed")
    with sb_client(shared_namespace) as client:
        with client.get_queue_receiver(unique_name) as receiver:
            # Given a queue that allows two deliveries, When the message is abandoned twice
            for expected_count in (0, 1):
                [message] = receive(receiver, 1)
                assert message.delivery_count == expected_count
                receiver.abandon_message(message)
            # Then it is not delivered a third time
            receive_nothing(receiver, wait=0.5)
        # And it waits in the dead-letter sub-queue with reason MaxDeliveryCountExceeded
        with client.get_queue_receiver(unique_name, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [dead] = receive(dlq, 1)
            assert str(dead) == "doomed"
            assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
            assert dead.dead_letter_error_description
            dlq.complete_message(dead)


def test_renew_lock_extends_locked_until(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, lock_duration=LOCK)
    send(shared_namespace, unique_name, "long job")
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        [message] = receive(receiver, 1)
        first_until = message.locked_until_utc
        assert first_until is not None
        # Given the lock renewed every second for three seconds (longer than one 2 s lock)
        for _ in range(3):
            time.sleep(1)
            renewed = receiver.renew_message_lock(message)
            # Then each renewal moves locked_until later
            assert renewed > first_until
            assert message.locked_until_utc == renewed
            first_until = renewed
        # And the message was never redelivered and still completes with the original lock token
        receiver.complete_message(message)
        assert receiver.peek_messages(max_message_count=10) == []


def test_renew_lock_after_expiry_is_lock_lost(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, lock_duration=LOCK)
    send(shared_namespace, unique_name, "expired")
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        [message] = receive(receiver, 1)
        # When the lock has run out (the message is delivered again), Then renewing the old lock fails
        [again] = receive(receiver, 1, timeout=10)
        with pytest.raises(MessageLockLostError):
            receiver.renew_message_lock(message)
        receiver.complete_message(again)


def test_peek_does_not_lock_and_pages_by_sequence_number(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    send(shared_namespace, unique_name, *[f"p{i}" for i in range(5)])
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        # When peeking, Then messages come in order and unlocked
        peeked = receiver.peek_messages(max_message_count=3)
        assert [str(m) for m in peeked] == ["p0", "p1", "p2"]
        assert all(m.lock_token is None for m in peeked)
        # And the receiver's peek cursor continues after the last peeked message
        assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["p3", "p4"]
        # And an explicit sequence number peeks from there again
        again = receiver.peek_messages(max_message_count=2, sequence_number=peeked[1].sequence_number)
        assert [str(m) for m in again] == ["p1", "p2"]
        # And peeked messages are still all receivable
        got = receive(receiver, 5)
        assert [str(m) for m in got] == [f"p{i}" for i in range(5)]
        for message in got:
            receiver.complete_message(message)
