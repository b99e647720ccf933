"""The AMQP types of ``$cbs`` and ``$management`` answers, read by a client that keeps them
(python-qpid-proton).

Service Bus answers ``sequence-numbers`` as an array of long, ``expirations`` as an array of timestamp and
``sessions-ids`` as an array of strings; the .NET and Java clients read them as typed arrays, which an AMQP
list would not give them (the Python and JavaScript SDKs read either). Status codes are AMQP ints, which
those clients cast to 32-bit integers.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from proton import UNDESCRIBED, Array, Data, Message, int32

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.proton_requests import proton_requests
from tests.integration.sdk_conformance import admin_client, sb_client

pytestmark = pytest.mark.timeout(90)


def typed(value: Any, kind: int) -> bool:
    return isinstance(value, Array) and value.type == kind


def test_schedule_and_session_listing_answer_typed_arrays(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    queue = unique_name
    with admin_client(shared_namespace) as admin:
        admin.create_queue(queue, requires_session=True)
    with sb_client(shared_namespace) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages(
            [ServiceBusMessage("a", session_id="s-1"), ServiceBusMessage("b", session_id="s-2")]
        )
    scheduled = Message(
        body="later", id="later-1", group_id="s-3", annotations={"x-opt-scheduled-enqueue-time": 0}
    )
    entry = {"message-id": "later-1", "session-id": "s-3", "message": bytes(scheduled.encode())}
    with proton_requests(shared_namespace, queue) as request:
        schedule = request("com.microsoft:schedule-message", {"messages": [entry]})
        sessions = request(
            "com.microsoft:get-message-sessions", {"skip": 0, "top": 10, "last-updated-time": 0}
        )
        past_the_last = request(
            "com.microsoft:get-message-sessions", {"skip": 3, "top": 10, "last-updated-time": 0}
        )
        deleted = request("com.microsoft:batch-delete-messages", {"message-count": int32(1)})
    # Status codes are AMQP ints, on the CBS answer as on management answers
    assert isinstance(request.put_token.properties["status-code"], int32)
    assert isinstance(schedule.properties["statusCode"], int32)
    assert schedule.properties["statusCode"] == 200
    assert typed(schedule.body["sequence-numbers"], Data.LONG)
    assert len(schedule.body["sequence-numbers"].elements) == 1
    assert sessions.properties["statusCode"] == 200
    assert typed(sessions.body["sessions-ids"], Data.STRING)
    assert sorted(sessions.body["sessions-ids"].elements) == ["s-1", "s-2", "s-3"]
    # Counts are AMQP ints too
    assert isinstance(sessions.body["skip"], int32)
    # Past the last session: 204 No Content and no body, as Service Bus answers (an empty array would stop
    # the Python SDK's list of sessions with "index out of bounds")
    assert past_the_last.properties["statusCode"] == 204
    assert not past_the_last.body
    assert deleted.properties["statusCode"] == 200
    assert isinstance(deleted.body["message-count"], int32) and deleted.body["message-count"] == 1


def test_renew_lock_answers_an_array_of_timestamps(
    shared_namespace: LocalNamespace, unique_name: str
) -> None:
    queue = unique_name
    with sb_client(shared_namespace) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("locked"))
        with client.get_queue_receiver(queue) as receiver:
            (message,) = receiver.receive_messages(max_wait_time=5)
            token = uuid.UUID(str(message.lock_token))
            with proton_requests(shared_namespace, queue) as request:
                renewed = request(
                    "com.microsoft:renew-lock", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token)}
                )
            receiver.complete_message(message)
    assert renewed.properties["statusCode"] == 200
    assert typed(renewed.body["expirations"], Data.TIMESTAMP)
    assert len(renewed.body["expirations"].elements) == 1
