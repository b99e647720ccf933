"""Idle links and connections, and forced detaches, observed through the public azure-servicebus SDK.

The namespace runs with idle timeouts of seconds (``--link-idle-timeout``/``--connection-idle-timeout``;
Azure's are 600 s and 300 s), so what Azure does after ten minutes happens here within a test.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusConnectionError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import eventually, receive, sb_client

pytestmark = pytest.mark.timeout(90)

LINK_IDLE = 1.0
CONNECTION_IDLE = 1.5


@pytest.fixture
def idling(namespace_factory: Callable[..., LocalNamespace]) -> LocalNamespace:
    """A namespace whose links idle out after 1 s and whose linkless connections after 1.5 s more."""
    return namespace_factory("idle", auto_create=True, idle_timeouts=(LINK_IDLE, CONNECTION_IDLE))


def test_an_idle_receiver_link_is_detached_as_azure_does(idling: LocalNamespace) -> None:
    with sb_client(idling) as client, client.get_queue_receiver("q1") as receiver:
        assert receiver.receive_messages(max_wait_time=0.2) == []
        # When the link carries no message for longer than the link idle timeout
        # Then the next call fails with Azure's idle detach (the client has no retries)
        with pytest.raises(ServiceBusConnectionError, match=r"AmqpMessageConsumer\.IdleTimerExpired"):
            eventually(lambda: receiver.receive_messages(max_wait_time=0.3), lambda got: False, timeout=5)


def test_an_idle_connection_is_closed_after_its_links(idling: LocalNamespace) -> None:
    with sb_client(idling) as client, client.get_queue_sender("q1") as sender:
        sender.send_messages(ServiceBusMessage("warm"))
        # Then once the link idled out, the connection without links is closed too
        eventually(idling.control.status, lambda status: status["connections"] == 0, timeout=10)


def test_the_sdk_recovers_from_idle_detach_and_close_with_its_retries(idling: LocalNamespace) -> None:
    with (
        ServiceBusClient.from_connection_string(idling.connection_string, retry_backoff_factor=0.1) as client,
        client.get_queue_sender("q1") as sender,
        client.get_queue_receiver("q1") as receiver,
    ):
        sender.send_messages(ServiceBusMessage("before"))
        assert [str(m) for m in receive(receiver, 1)] == ["before"]
        # Given links and connections closed for idleness
        eventually(idling.control.status, lambda status: status["connections"] == 0, timeout=10)
        # When the same sender and receiver are used again, Then the SDK's own retries reconnect (within a
        # receive call's max_wait_time, which is also its retry budget)
        sender.send_messages(ServiceBusMessage("after"))
        [message] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert str(message) == "after"
        receiver.complete_message(message)


def test_fault_control_detaches_the_links_of_an_entity_at_once(
    namespace_factory: Callable[..., LocalNamespace],
) -> None:
    ns = namespace_factory("detach", auto_create=True)
    with (
        sb_client(ns) as client,
        client.get_queue_receiver("q1") as one,
        client.get_queue_receiver("q2") as two,
    ):
        assert one.receive_messages(max_wait_time=0.2) == []
        assert two.receive_messages(max_wait_time=0.2) == []
        # When the links of q1 are force-detached
        assert ns.control.detach("q1") == {"detached": 1}
        # Then q1's receiver fails with detach-forced, and q2's is untouched
        with pytest.raises(ServiceBusConnectionError, match="force detached"):
            one.receive_messages(max_wait_time=0.5)
        assert two.receive_messages(max_wait_time=0.2) == []
        # And without an entity every entity link goes
        assert ns.control.detach() == {"detached": 1}
        with pytest.raises(ServiceBusConnectionError, match="force detached"):
            two.receive_messages(max_wait_time=0.5)
