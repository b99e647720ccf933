"""The bridge's Service Bus adapter after its links sat idle past the namespace's idle timeouts.

The local namespace runs with idle timeouts of seconds (Azure: a link after 600 s without messages, then
its connection after 300 s more), so the links and connections of a pool or a receiver are closed under
them as on Azure. The next send and the next receive must work without an error reaching anyone: no
failed send, no exception, no warning logged by the bridge. How long the first send takes is measured by
``python -m bench.latency`` (the idle case), not here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from azure.servicebus import ServiceBusMessage

from bridge.core.envelope import Envelope
from bridge.embedded.namespaces import LocalNamespace
from bridge.servicebus.messages import to_message
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.receiving import EntityLink
from bridge.settings import RetrySettings
from tests.integration.receiver_support import namespace
from tests.integration.sdk_conformance import eventually, sb_client
from tests.integration.servicebus_support import drain, settings_for

pytestmark = pytest.mark.timeout(120)

LINK_IDLE, CONNECTION_IDLE = 1.0, 1.0


@pytest.fixture
def idling(namespace_factory: Callable[..., LocalNamespace]) -> LocalNamespace:
    return namespace_factory("idle", auto_create=True, idle_timeouts=(LINK_IDLE, CONNECTION_IDLE))


@pytest.fixture
def bridge_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """What the bridge logs at WARNING or above during the test."""
    caplog.set_level(logging.WARNING, logger="bridge")
    records: list[logging.LogRecord] = []
    yield records
    records.extend(r for r in caplog.records if r.name.startswith("bridge") and r.levelno >= logging.WARNING)


def idle_out(ns: LocalNamespace) -> None:
    """Wait until the namespace has closed every connection for idleness."""
    eventually(ns.control.status, lambda status: status["connections"] == 0, timeout=15, interval=0.2)


def send_one(pool: NamespacePool, queue: str, index: int) -> None:
    envelope = Envelope(entity=queue, message_id=f"m-{index}", body=b"x", accepted_at=time.time())
    result = pool.send("primary", queue, [to_message(envelope)])
    assert result.ok, result.failed


@pytest.mark.parametrize("refresh_after", [None, 0.5], ids=["sdk-retries-only", "refreshed"])
def test_a_pool_sends_after_its_links_idled_out(
    idling: LocalNamespace, refresh_after: float | None, bridge_warnings: list[logging.LogRecord]
) -> None:
    settings = settings_for(idling, attempt_deadline=10)
    retry = RetrySettings(attempt_deadline=10, link_refresh_after=refresh_after)
    pool = NamespacePool(settings.model_copy(update={"retry": retry}))
    try:
        send_one(pool, "q1", 0)
        generation = pool.generation("primary")
        # Given the pool's link and connection closed for idleness (and, with refreshing, reopened)
        time.sleep(LINK_IDLE + CONNECTION_IDLE + 1)
        if refresh_after is None:
            idle_out(idling)
        # When the pool sends again, Then the send is accepted on the same client generation
        send_one(pool, "q1", 1)
        assert pool.generation("primary") == generation
        if refresh_after is not None:
            assert pool.refreshed_links >= 1
    finally:
        pool.close()
    assert [m.message_id for m in drain(idling, "q1", 2)] == ["m-0", "m-1"]
    assert bridge_warnings == []


def test_a_receiver_receives_after_its_link_idled_out(
    idling: LocalNamespace, bridge_warnings: list[logging.LogRecord]
) -> None:
    link = EntityLink("primary", namespace(idling), RetrySettings(), entity="q1")
    try:
        # The first receive opens the link within its wait: the SDK spends the same budget on the open
        assert link.receive(10, max_wait=3) == []
        # Given the receiver's link and connection closed for idleness
        idle_out(idling)
        with sb_client(idling) as client, client.get_queue_sender("q1") as sender:
            sender.send_messages(ServiceBusMessage("after idle", message_id="late"))
        # When it receives again, Then the message arrives without an error
        got = link.receive(10, max_wait=5)
        assert [d.message_id for d in got] == ["late"]
        link.complete(got[0])
    finally:
        link.close()
    assert bridge_warnings == []


def test_senders_closed_for_idleness_never_cut_off_a_send(
    idling: LocalNamespace, bridge_warnings: list[logging.LogRecord]
) -> None:
    settings = settings_for(idling, attempt_deadline=10)
    workers = settings.workers.model_copy(update={"idle_sender_close": 0.05})
    pool = NamespacePool(settings.model_copy(update={"workers": workers}))
    sends = 6

    def send_with_pauses(queue: str) -> None:
        for index in range(sends):
            send_one(pool, queue, index)
            time.sleep(
                0.4
            )  # 8 times idle_sender_close: the sender is closed before the next send, even on a busy machine

    try:
        # Given senders closed as soon as no send wanted them for 50 ms
        # When two threads send to two queues, pausing between sends, while others send at once
        threads = [threading.Thread(target=send_with_pauses, args=(q,)) for q in ("q-a", "q-b")]
        for thread in threads:
            thread.start()
        for index in range(sends):
            send_one(pool, "q-c", index)
        for thread in threads:
            thread.join(60)
        # Then every send was accepted (send_one asserts it), senders were closed in between, and none
        # is left open once the sends stop
        eventually(lambda: pool.sender_paths("primary"), lambda paths: paths == [], timeout=10, interval=0.05)
        assert pool._refresher is not None and pool._refresher.closed >= sends // 2
    finally:
        pool.close()
    for queue in ("q-a", "q-b", "q-c"):
        assert [m.message_id for m in drain(idling, queue, sends)] == [f"m-{i}" for i in range(sends)]
    assert bridge_warnings == []
