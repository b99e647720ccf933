"""Sessions on the local Service Bus, through the public SDK.

Session queues are created with the administration client (``requires_session=True``). Session receivers
take ``retry_total=0`` so a refused session lock surfaces at once instead of after the SDK's retries.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusError, SessionCannotBeLockedError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def session_queue(shared_namespace: LocalNamespace, unique_name: str) -> str:
    """A session-enabled queue with a 3 s lock (short enough to watch a session lock run)."""
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, requires_session=True, lock_duration=dt.timedelta(seconds=3))
    return unique_name


def send_interleaved(ns: LocalNamespace, queue: str) -> None:
    """Three messages for each of sessions a and b, interleaved."""
    with sb_client(ns) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages(
            [ServiceBusMessage(f"{sid}{i}", session_id=sid) for i in range(3) for sid in ("a", "b")]
        )


def test_named_session_receiver_gets_its_session_in_order(
    shared_namespace: LocalNamespace, session_queue: str
) -> None:
    send_interleaved(shared_namespace, session_queue)
    with sb_client(shared_namespace) as client:
        # When session b is received, Then only b's messages arrive, first in first out
        with client.get_queue_receiver(session_queue, session_id="b") as receiver:
            got = receive(receiver, 3)
            assert [str(m) for m in got] == ["b0", "b1", "b2"]
            assert {m.session_id for m in got} == {"b"}
            assert receiver.session.session_id == "b"
            for message in got:
                receiver.complete_message(message)
            receive_nothing(receiver, wait=0.5)
        # And session a is untouched
        with client.get_queue_receiver(session_queue, session_id="a") as receiver:
            assert [str(m) for m in receive(receiver, 3)] == ["a0", "a1", "a2"]


def test_fifo_holds_across_abandon(shared_namespace: LocalNamespace, session_queue: str) -> None:
    send_interleaved(shared_namespace, session_queue)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_receiver(session_queue, session_id="a") as receiver,
    ):
        first = receive(receiver, 1)[0]
        assert str(first) == "a0"
        # When the head of the session is abandoned, Then it is delivered again before a1
        receiver.abandon_message(first)
        again = receive(receiver, 3)
        assert [str(m) for m in again] == ["a0", "a1", "a2"]
        assert again[0].delivery_count == 1


def test_next_available_session(shared_namespace: LocalNamespace, session_queue: str) -> None:
    send_interleaved(shared_namespace, session_queue)
    # Given one receiver holding session a (the session whose messages came first)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_receiver(session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as first,
    ):
        assert first.session.session_id == "a"
        # When another asks for the next available session, Then it gets b, not the locked a
        with client.get_queue_receiver(
            session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
        ) as second:
            assert second.session.session_id == "b"
            assert [str(m) for m in receive(second, 3)] == ["b0", "b1", "b2"]
        assert [str(m) for m in receive(first, 3)] == ["a0", "a1", "a2"]


def test_next_available_session_times_out_when_none_is_free(
    shared_namespace: LocalNamespace, session_queue: str
) -> None:
    with (
        sb_client(shared_namespace) as client,
        pytest.raises(OperationTimeoutError),
        client.get_queue_receiver(
            session_queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2
        ) as receiver,
    ):
        receiver.receive_messages(max_wait_time=1)


def test_a_locked_session_cannot_be_locked_again(
    shared_namespace: LocalNamespace, session_queue: str
) -> None:
    send_interleaved(shared_namespace, session_queue)
    with sb_client(shared_namespace) as client:
        # Given a receiver holding session a
        with client.get_queue_receiver(session_queue, session_id="a") as holder:
            # When a second receiver asks for session a, Then the SDK raises SessionCannotBeLockedError
            with (
                pytest.raises(SessionCannotBeLockedError),
                client.get_queue_receiver(session_queue, session_id="a") as intruder,
            ):
                intruder.receive_messages(max_wait_time=1)
            assert str(receive(holder, 1)[0]) == "a0"
        # And once the holder has closed, the session can be taken, and the message the holder left
        # unsettled comes first again (its lock went with the session lock), counted as a delivery
        with client.get_queue_receiver(session_queue, session_id="a") as successor:
            head = receive(successor, 1)[0]
            assert (str(head), head.delivery_count) == ("a0", 1)


def test_session_state_get_and_set(shared_namespace: LocalNamespace, session_queue: str) -> None:
    send_interleaved(shared_namespace, session_queue)
    with sb_client(shared_namespace) as client:
        with client.get_queue_receiver(session_queue, session_id="a") as receiver:
            # Given a fresh session without state
            assert receiver.session.get_state() is None
            # When state is set, Then it reads back
            receiver.session.set_state(b"checkpoint-1")
            assert receiver.session.get_state() == b"checkpoint-1"
            receiver.session.set_state("checkpoint-2")
            assert receiver.session.get_state() == b"checkpoint-2"
        # And it survives the receiver, and belongs to that session only
        with client.get_queue_receiver(session_queue, session_id="a") as receiver:
            assert receiver.session.get_state() == b"checkpoint-2"
            receiver.session.set_state(None)
            assert receiver.session.get_state() is None
        with client.get_queue_receiver(session_queue, session_id="b") as receiver:
            assert receiver.session.get_state() is None


def test_session_lock_renew(shared_namespace: LocalNamespace, session_queue: str) -> None:
    send_interleaved(shared_namespace, session_queue)
    with (
        sb_client(shared_namespace) as client,
        client.get_queue_receiver(session_queue, session_id="a") as receiver,
    ):
        until = receiver.session.locked_until_utc
        assert until is not None
        assert dt.datetime.now(dt.UTC) < until <= dt.datetime.now(dt.UTC) + dt.timedelta(seconds=4)
        # When the session lock is renewed after a second, Then locked_until moves later
        time.sleep(1)
        renewed = receiver.session.renew_lock()
        assert renewed > until
        assert receiver.session.locked_until_utc == renewed
        # And the session is still held: messages settle with it
        [message] = receive(receiver, 1)
        receiver.complete_message(message)


def test_session_queue_requires_a_session(shared_namespace: LocalNamespace, session_queue: str) -> None:
    with sb_client(shared_namespace) as client:
        # A message without session id is refused
        with client.get_queue_sender(session_queue) as sender, pytest.raises(ServiceBusError):
            sender.send_messages(ServiceBusMessage("no session"))
        # And a receiver without a session cannot read a session queue
        with pytest.raises(ServiceBusError), client.get_queue_receiver(session_queue) as receiver:
            receiver.receive_messages(max_wait_time=1)


def test_a_session_messages_lock_lasts_as_long_as_the_session_lock(
    shared_namespace: LocalNamespace, session_queue: str
) -> None:
    """On Service Bus a session message's lock is the session's: a receiver that keeps renewing the session
    lock (as ``AutoLockRenewer`` does in the SDK's sample) settles its messages long after the entity's
    LockDuration. Before, the local namespace expired each message lock on its own and the completion
    answered MessageLockLostError."""
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(session_queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}", session_id="S") for i in range(3)])
        with client.get_queue_receiver(session_queue, session_id="S", prefetch_count=3) as receiver:
            messages = receive(receiver, 3)
            session = receiver.session
            deadline = time.monotonic() + 8  # well past the 3 s lock
            while time.monotonic() < deadline:
                session.renew_lock()
                time.sleep(1)
            for message in messages:
                receiver.complete_message(message)  # raised MessageLockLostError before
        with client.get_queue_receiver(session_queue, session_id="S", max_wait_time=1) as receiver:
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_a_session_messages_lock_ends_with_an_unrenewed_session_lock(
    shared_namespace: LocalNamespace, session_queue: str
) -> None:
    """The other side of the rule: without renewals the session lock, and so the message lock, ends."""
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(session_queue) as sender:
            sender.send_messages(ServiceBusMessage("m", session_id="T"))
        with client.get_queue_receiver(session_queue, session_id="T") as receiver:
            (message,) = receive(receiver, 1)
            time.sleep(4.5)
            with pytest.raises(ServiceBusError):
                receiver.complete_message(message)
