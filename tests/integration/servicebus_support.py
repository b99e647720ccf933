"""Helpers for the Service Bus adapter tests: settings for local namespaces and a plain SDK reader."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiveMode

from bridge.embedded.namespaces import LocalNamespace
from bridge.servicebus.pool import NamespacePool
from bridge.settings import Settings

TEST_DEADLINE = 2.0


def settings_for(
    primary: LocalNamespace,
    secondary: LocalNamespace | None = None,
    *,
    attempt_deadline: float = TEST_DEADLINE,
) -> Settings:
    """Settings naming the local namespaces, default SDK retries and a short attempt deadline."""

    def ns(local: LocalNamespace) -> dict[str, str]:
        return {
            "connection_string": local.connection_string,
            "management_endpoint": local.management_endpoint,
            "certificate": local.certificate,
        }

    return Settings(
        primary=ns(primary),
        secondary=ns(secondary) if secondary is not None else None,
        retry={"attempt_deadline": attempt_deadline},
    )


@contextmanager
def pool_for(
    primary: LocalNamespace, secondary: LocalNamespace | None = None, **options: float
) -> Iterator[NamespacePool]:
    """A ``NamespacePool`` on the local namespaces, closed afterwards."""
    deadline = options.pop("attempt_deadline", TEST_DEADLINE)
    pool = NamespacePool(settings_for(primary, secondary, attempt_deadline=deadline), **options)  # type: ignore[arg-type]
    try:
        yield pool
    finally:
        pool.close()


def drain(
    ns: LocalNamespace, queue: str, expected: int, max_wait: float = 5.0
) -> list[ServiceBusReceivedMessage]:
    """Receive and delete up to ``expected`` messages from ``queue`` with the plain SDK."""
    got: list[ServiceBusReceivedMessage] = []
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with (
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=0) as client,
        client.get_queue_receiver(queue, receive_mode=mode) as receiver,
    ):
        while len(got) < expected:
            batch = receiver.receive_messages(max_message_count=expected - len(got), max_wait_time=max_wait)
            if not batch:
                break
            got.extend(batch)
    return got


def body_of(message: ServiceBusReceivedMessage) -> bytes:
    """The data body of a received message."""
    return b"".join(message.body)
