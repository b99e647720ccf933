"""Fault control of a real local namespace, observed through the public azure-servicebus SDK.

Each test gets its own namespace process from ``namespace_factory`` (faults are namespace-wide state) and
restores nothing by hand: the process is stopped afterwards, even when the test fails.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusServerBusyError,
)
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.embedded.namespaces import LocalNamespace
from bridge.emulator.control_client import ControlClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def emulator(namespace_factory: Callable[..., LocalNamespace]) -> LocalNamespace:
    running = namespace_factory("primary")
    with ServiceBusAdministrationClient.from_connection_string(
        running.connection_string, connection_verify=running.certificate, retry_total=0
    ) as admin:
        admin.create_queue("q1")
        admin.create_queue("q2")
    return running


@pytest.fixture
def control(emulator: LocalNamespace) -> ControlClient:
    return emulator.control


def send(emulator: LocalNamespace, queue: str, body: str = "x", timeout: float = 5) -> None:
    """One send on a fresh client, no SDK retries, so each call shows the namespace's state right now."""
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client,
        client.get_queue_sender(queue) as sender,
    ):
        sender.send_messages(ServiceBusMessage(body), timeout=timeout)


def active(emulator: LocalNamespace, queue: str) -> int:
    with ServiceBusAdministrationClient.from_connection_string(
        emulator.connection_string, connection_verify=emulator.certificate, retry_total=0
    ) as admin:
        return int(admin.get_queue_runtime_properties(queue).active_message_count)


def host_port(emulator: LocalNamespace) -> tuple[str, int]:
    host, port = emulator.management_endpoint.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


def test_outage_refuses_connections_until_restored(emulator: LocalNamespace, control: ControlClient) -> None:
    send(emulator, "q1", "before")
    # Given an outage, a new connection is refused outright.
    control.outage()
    with pytest.raises(ServiceBusConnectionError):
        send(emulator, "q1", "during")
    with pytest.raises(ConnectionRefusedError), socket.create_connection(host_port(emulator), timeout=2):
        pass
    # When restored, sends work again and nothing sent before was lost.
    control.restore()
    send(emulator, "q1", "after")
    assert active(emulator, "q1") == 2


def test_outage_closes_an_open_sender(emulator: LocalNamespace, control: ControlClient) -> None:
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client,
        client.get_queue_sender("q1") as sender,
    ):
        sender.send_messages(ServiceBusMessage("first"))
        control.outage()
        with pytest.raises(ServiceBusError):
            sender.send_messages(ServiceBusMessage("second"), timeout=5)
    control.restore()
    assert active(emulator, "q1") == 1


def test_entity_outage_leaves_other_entities_alone(emulator: LocalNamespace, control: ControlClient) -> None:
    control.outage(entity="q1")
    with pytest.raises(ServiceBusError):
        send(emulator, "q1")
    send(emulator, "q2")
    control.restore(entity="q1")
    send(emulator, "q1")
    assert (active(emulator, "q1"), active(emulator, "q2")) == (1, 1)


def test_busy_rejects_sends_with_server_busy(emulator: LocalNamespace, control: ControlClient) -> None:
    control.busy()
    with pytest.raises(ServiceBusServerBusyError):
        send(emulator, "q1")
    assert active(emulator, "q1") == 0
    control.restore()
    send(emulator, "q1")
    assert active(emulator, "q1") == 1


def test_busy_with_probability_zero_rejects_nothing(emulator: LocalNamespace, control: ControlClient) -> None:
    control.busy(probability=0.0)
    for _ in range(3):
        send(emulator, "q1")
    assert active(emulator, "q1") == 3


def test_stall_that_never_settles_times_out(emulator: LocalNamespace, control: ControlClient) -> None:
    control.stall(entity="q1")
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError):
        send(emulator, "q1", timeout=2)
    assert time.monotonic() - started < 30
    # Another entity is not stalled.
    send(emulator, "q2")


def test_blackhole_accepts_tcp_and_answers_nothing(emulator: LocalNamespace, control: ControlClient) -> None:
    control.blackhole()
    # The connect succeeds, the AMQP header goes out, and not one byte comes back.
    with socket.create_connection(host_port(emulator), timeout=2) as sock:
        sock.sendall(b"AMQP\x03\x01\x00\x00")
        sock.settimeout(1.5)
        with pytest.raises(TimeoutError):
            sock.recv(8)
    # The control interface still answers, and restore brings the endpoint back.
    assert control.faults()["namespace"]["fault"] == "blackhole"
    control.restore()
    send(emulator, "q1")


def test_disaster_loses_every_entity_and_message(emulator: LocalNamespace, control: ControlClient) -> None:
    send(emulator, "q1")
    control.disaster()
    with ServiceBusAdministrationClient.from_connection_string(
        emulator.connection_string, connection_verify=emulator.certificate, retry_total=0
    ) as admin:
        with pytest.raises(ResourceNotFoundError):
            admin.get_queue("q1")
        assert list(admin.list_queues()) == []
    status = control.status()
    assert (status["queues"], status["topics"]) == (0, 0)


def test_status_reports_faults_and_counts(emulator: LocalNamespace, control: ControlClient) -> None:
    control.busy(probability=0.5, entity="q2")
    status = control.status()
    assert status["name"] == "primary" and status["queues"] == 2
    assert status["faults"]["entities"]["q2"]["probability"] == 0.5
    assert isinstance(status["connections"], int)
