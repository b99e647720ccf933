"""A slow handler while the receivers' Redis is down for longer than its in-flight mark's life: the handler
never runs twice at once for one MessageId, and the receiver holding the mark takes no new work while it
cannot renew it (docs/receiving.md, "In-flight marks, fencing and their bound").

Real parts: a private redis-server (AOF ``always``) killed with SIGKILL while the handler runs and started
again on the same port and data directory after the outage; three local namespaces; two in-process
``Receiver``s; the unmodified SDK for sends and peeks. ``holder`` reads the primary (where the first copy
is) and a third namespace (its second link, where work arrives during the outage); ``other`` reads the
secondary (where the second copy is), so which receiver gets which copy is fixed. Handler calls are
recorded in the test process with their start and end times, since the receivers' Redis is what fails.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from bridge.core.received import ReceivedMessage
from bridge.core.receiving import Claim, Renewal
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.redis_server import RedisServer
from bridge.embedded.stack import wait_until
from bridge.receiving import Receiver
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.renewal import LockWatch
from bridge.receiving.window import DedupWindow
from bridge.servicebus.receiving import LockRenewer
from bridge.settings import Settings
from tests.integration.receiver_support import counts, send, settings
from tests.integration.worker_support import count_in


@dataclass(frozen=True)
class Scale:
    """The scenario's times (seconds): how long the handler runs, when Redis is killed (after the handler
    started), how long it stays down, and the in-flight mark's life (``inflight_ttl``)."""

    handler: float
    kill_after: float
    outage: float
    inflight_ttl: float


FULL = Scale(handler=40, kill_after=2, outage=35, inflight_ttl=30)
"""The default ``inflight_ttl``: the mark's life ends 30 s after its last renewal, inside the outage."""


@dataclass
class Call:
    """One handler call: which receiver, which id, when it started and ended (epoch seconds)."""

    receiver: str
    message_id: str
    start: float
    end: float | None = None


class Calls:
    """Every handler call of the test's receivers, recorded in the test process."""

    def __init__(self, slow_id: str, seconds: float) -> None:
        self.slow_id = slow_id
        self.seconds = seconds
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.cut = threading.Event()

    def handler(self, name: str) -> Callable[[ReceivedMessage], None]:
        def handle(message: ReceivedMessage) -> None:
            call = Call(name, message.message_id or "", time.time())
            with self.lock:
                self.calls.append(call)
            if call.message_id == self.slow_id:
                self.cut.wait(self.seconds)  # cut short only when the test ends early
            call.end = time.time()

        return handle

    def of(self, message_id: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.message_id == message_id]

    def by(self, name: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.receiver == name]


def overlapping(calls: list[Call]) -> list[tuple[Call, Call]]:
    """Pairs of calls that ran at the same time (a call still running has no end yet)."""
    pairs = []
    for i, a in enumerate(calls):
        for b in calls[i + 1 :]:
            a_end = a.end if a.end is not None else float("inf")
            b_end = b.end if b.end is not None else float("inf")
            if a.start < b_end and b.start < a_end:
                pairs.append((a, b))
    return pairs


class Running:
    """A ``Receiver`` on a thread of the test process."""

    def __init__(self, entity: str, handler: Callable[[ReceivedMessage], None], config: Settings) -> None:
        self.receiver = Receiver(entity, handler, settings=config)
        self.thread = threading.Thread(target=self.receiver.run, name="test-receiver", daemon=True)
        self.thread.start()

    @property
    def owner(self) -> str:
        """The name its in-flight marks carry."""
        return self.receiver._engine.owner

    def stop(self) -> None:
        self.receiver.stop()
        self.thread.join(90)
        assert not self.thread.is_alive(), "the receiver did not stop"


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalNamespace]]:
    """Three local namespaces for the module (queues created on first use)."""
    base = tmp_path_factory.mktemp("rx-fencing")
    started: dict[str, LocalNamespace] = {}
    try:
        for name in ("primary", "secondary", "third"):
            started[name] = LocalNamespace(name, data_dir=base / name, auto_create=True).start()
        yield started
    finally:
        for ns in started.values():
            ns.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """This test's own redis-server (the test kills it)."""
    with RedisServer(data_dir=tmp_path / "redis") as started:
        yield started


