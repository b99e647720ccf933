"""Persistence of a local namespace, through the public SDK: ``kill -9`` loses nothing with a data dir;
a restart without one, or ``disaster``, loses everything.

Each test owns its namespace process (``namespace_factory``) because it kills or wipes it. Message locks
are not persisted (as on Azure, a broker restart releases them), so a message locked but unsettled at
the kill is delivered again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, receive, receive_nothing, sb_client

pytestmark = pytest.mark.timeout(120)

NamespaceFactory = Callable[..., LocalNamespace]


def test_kill_9_loses_nothing_with_a_data_dir(namespace_factory: NamespaceFactory) -> None:
    ns = namespace_factory("durable", persistent=True)
    # Given entities with options: a queue, a topic with a subscription, a session queue
    with admin_client(ns) as admin:
        admin.create_queue("orders", max_delivery_count=4, lock_duration=dt.timedelta(seconds=30))
        admin.create_topic("events")
        admin.create_subscription("events", "audit")
        admin.create_queue("sessions", requires_session=True)
    with sb_client(ns) as client:
        # And messages in every state: active, dead-lettered, deferred, scheduled, locked but unsettled
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(f"o{i}", message_id=f"o{i}", application_properties={"i": i})
                    for i in range(6)
                ]
            )
            scheduled_seq = sender.schedule_messages(
                ServiceBusMessage("scheduled"), dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
            )[0]
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage("event"))
        with client.get_queue_sender("sessions") as sender:
            sender.send_messages(ServiceBusMessage("s", session_id="s1"))
        with client.get_queue_receiver("sessions", session_id="s1") as receiver:
            receiver.session.set_state(b"state-1")
        with client.get_queue_receiver("orders") as receiver:
            o0, o1, o2, o3, o4 = receive(receiver, 5)
            assert str(o4) == "o4" and o4.locked_until_utc is not None
            receiver.dead_letter_message(o1, reason="why", error_description="because")
            receiver.defer_message(o2)
            receiver.abandon_message(o3)
            # When o0 is completed (acknowledged) and the process is killed right after, o4 still locked
            receiver.complete_message(o0)
            ns.kill()
    assert not ns.running
    ns.start()
    # Then everything is back
    with admin_client(ns) as admin:
        orders = admin.get_queue("orders")
        assert (orders.max_delivery_count, orders.lock_duration) == (4, dt.timedelta(seconds=30))
        assert admin.get_queue("sessions").requires_session
        assert [s.name for s in admin.list_subscriptions("events")] == ["audit"]
        counts = admin.get_queue_runtime_properties("orders")
        # active counts the deferred o2 (as on Azure); o0 is gone
        assert (counts.active_message_count, counts.dead_letter_message_count) == (4, 1)
        assert counts.scheduled_message_count == 1
    with sb_client(ns) as client:
        with client.get_queue_receiver("orders") as receiver:
            # The completed o0 is gone; the rest is receivable in order, the abandon still counted, and
            # o4's lock did not survive the restart
            got = receive(receiver, 3)
            assert [str(m) for m in got] == ["o3", "o4", "o5"]
            assert got[0].delivery_count == 1
            assert got[0].application_properties == {b"i": 3}
            receive_nothing(receiver, wait=0.3)
            [deferred] = receiver.receive_deferred_messages([o2.sequence_number])
            assert str(deferred) == "o2"
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=scheduled_seq)
            assert [str(m) for m in peeked] == ["scheduled"]
        with client.get_queue_receiver("orders", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [dead] = receive(dlq, 1)
            assert (str(dead), dead.dead_letter_reason, dead.dead_letter_error_description) == (
                "o1",
                "why",
                "because",
            )
        with client.get_subscription_receiver("events", "audit") as receiver:
            assert [str(m) for m in receive(receiver, 1)] == ["event"]
        with client.get_queue_receiver("sessions", session_id="s1") as receiver:
            assert receiver.session.get_state() == b"state-1"
            assert [str(m) for m in receive(receiver, 1)] == ["s"]
        # And sequence numbers continue after the old ones
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("after restart"))
        with client.get_queue_receiver("orders") as receiver:
            [fresh] = [
                m
                for m in receiver.peek_messages(max_message_count=20, sequence_number=1)
                if str(m) == "after restart"
            ]
            assert fresh.sequence_number > scheduled_seq


def test_without_persistence_a_restart_loses_everything(namespace_factory: NamespaceFactory) -> None:
    # Given a namespace without a data dir, holding a queue with a message
    ns = namespace_factory("volatile", persistent=False)
    with admin_client(ns) as admin:
        admin.create_queue("orders")
    with sb_client(ns) as client, client.get_queue_sender("orders") as sender:
        sender.send_messages(ServiceBusMessage("lost"))
    # When it restarts
    ns.restart()
    # Then the queue and its message are gone
    with admin_client(ns) as admin:
        assert list(admin.list_queues()) == []
        with pytest.raises(ResourceNotFoundError):
            admin.get_queue("orders")
    with (
        sb_client(ns) as client,
        pytest.raises(MessagingEntityNotFoundError),
        client.get_queue_receiver("orders") as receiver,
    ):
        receiver.receive_messages(max_wait_time=1)


def test_disaster_drops_everything_for_good(namespace_factory: NamespaceFactory) -> None:
    # Given a persistent namespace holding a queue with a message
    ns = namespace_factory("doomed", persistent=True)
    with admin_client(ns) as admin:
        admin.create_queue("orders")
    with sb_client(ns) as client, client.get_queue_sender("orders") as sender:
        sender.send_messages(ServiceBusMessage("lost"))
    # When a disaster is declared
    ns.control.disaster()
    # Then the entities are gone at once, and a restart on the same data dir does not bring them back
    with admin_client(ns) as admin:
        assert list(admin.list_queues()) == []
    ns.kill()
    ns.start()
    with admin_client(ns) as admin:
        assert list(admin.list_queues()) == []
        # And the namespace works normally afterwards
        admin.create_queue("orders")
    with sb_client(ns) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("new"))
        with client.get_queue_receiver("orders") as receiver:
            assert [str(m) for m in receive(receiver, 1)] == ["new"]
            receive_nothing(receiver, wait=0.3)
