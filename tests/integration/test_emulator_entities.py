"""Where a local namespace's entities come from: a TOML file at start, the management endpoint, or
auto-creation on first use (``--auto-create``), and not from anywhere else.

The file format is documented in ``bridge/emulator/entities_file.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(90)

ENTITIES = """
[queues.orders]
lock_duration = 5
max_delivery_count = 3
requires_duplicate_detection = true

[queues.sessions]
requires_session = true

[topics.events]
[topics.events.subscriptions.audit]
[topics.events.subscriptions.red-only.rules.red]
sql = "color = 'red'"
[topics.events.subscriptions.invoices.rules.by-subject]
correlation = { label = "invoice" }
"""


@pytest.fixture
def declared(namespace_factory: Callable[..., LocalNamespace], tmp_path: Path) -> LocalNamespace:
    """A namespace without auto-create whose entities come from a file."""
    path = tmp_path / "entities.toml"
    path.write_text(ENTITIES)
    return namespace_factory("declared", entities_file=path)


def test_entities_file_declares_entities_with_options(declared: LocalNamespace) -> None:
    # Then the management endpoint reports the declared entities and options
    with admin_client(declared) as admin:
        assert sorted(q.name for q in admin.list_queues()) == ["orders", "sessions"]
        orders = admin.get_queue("orders")
        assert orders.lock_duration == dt.timedelta(seconds=5)
        assert orders.max_delivery_count == 3 and orders.requires_duplicate_detection
        assert admin.get_queue("sessions").requires_session
        assert sorted(s.name for s in admin.list_subscriptions("events")) == ["audit", "invoices", "red-only"]
        assert [r.name for r in admin.list_rules("events", "audit")] == ["$Default"]
        assert [r.name for r in admin.list_rules("events", "red-only")] == ["red"]
    # And they behave as declared: rules filter, the queue locks for five seconds
    with sb_client(declared) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("red", application_properties={"color": "red"}),
                    ServiceBusMessage("invoice", subject="invoice"),
                ]
            )
        with client.get_subscription_receiver("events", "audit") as receiver:
            assert [str(m) for m in receive(receiver, 2)] == ["red", "invoice"]
        with client.get_subscription_receiver("events", "red-only") as receiver:
            assert [str(m) for m in receive(receiver, 1)] == ["red"]
            receive_nothing(receiver, wait=0.3)
        with client.get_subscription_receiver("events", "invoices") as receiver:
            assert [str(m) for m in receive(receiver, 1)] == ["invoice"]
            receive_nothing(receiver, wait=0.3)
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("o"))
        with client.get_queue_receiver("orders") as receiver:
            [message] = receive(receiver, 1)
            assert message.locked_until_utc is not None and message.enqueued_time_utc is not None
            lock = message.locked_until_utc - dt.datetime.now(dt.UTC)
            assert dt.timedelta(seconds=3) < lock <= dt.timedelta(seconds=6)


def test_without_auto_create_unknown_entities_are_not_found(declared: LocalNamespace) -> None:
    with sb_client(declared) as client:
        # When a sender or receiver is opened on an entity nobody created, Then MessagingEntityNotFoundError
        with pytest.raises(MessagingEntityNotFoundError), client.get_queue_sender("nobody-made-me") as sender:
            sender.send_messages(ServiceBusMessage("x"))
        with (
            pytest.raises(MessagingEntityNotFoundError),
            client.get_queue_receiver("nobody-made-me") as receiver,
        ):
            receiver.receive_messages(max_wait_time=1)
        with (
            pytest.raises(MessagingEntityNotFoundError),
            client.get_subscription_receiver("events", "no-such-sub") as receiver,
        ):
            receiver.receive_messages(max_wait_time=1)
    # And the failed attempts created nothing
    with admin_client(declared) as admin:
        assert sorted(q.name for q in admin.list_queues()) == ["orders", "sessions"]


def test_entities_created_through_the_management_endpoint(declared: LocalNamespace) -> None:
    # Given a queue created with the administration client on a namespace without auto-create
    with admin_client(declared) as admin:
        admin.create_queue("made-by-admin", max_delivery_count=1)
    # Then it is usable at once, with its options (one abandon dead-letters)
    with sb_client(declared) as client:
        with client.get_queue_sender("made-by-admin") as sender:
            sender.send_messages(ServiceBusMessage("hello"))
        with client.get_queue_receiver("made-by-admin") as receiver:
            [message] = receive(receiver, 1)
            receiver.abandon_message(message)
            receive_nothing(receiver, wait=0.3)
    with admin_client(declared) as admin:
        assert admin.get_queue_runtime_properties("made-by-admin").dead_letter_message_count == 1
        # When it is deleted, Then it is gone for senders too
        admin.delete_queue("made-by-admin")
    with (
        sb_client(declared) as client,
        pytest.raises(MessagingEntityNotFoundError),
        client.get_queue_sender("made-by-admin") as sender,
    ):
        sender.send_messages(ServiceBusMessage("too late"))


def test_auto_create_on_first_use(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a namespace started with --auto-create, and a queue name nobody created
    with admin_client(shared_namespace) as admin:
        assert unique_name not in [q.name for q in admin.list_queues()]
    # When a message is sent to it, Then the queue exists with Azure's defaults and holds the message
    with sb_client(shared_namespace) as client, client.get_queue_sender(unique_name) as sender:
        sender.send_messages(ServiceBusMessage("first use"))
    with admin_client(shared_namespace) as admin:
        queue = admin.get_queue(unique_name)
        assert queue.max_delivery_count == 10 and queue.lock_duration == dt.timedelta(minutes=1)
        assert admin.get_queue_runtime_properties(unique_name).active_message_count == 1


def test_bad_entities_file_stops_the_start(
    namespace_factory: Callable[..., LocalNamespace], tmp_path: Path
) -> None:
    from bridge.errors import EmulatorError

    path = tmp_path / "bad.toml"
    path.write_text("[queues.q]\nlock_durration = 5\n")
    with pytest.raises(EmulatorError, match="lock_durration"):
        namespace_factory("bad", entities_file=path)