class WatchLog(logging.Handler):
    """The lock watch's log records, with their times."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def times(self, owner: str, words: str) -> list[float]:
        return [r.created for r in self.records if owner in r.getMessage() and words in r.getMessage()]


@pytest.fixture
def watch_log() -> Iterator[WatchLog]:
    handler = WatchLog()
    logger = logging.getLogger("bridge.receiving.renewal")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def run_scenario(
    scale: Scale, namespaces: dict[str, LocalNamespace], server: RedisServer, watch_log: WatchLog
) -> None:
    queue = f"fence-{uuid.uuid4().hex[:8]}"
    slow = f"{queue}-slow"
    later = [f"{queue}-later-{i}" for i in range(5)]
    calls = Calls(slow, scale.handler)
    options = {"max_wait": 0.5, "inflight_ttl": scale.inflight_ttl}
    primary, secondary, third = namespaces["primary"], namespaces["secondary"], namespaces["third"]
    holder_config = settings(server.url, primary, third, receiver=options)
    other_config = settings(server.url, secondary, None, receiver=options)
    running: list[Running] = []
    try:
        # Given a receiver whose handler takes the primary's copy of `slow` for `scale.handler` seconds
        holder = Running(queue, calls.handler("holder"), holder_config)
        running.append(holder)
        send(primary, queue, [slow])
        wait_until(lambda: calls.of(slow), 30, what="the slow handler call")
        started = calls.of(slow)[0].start
        # And another receiver that has the secondary's copy of the same MessageId
        other = Running(queue, calls.handler("other"), other_config)
        running.append(other)
        send(secondary, queue, [slow])
        # When Redis is killed while the handler runs, for longer than the mark has left to live
        time.sleep(max(0.0, started + scale.kill_after - time.time()))
        killed = time.time()
        server.kill()
        # (and work for the holder's other link arrives meanwhile)
        send(third, queue, later)
        time.sleep(max(0.0, killed + scale.outage - time.time()))
        # And Redis comes back on the same port with its AOF
        server.start()
        restarted = time.time()
        wait_until(lambda: all(c.end for c in calls.of(slow)), scale.handler + 30, what="the slow call's end")
        wait_until(lambda: count_in(secondary, queue) == 0, 30, what="the second copy settled")
        wait_until(lambda: count_in(primary, queue) == 0, 30, what="the first copy settled")
        wait_until(lambda: {c.message_id for c in calls.by("holder")} >= set(later), 30, what="later work")
    finally:
        calls.cut.set()
        for receiver in running:
            receiver.stop()
    # Then the handler never ran twice at once for the id, and was handed it once
    assert not overlapping(calls.of(slow)), f"concurrent calls: {overlapping(calls.of(slow))}"
    assert [c.receiver for c in calls.of(slow)] == ["holder"]
    # And the second copy was completed as a duplicate (its handled event written once)
    got = counts(server.url, queue)
    assert (got.duplicates_suppressed, got.handled, got.inflight_marks_lost) == (1, 1 + len(later), 0)
    # And the holder took no new work while it could not renew the mark, and took it again after
    paused = watch_log.times(holder.owner, "no new work")
    resumed = watch_log.times(holder.owner, "new work again")
    assert paused and resumed, [r.getMessage() for r in watch_log.records]
    assert killed <= paused[0] <= killed + 2, (killed, paused)
    assert restarted <= resumed[0] <= restarted + 5, (restarted, resumed)
    during = [c for c in calls.by("holder") if paused[0] <= c.start <= resumed[0]]
    assert not during, f"handed while the mark could not be renewed: {during}"
    assert all(c.start >= resumed[0] for c in calls.by("holder") if c.message_id in later)
    # And the other receiver, which held no mark, never paused
    assert not watch_log.times(other.owner, "no new work")


@pytest.mark.timeout(240)
def test_a_40s_handler_through_a_35s_redis_outage_never_runs_twice_at_once(
    namespaces: dict[str, LocalNamespace], server: RedisServer, watch_log: WatchLog
) -> None:
    run_scenario(FULL, namespaces, server, watch_log)


# ---- the window and the lock watch alone ------------------------------------------------------------------


def window(client: redis.Redis, owner: str, inflight_ttl: float) -> DedupWindow:
    return DedupWindow(
        client, ReceiverKeys("orders"), owner=owner, window=600, max_remembered=100, inflight_ttl=inflight_ttl
    )


@pytest.fixture
def renewer() -> Iterator[LockRenewer]:
    """The SDK's lock renewer (nothing registered with it here)."""
    made = LockRenewer(60)
    try:
        yield made
    finally:
        made.close()


