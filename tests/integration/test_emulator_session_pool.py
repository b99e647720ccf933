"""A pool of next-available-session receivers, the way the SDK's session-pool samples run one.

Each worker takes whichever session is free, drains it up to a ``shutdown`` message, and stops when
opening a receiver raises ``OperationTimeoutError`` — Service Bus's answer when no session becomes
available within the receiver's ``max_wait_time`` (the attach comes back without a source, then a
``com.microsoft:timeout`` detach). A receiver that "opened" without a session would instead loop on
empty sessions or fail on ``receiver.session``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import OperationTimeoutError

from bridge.embedded.namespaces import LocalNamespace
from tests.integration.sdk_conformance import admin_client, sb_client

pytestmark = pytest.mark.timeout(90)

SESSIONS = 3
PER_SESSION = 4
WORKERS = 3


@pytest.fixture
def filled_session_queue(shared_namespace: LocalNamespace, unique_name: str) -> str:
    """A session queue holding ``PER_SESSION`` messages and a ``shutdown`` for each of ``SESSIONS``."""
    with admin_client(shared_namespace) as admin:
        admin.create_queue(unique_name, requires_session=True, lock_duration=dt.timedelta(seconds=10))
    with sb_client(shared_namespace) as client, client.get_queue_sender(unique_name) as sender:
        for session in range(SESSIONS):
            sender.send_messages(
                [ServiceBusMessage(f"s{session}-{i}", session_id=f"s{session}") for i in range(PER_SESSION)]
                + [ServiceBusMessage("shutdown", session_id=f"s{session}")]
            )
    return unique_name


def drain_sessions(client: ServiceBusClient, queue: str, got: list[str], timeouts: list[int]) -> None:
    """One pool worker, as in the SDK's sync session-pool sample."""
    while True:
        try:
            with client.get_queue_receiver(
                queue, max_wait_time=1, session_id=NEXT_AVAILABLE_SESSION
            ) as receiver:
                receiver.session.set_state("OPEN")
                for message in receiver:
                    got.append(f"{receiver.session.session_id}:{message}")
                    receiver.complete_message(message)
                    if str(message) == "shutdown":
                        receiver.session.set_state("CLOSED")
                        break
        except OperationTimeoutError:
            timeouts.append(1)
            return


def expected() -> list[str]:
    return sorted(
        [f"s{s}:s{s}-{i}" for s in range(SESSIONS) for i in range(PER_SESSION)]
        + [f"s{s}:shutdown" for s in range(SESSIONS)]
    )


def test_sync_session_pool_drains_every_session_then_times_out(
    shared_namespace: LocalNamespace, filled_session_queue: str
) -> None:
    got: list[str] = []
    timeouts: list[int] = []
    with ServiceBusClient.from_connection_string(shared_namespace.connection_string, retry_total=0) as client:
        workers = [
            threading.Thread(target=drain_sessions, args=(client, filled_session_queue, got, timeouts))
            for _ in range(WORKERS)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert not any(worker.is_alive() for worker in workers), "a pool worker never stopped"
    # Then every message of every session arrived once, and every worker stopped on the timeout
    assert sorted(got) == expected()
    assert len(timeouts) == WORKERS


def test_async_session_pool_drains_every_session_then_times_out(
    shared_namespace: LocalNamespace, filled_session_queue: str
) -> None:
    got: list[str] = []

    async def worker(client: AsyncServiceBusClient) -> str:
        while True:
            try:
                async with client.get_queue_receiver(
                    filled_session_queue, max_wait_time=1, session_id=NEXT_AVAILABLE_SESSION
                ) as receiver:
                    await receiver.session.set_state("OPEN")
                    async for message in receiver:
                        got.append(f"{receiver.session.session_id}:{message}")
                        await receiver.complete_message(message)
                        if str(message) == "shutdown":
                            await receiver.session.set_state("CLOSED")
                            break
            except OperationTimeoutError:
                return "timed out"

    async def pool() -> list[str]:
        async with AsyncServiceBusClient.from_connection_string(
            shared_namespace.connection_string, retry_total=0
        ) as client:
            return await asyncio.wait_for(asyncio.gather(*(worker(client) for _ in range(WORKERS))), 60)

    assert asyncio.run(pool()) == ["timed out"] * WORKERS
    assert sorted(got) == expected()


def test_no_session_available_raises_on_open(shared_namespace: LocalNamespace, unique_name: str) -> None:
    with admin_client(shared_namespace) as admin:
        admin.create_queue(f"{unique_name}-empty", requires_session=True)
    with sb_client(shared_namespace) as client:
        receiver = client.get_queue_receiver(
            f"{unique_name}-empty", max_wait_time=1, session_id=NEXT_AVAILABLE_SESSION
        )
        # When a next-available receiver opens on a queue without sessions, Then the open itself raises
        with pytest.raises(OperationTimeoutError):
            receiver.__enter__()
        receiver.close()
