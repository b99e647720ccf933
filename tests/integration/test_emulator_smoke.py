"""The local Service Bus answers the stock SDK: send, receive, settle (the full suite is test_emulator_*)."""

from __future__ import annotations

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.embedded.namespaces import LocalNamespace


def test_stock_sdk_round_trip(shared_namespace: LocalNamespace, unique_name: str) -> None:
    # Given a queue auto-created on first use
    with ServiceBusClient.from_connection_string(shared_namespace.connection_string, retry_total=0) as client:
        # When a single message, a list and a batch are sent
        with client.get_queue_sender(unique_name) as sender:
            sender.send_messages(ServiceBusMessage("one", message_id="m-1", application_properties={"k": 1}))
            sender.send_messages([ServiceBusMessage("two"), ServiceBusMessage("three")])
            batch = sender.create_message_batch()
            batch.add_message(ServiceBusMessage("four"))
            sender.send_messages(batch)
        # Then a PEEK_LOCK receiver gets all four in order with broker properties, and completing empties it
        with client.get_queue_receiver(unique_name, max_wait_time=2) as receiver:
            got = []
            while len(got) < 4:
                batch_received = receiver.receive_messages(max_message_count=10, max_wait_time=2)
                assert batch_received, f"only {len(got)} of 4 arrived"
                got.extend(batch_received)
            assert [str(m) for m in got] == ["one", "two", "three", "four"]
            assert got[0].message_id == "m-1"
            assert got[0].application_properties == {b"k": 1}
            assert [m.sequence_number for m in got] == sorted(m.sequence_number for m in got)
            for message in got:
                receiver.complete_message(message)
            assert receiver.peek_messages(max_message_count=10) == []
