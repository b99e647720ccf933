"""The receiver while its Redis fails (``docs/receiving.md``, "Guarantees"): a copy is completed only after
its done mark and its ``handled`` event are stored, and a session's messages reach the handler in order.

Real parts: a private redis-server per test (AOF ``always``), killed with SIGKILL while the receiver runs and
started again on the same port and data directory; a local namespace (one process for the module); the
in-process ``Receiver``; the unmodified SDK for sends and peeks. Handler calls are recorded in the test
process, since the receiver's Redis is the thing that fails.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import redis
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.core.journal import EventKind
from bridge.core.received import ReceivedMessage
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.redis_server import RedisServer
from bridge.embedded.stack import wait_until
from bridge.journal.store import JournalStore
from bridge.receiving import Receiver
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow
from bridge.servicebus.admin import NamespaceAdmin
from bridge.settings import JournalSettings, Settings
from tests.integration.receiver_support import counts, namespace, send, settings
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    """One local namespace for the module (queues created on first use)."""
    ns = LocalNamespace("primary", data_dir=tmp_path_factory.mktemp("rx-faults-ns"), auto_create=True)
    try:
        yield ns.start()
    finally:
        ns.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """This test's own redis-server (the test kills it)."""
    with RedisServer(data_dir=tmp_path / "redis") as started:
        yield started


