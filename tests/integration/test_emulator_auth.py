"""SAS authentication of the local Service Bus on CBS put-token, through the public SDK.

Tokens are handed to the SDK the way an application would: a connection string with
``SharedAccessSignature=<token>`` (the SDK then presents the token as is), generated with
the SDK's own ``generate_sas_token``, which signs exactly as Azure does.
"""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus._pyamqp.utils import generate_sas_token
from azure.servicebus.exceptions import ServiceBusAuthenticationError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import receive, sb_client

pytestmark = pytest.mark.timeout(60)


def endpoint(ns: LocalNamespace) -> str:
    """``sb://host:port`` of the namespace."""
    return ns.connection_string.split("Endpoint=", 1)[1].split(";", 1)[0]


def token_connection_string(ns: LocalNamespace, token: str) -> str:
    """A connection string that carries a ready-made SAS token instead of a key."""
    return f"Endpoint={endpoint(ns)};SharedAccessSignature={token};UseDevelopmentEmulator=true"


def test_wrong_key_is_an_authentication_error(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given the right key name with a key that is not the namespace's
    wrong = shared_namespace.connection_string.replace(
        f"SharedAccessKey={shared_namespace.key}", "SharedAccessKey=bm90LXRoZS1rZXk="
    )
    assert wrong != shared_namespace.connection_string
    # When a message is sent, Then the SDK raises its authentication error and nothing is stored
    with (
        sb_client(shared_namespace, wrong) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_sender(unique_name) as sender,
    ):
        sender.send_messages(ServiceBusMessage("refused"))
    with sb_client(shared_namespace) as client, client.get_queue_receiver(unique_name) as receiver:
        assert receiver.peek_messages(max_message_count=5) == []


def test_unknown_key_name_is_an_authentication_error(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    wrong = shared_namespace.connection_string.replace(
        "SharedAccessKeyName=RootManageSharedAccessKey", "SharedAccessKeyName=SomeoneElse"
    )
    assert wrong != shared_namespace.connection_string
    with (
        sb_client(shared_namespace, wrong) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_receiver(unique_name) as receiver,
    ):
        receiver.receive_messages(max_wait_time=1)


def test_valid_token_in_connection_string_works(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a token for the whole namespace, valid for ten minutes
    token = generate_sas_token(
        endpoint(shared_namespace), "RootManageSharedAccessKey", shared_namespace.key, int(time.time()) + 600
    )
    # When it is used to send and receive, Then both work
    with sb_client(shared_namespace, token_connection_string(shared_namespace, token)) as client:
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("by token"))
        with client.get_queue_receiver(unique_name) as receiver:
            [message] = receive(receiver, 1)
            assert str(message) == "by token"
            receiver.complete_message(message)


def test_expired_token_is_an_authentication_error(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a correctly signed token that expired a minute ago
    token = generate_sas_token(
        endpoint(shared_namespace), "RootManageSharedAccessKey", shared_namespace.key, int(time.time()) - 60
    )
    # When it is used, Then the SDK raises its authentication error
    with (
        sb_client(shared_namespace, token_connection_string(shared_namespace, token)) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_sender(unique_name) as sender,
    ):
        sender.send_messages(ServiceBusMessage("too late"))


def test_token_signed_with_another_key_is_an_authentication_error(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    token = generate_sas_token(
        endpoint(shared_namespace), "RootManageSharedAccessKey", "not-the-key", int(time.time()) + 600
    )
    with (
        sb_client(shared_namespace, token_connection_string(shared_namespace, token)) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_sender(unique_name) as sender,
    ):
        sender.send_messages(ServiceBusMessage("forged"))


def test_token_audience_is_scoped_to_its_entity(shared_namespace: LocalNamespace, unique_name: str) -> None:
    queue_a, queue_b = f"{unique_name}-a", f"{unique_name}-b"
    # Given a valid token whose audience is queue A only
    token = generate_sas_token(
        f"{endpoint(shared_namespace)}/{queue_a}",
        "RootManageSharedAccessKey",
        shared_namespace.key,
        int(time.time()) + 600,
    )
    conn = token_connection_string(shared_namespace, token)
    # When it is used for queue B, Then it is refused (and queue B was not even auto-created)
    with (
        sb_client(shared_namespace, conn) as client,
        pytest.raises(ServiceBusAuthenticationError),
        client.get_queue_sender(queue_b) as sender,
    ):
        sender.send_messages(ServiceBusMessage("wrong queue"))
    # When it is used for queue A, Then send, receive and settle all work
    with sb_client(shared_namespace, conn) as client:
        with client.get_queue_sender(queue_a) as sender:
            sender.send_messages(ServiceBusMessage("right queue"))
        with client.get_queue_receiver(queue_a) as receiver:
            [message] = receive(receiver, 1)
            assert str(message) == "right queue"
            receiver.complete_message(message)
            assert receiver.peek_messages(max_message_count=5) == []
    # And with the namespace key, queue B holds nothing
    with sb_client(shared_namespace) as client, client.get_queue_receiver(queue_b) as receiver:
        assert receiver.peek_messages(max_message_count=5) == []
