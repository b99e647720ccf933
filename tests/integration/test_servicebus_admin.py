"""NamespaceAdmin against a real local namespace's HTTPS management endpoint."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from pydantic import SecretStr

from bridge.core.envelope import Envelope
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import NamespaceConfigurationError, NamespaceError, NamespaceOutageError
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.credentials import management_connection_string
from bridge.servicebus.messages import to_message
from bridge.settings import NamespaceSettings
from tests.integration.servicebus_support import pool_for, settings_for

pytestmark = pytest.mark.timeout(120)


def namespace_settings(ns: LocalNamespace, **changes: object) -> NamespaceSettings:
    settings = settings_for(ns).primary
    assert settings is not None
    return settings.model_copy(update=changes)


def test_queue_topic_and_subscription_lifecycle(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with NamespaceAdmin(namespace_settings(shared_namespace)) as admin:
        # Given nothing exists, get answers None instead of raising
        assert admin.get_queue(unique_name) is None
        assert admin.get_topic(f"{unique_name}-t") is None
        # When entities are created and updated
        admin.create_queue(unique_name, lock_duration=timedelta(seconds=45), max_delivery_count=7)
        queue = admin.get_queue(unique_name)
        assert queue is not None and queue.lock_duration == timedelta(seconds=45)
        admin.update_queue(queue, max_delivery_count=9)
        updated = admin.get_queue(unique_name)
        assert updated is not None and updated.max_delivery_count == 9
        admin.create_topic(f"{unique_name}-t")
        admin.create_subscription(f"{unique_name}-t", "sub", max_delivery_count=3)
        subscription = admin.get_subscription(f"{unique_name}-t", "sub")
        assert subscription is not None and subscription.max_delivery_count == 3
        assert admin.get_subscription(f"{unique_name}-t", "missing") is None
        # Then the queue is listed and its runtime counts follow real sends
        assert unique_name in {q.name for q in admin.list_queues()}
        with pool_for(shared_namespace) as pool:
            env = Envelope(entity=unique_name, message_id="m", body=b"x", accepted_at=time.time())
            assert pool.send("primary", unique_name, [to_message(env)]).accepted == [0]
        assert admin.queue_runtime_properties(unique_name).active_message_count == 1
        # Creating it twice is a configuration error
        with pytest.raises(NamespaceConfigurationError):
            admin.create_queue(unique_name)


def test_management_endpoint_replaces_the_endpoint_host(shared_namespace: LocalNamespace) -> None:
    settings = namespace_settings(shared_namespace, management_endpoint="https://127.0.0.1:1")
    original = settings.connection_string.get_secret_value()
    endpoint = original.split(";", 1)[0]
    assert management_connection_string(settings) == original.replace(endpoint, "Endpoint=sb://127.0.0.1:1/")
    # A management endpoint that refuses connections fails fast as an outage, naming no secret
    with (
        NamespaceAdmin(settings, retry_total=0, timeout=2) as admin,
        pytest.raises(NamespaceOutageError) as caught,
    ):
        admin.get_queue("anything")
    assert shared_namespace.key not in str(caught.value)
    # The right management endpoint (the emulator serves it on the AMQP port) works
    right = namespace_settings(shared_namespace, management_endpoint=shared_namespace.management_endpoint)
    with NamespaceAdmin(right) as admin:
        assert isinstance(admin.list_queues(), list)


def test_wrong_key_is_a_configuration_error_without_the_key(shared_namespace: LocalNamespace) -> None:
    conn = shared_namespace.connection_string.replace(shared_namespace.key, "d3Jvbmcta2V5LXZhbHVl")
    settings = namespace_settings(shared_namespace, connection_string=SecretStr(conn))
    with NamespaceAdmin(settings, retry_total=0) as admin, pytest.raises(NamespaceError) as caught:
        admin.list_queues()
    assert isinstance(caught.value, NamespaceConfigurationError)
    assert "d3Jvbmcta2V5LXZhbHVl" not in str(caught.value) and shared_namespace.key not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