class Running:
    """A ``Receiver`` on a thread of the test process."""

    def __init__(self, entity: str, handler: Callable[[ReceivedMessage], None], config: Settings) -> None:
        self.receiver = Receiver(entity, handler, settings=config)
        self.thread = threading.Thread(target=self.receiver.run, name="test-receiver", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.receiver.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the receiver did not stop"


def handled_events(url: str, entity: str) -> Counter[str]:
    """``handled`` events per MessageId in ``entity``'s journal."""
    client = redis.Redis.from_url(url)
    try:
        events = JournalStore(client, JournalSettings()).read(entity, 100_000)
    finally:
        client.close()
    return Counter(e.message_id or "" for _, e in events if e.kind is EventKind.HANDLED)


def remembered(url: str, entity: str, ids: list[str]) -> list[str]:
    """The ids of ``ids`` the window remembers as handled."""
    client = redis.Redis.from_url(url)
    try:
        window = DedupWindow(
            client,
            ReceiverKeys(entity),
            owner="test",
            window=600,
            max_remembered=10,
            inflight_ttl=30,
        )
        return [m for m in ids if window.is_done(m)]
    finally:
        client.close()


def test_a_done_mark_redis_cannot_store_is_retried_and_the_copy_completed_only_after_it(
    primary: LocalNamespace, server: RedisServer
) -> None:
    queue = f"done-fault-{uuid.uuid4().hex[:8]}"
    ids = [f"{queue}-{i}" for i in range(3)]
    calls: list[str] = []
    killed = threading.Event()

    def handler(message: ReceivedMessage) -> None:
        calls.append(message.message_id or "")
        if not killed.is_set():
            # Given Redis killed (-9) while the handler runs: its done mark cannot be written on return
            server.kill()
            killed.set()

    config = settings(server.url, primary, None, receiver={"max_wait": 0.5})
    send(primary, queue, ids)
    running = Running(queue, handler, config)
    try:
        assert killed.wait(30), "no handler call"
        time.sleep(1.5)
        # Then while Redis is down no copy is completed: their done marks are not stored yet
        assert count_in(primary, queue) == 3, "a copy was completed without its done mark"
        # When Redis comes back (same port, same data)
        server.start()
        # Then the done marks, the counters and the handled events are stored and the copies completed
        wait_until(lambda: count_in(primary, queue) == 0, 30, what="the copies completed")
    finally:
        running.stop()
    assert Counter(calls) == dict.fromkeys(ids, 1)
    assert remembered(server.url, queue, ids) == ids
    assert handled_events(server.url, queue) == dict.fromkeys(ids, 1)
    assert counts(server.url, queue).handled == 3


def test_a_copy_whose_done_mark_never_got_stored_is_not_completed_and_is_handed_again(
    primary: LocalNamespace, server: RedisServer
) -> None:
    queue = f"done-giveup-{uuid.uuid4().hex[:8]}"
    message_id = f"{queue}-0"
    calls: list[str] = []
    killed = threading.Event()

    def handler(message: ReceivedMessage) -> None:
        calls.append(message.message_id or "")
        if not killed.is_set():
            server.kill()
            killed.set()

    # (a short in-flight mark: the one left behind by the stopped receiver blocks the next for that long)
    config = settings(server.url, primary, None, receiver={"max_wait": 0.5, "inflight_ttl": 2})
    send(primary, queue, [message_id])
    # Given a receiver whose Redis is killed while its handler runs
    running = Running(queue, handler, config)
    assert killed.wait(30), "no handler call"
    # When it is stopped before Redis comes back
    running.stop()
    # Then the copy was not completed: its done mark and handled event are not stored
    assert count_in(primary, queue) == 1, "completed without its done mark"
    server.start()
    assert remembered(server.url, queue, [message_id]) == []
    # And a later receiver hands it again (at-least-once), and then remembers and journals it once
    again = Running(queue, handler, config)
    try:
        wait_until(lambda: count_in(primary, queue) == 0, 30, what="the copy completed")
    finally:
        again.stop()
    assert calls == [message_id, message_id]
    assert remembered(server.url, queue, [message_id]) == [message_id]
    assert handled_events(server.url, queue) == {message_id: 1}


def test_each_session_is_handed_in_order_under_load_while_redis_is_killed_and_restarted(
    primary: LocalNamespace, server: RedisServer
) -> None:
    queue = f"session-fault-{uuid.uuid4().hex[:8]}"
    with NamespaceAdmin(namespace(primary)) as admin:
        admin.create_queue(queue, requires_session=True, lock_duration=timedelta(seconds=10))
    sessions = [f"s{i}" for i in range(16)]
    calls: list[tuple[str, int]] = []
    sent: dict[str, int] = {}
    lock = threading.Lock()
    stop_sending = threading.Event()

    def handler(message: ReceivedMessage) -> None:
        with lock:
            calls.append((message.session_id or "", int(message.text.rsplit("-", 1)[1])))

    def sender(session: str) -> None:
        # One message of a session in flight at a time: the order the namespace accepted is the order to keep
        with ServiceBusClient.from_connection_string(primary.connection_string) as client, \
                client.get_queue_sender(queue) as out:  # fmt: skip
            n = 0
            while not stop_sending.is_set():
                text = f"{session}-{n}"
                try:
                    out.send_messages(ServiceBusMessage(text, message_id=text, session_id=session))
                except Exception:  # not acknowledged: the same message again (a stored copy is a duplicate)
                    time.sleep(0.1)
                    continue
                sent[session] = n
                n += 1
                time.sleep(0.02)

    # Short in-flight marks: a claim that Redis ran but whose answer died with it leaves this process's mark,
    # which holds the id back (as another copy's handler would) until it expires.
    config = settings(
        server.url,
        primary,
        None,
        entities={queue: {"requires_session": True, "replication": "none"}},
        receiver={"max_wait": 1, "concurrency": 16, "inflight_ttl": 3},
    )
    running = Running(queue, handler, config)
    senders = [threading.Thread(target=sender, args=(s,), name=f"send-{s}") for s in sessions]
    try:
        # Given sixteen sessions sent to continuously, each held by its own receiving thread
        for thread in senders:
            thread.start()
        # When the receiver's Redis is killed (-9) twice and started again meanwhile
        for _ in range(2):
            time.sleep(3)
            server.kill()
            time.sleep(1.5)
            server.start()
        time.sleep(2)
        stop_sending.set()
        for thread in senders:
            thread.join(30)
        expected = {f"{s}-{n}" for s, last in sent.items() for n in range(last + 1)}
        wait_until(lambda: expected <= {f"{s}-{n}" for s, n in list(calls)}, 60, what="every message handed")
    finally:
        stop_sending.set()
        running.stop()
    # Then each message was handed once, and each session's in the order it was sent
    assert max(Counter(calls).values()) == 1
    for session in sessions:
        first: list[int] = []
        for got_session, n in calls:
            if got_session == session and n not in first:
                first.append(n)
        late = [(before, after) for before, after in pairwise(first) if after < before]
        assert not late, f"{session}: a message handed after a later one (later, earlier): {late}"
    # And every handed message is remembered, and journaled as handled once
    assert handled_events(server.url, queue) == dict.fromkeys(expected, 1)
    assert len(remembered(server.url, queue, sorted(expected))) == len(expected)
