"""Helpers for the SDK conformance tests of the local Service Bus (``test_emulator_*.py``).

Only the public azure-servicebus SDK is used: ``ServiceBusClient`` for messages and
``ServiceBusAdministrationClient`` (over the namespace's self-signed TLS) for entities with options.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.embedded.namespaces import LocalNamespace

T = TypeVar("T")


@contextmanager
def sb_client(ns: LocalNamespace, connection_string: str | None = None) -> Iterator[ServiceBusClient]:
    """A client without SDK retries, so each call shows the namespace's answer right now."""
    with ServiceBusClient.from_connection_string(
        connection_string or ns.connection_string, retry_total=0
    ) as client:
        yield client


@contextmanager
def admin_client(ns: LocalNamespace) -> Iterator[ServiceBusAdministrationClient]:
    """The administration client, trusting the namespace's self-signed certificate."""
    with ServiceBusAdministrationClient.from_connection_string(
        ns.connection_string, connection_verify=ns.certificate, retry_total=0
    ) as admin:
        yield admin


def receive(
    receiver: ServiceBusReceiver, count: int, timeout: float = 10.0
) -> list[ServiceBusReceivedMessage]:
    """Exactly ``count`` messages (fails the test if fewer arrive within ``timeout`` seconds)."""
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(receiver.receive_messages(max_message_count=count - len(got), max_wait_time=1))
    assert len(got) == count, f"only {len(got)} of {count} messages arrived within {timeout} s"
    return got


def receive_nothing(receiver: ServiceBusReceiver, wait: float = 1.0) -> None:
    """Assert that no message arrives within ``wait`` seconds."""
    got = receiver.receive_messages(max_message_count=10, max_wait_time=wait)
    assert got == [], f"unexpected messages: {[str(m) for m in got]}"


def eventually(
    probe: Callable[[], T], accept: Callable[[T], bool], timeout: float = 10.0, interval: float = 0.1
) -> T:
    """Poll ``probe`` until ``accept`` holds for its result; returns that result or fails with the last."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if accept(value):
            return value
        assert time.monotonic() < deadline, f"condition not reached within {timeout} s; last value {value!r}"
        time.sleep(interval)