def deadline_of(client: redis.Redis, message_id: str) -> int:
    """The deadline (attended milliseconds) in ``message_id``'s in-flight mark."""
    value = client.get(ReceiverKeys("orders").inflight(message_id))
    assert value is not None
    return int(value.rsplit(b"@", 1)[1])


def test_a_redis_outage_longer_than_a_mark_does_not_let_another_receiver_claim_its_id(
    server: RedisServer,
) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    holder, other = window(client, "holder", 2), window(client, "other", 2)
    try:
        assert holder.claim(["m"]) == [Claim.HANDLE]
        # Given Redis killed for longer than the mark's life, and started again with its AOF
        server.kill()
        time.sleep(3)
        server.start()
        # Then the mark is still live: the other receiver finds the id busy, and the holder renews it
        assert other.claim(["m"]) == [Claim.BUSY]
        assert holder.renew(["m"]) == [Renewal.RENEWED]
        # And unrenewed, it ends after its life as usual while receivers reach Redis
        started = time.monotonic()
        wait_until(lambda: other.claim(["m"]) == [Claim.HANDLE], 10, interval=0.1, what="the mark's end")
        assert 1.5 <= time.monotonic() - started <= 4
    finally:
        client.close()


def test_the_watch_pauses_the_intake_while_it_cannot_renew_and_retries_every_tick(
    server: RedisServer, renewer: LockRenewer, watch_log: WatchLog
) -> None:
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    holder = window(client, "holder", 30)
    watch = LockWatch(renewer, holder, 30)
    try:
        assert holder.claim(["m"]) == [Claim.HANDLE]
        watch.handling(["m"])
        watch.tick()
        assert not watch.paused
        before = deadline_of(client, "m")
        # Given Redis killed while the handler runs
        server.kill()
        watch.tick()
        # Then the receiver takes no new work, and each tick tries again
        assert watch.paused
        watch.tick()
        assert watch.paused
        # When Redis is back, the next tick renews the mark at once (not a third of the TTL later)
        server.start()
        watch.tick()
        assert not watch.paused
        assert deadline_of(client, "m") > before
        assert len(watch_log.times("holder", "no new work")) == 1
        assert len(watch_log.times("holder", "new work again")) == 1
        assert "after 2 failed tries" in watch_log.records[-1].getMessage()
        # And a failing heartbeat while no mark is held pauses nothing: there is nothing to protect
        watch.handled(["m"])
        server.kill()
        watch.tick()
        assert not watch.paused
    finally:
        client.close()


def test_a_mark_lost_while_its_handler_runs_is_logged_at_error_and_counted_once(
    redis_client: redis.Redis, renewer: LockRenewer, caplog: pytest.LogCaptureFixture
) -> None:
    holder, other = window(redis_client, "holder", 0.3), window(redis_client, "other", 30)
    counters = ReceiverCounterStore(redis_client, ReceiverKeys("orders"))
    watch = LockWatch(renewer, holder, 0.3, counters=counters)
    assert holder.claim(["m"]) == [Claim.HANDLE]
    watch.handling(["m"])
    # Given the holder's mark ran out (its process frozen, say) and another receiver claimed the id
    time.sleep(0.5)
    assert other.claim(["m"]) == [Claim.HANDLE]
    # When the holder's watch renews it
    with caplog.at_level(logging.ERROR, "bridge.receiving.renewal"):
        watch.tick()
        watch.tick()
    # Then the loss is logged at ERROR with the MessageId, once, and counted (the receiver counters, which
    # the metrics endpoints serve as bridge_receiver_messages_total{counter="inflight_marks_lost"})
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "of m while its handler runs" in errors[0].getMessage(), errors
    assert counters.read().inflight_marks_lost == 1
    # And the other receiver's mark is left alone
    assert other.mark_owner("m") == "other"
    # And the holder's done mark, when its handler returns, reports it again: it is not counted twice
    watch.finishing(["m"])
    remembered = holder.done(["m"])
    assert remembered.taken == ["m"]
    watch.lost(remembered.taken, Renewal.TAKEN)
    assert counters.read().inflight_marks_lost == 1
