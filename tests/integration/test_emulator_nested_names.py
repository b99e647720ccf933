"""Entity names with '/' (the paired-namespace backlog queues ``<ns>/x-servicebus-transfer/<i>``)."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.embedded.namespaces import LocalNamespace


def test_queue_with_slashes_in_its_name_is_created_listed_and_used(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    name = f"{unique_name}/x-servicebus-transfer/3"
    with ServiceBusAdministrationClient.from_connection_string(
        shared_namespace.connection_string, connection_verify=shared_namespace.certificate
    ) as admin:
        admin.create_queue(name, max_delivery_count=7)
        assert admin.get_queue(name).max_delivery_count == 7
        assert name in [q.name for q in admin.list_queues()]
    with ServiceBusClient.from_connection_string(shared_namespace.connection_string) as client:
        with client.get_queue_sender(name) as sender:
            sender.send_messages(ServiceBusMessage("nested"))
        with client.get_queue_receiver(name, max_wait_time=2) as receiver:
            assert [str(m) for m in receiver.receive_messages(max_wait_time=2)] == ["nested"]
