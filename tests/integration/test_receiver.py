"""The receiving end (``docs/receiving.md``): each MessageId handed once, from both namespaces, across
processes, crashes and restarts; failures abandoned, then dead-lettered with the handler's error; the
window's expiry.

Real parts throughout: two local namespaces (each its own process, shared by this module's tests with
entity names of their own), a private redis-server, ``bridge receive`` processes with the handlers of
``tests.integration.receiver_handlers`` (which record every call in Redis), the unmodified SDK for sends.
Faults are real: ``kill -9`` of a receiver, the namespace's fault control.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from azure.servicebus import ServiceBusClient, ServiceBusSubQueue

from bridge.core.received import ReceivedMessage
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import BridgeProcess, wait_until
from bridge.receiving import AsyncReceiver, Receiver
from bridge.receiving.keys import ReceiverKeys
from bridge.receiving.window import DedupWindow
from bridge.servicebus.admin import NamespaceAdmin
from tests.integration.receiver_support import (
    counts,
    environment,
    log_of,
    namespace,
    namespace_pair,
    per_id,
    recorded,
    send,
    settings,
    start_receiver,
)
from tests.integration.worker_support import count_in

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalNamespace, LocalNamespace]]:
    """A primary and a secondary namespace for the whole module (queues created on first use)."""
    yield from namespace_pair(tmp_path_factory.mktemp("receiver-ns"))


def test_active_replication_of_1000_messages_hands_each_exactly_once(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    # Given 1,000 messages on both namespaces with the same MessageIds (what active replication does)
    ids = [f"act-{i}" for i in range(1000)]
    send(primary, "active", ids)
    send(secondary, "active", ids)
    # When one receiver process reads both
    proc = start_receiver(tmp_path, environment(redis_url, primary, secondary), "active")
    try:
        wait_until(
            lambda: counts(redis_url, "active").duplicates_suppressed >= 1000,
            90,
            what=f"every copy settled: {log_of(proc)}",
        )
        time.sleep(1)  # a late extra call would show now
    finally:
        proc.stop()
    # Then the handler was called exactly 1,000 times, once per MessageId, and every copy was settled
    calls = per_id(recorded(redis_url, "active"))
    assert sum(calls.values()) == 1000 and set(calls) == set(ids)
    assert max(calls.values()) == 1
    got = counts(redis_url, "active")
    assert (got.received_primary, got.received_secondary) == (1000, 1000)
    assert (got.handled, got.duplicates_suppressed, got.handler_errors) == (1000, 1000, 0)
    assert count_in(primary, "active") == 0 and count_in(secondary, "active") == 0


def test_two_receiver_processes_share_the_window_and_never_hand_one_id_twice(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    env = environment(redis_url, primary, secondary, BRIDGE_RECEIVER__BATCH_SIZE="20")
    # Given two receiver processes of the same entity, both reading both namespaces
    procs = [start_receiver(tmp_path, env, "shared", name=f"receive-{n}") for n in (1, 2)]
    try:
        time.sleep(2)  # both connected before the messages arrive, so both get some
        ids = [f"sh-{i}" for i in range(300)]
        send(primary, "shared", ids)
        send(secondary, "shared", ids)
        wait_until(
            lambda: counts(redis_url, "shared").duplicates_suppressed >= 300,
            90,
            what=f"every copy settled: {log_of(procs[0])} {log_of(procs[1])}",
        )
        time.sleep(1)
    finally:
        for proc in procs:
            proc.stop()
    # Then each id was handed once in total, and both processes did part of the work
    entries = recorded(redis_url, "shared")
    calls = per_id(entries)
    assert set(calls) == set(ids) and max(calls.values()) == 1
    assert {entry["pid"] for entry in entries} == {proc.proc.pid for proc in procs}
    got = counts(redis_url, "shared")
    assert (got.handled, got.duplicates_suppressed) == (300, 300)


def test_a_receiver_killed_after_the_done_mark_and_before_the_completion_does_not_hand_the_copy_again(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    with NamespaceAdmin(namespace(primary)) as admin:
        admin.create_queue("crash", lock_duration=timedelta(seconds=3))
    env = environment(
        redis_url,
        primary,
        secondary,
        RX_TEST_TRIGGER="crash-1",
        RX_TEST_CONTROL=primary.endpoints.control_url,
    )  # type: ignore[union-attr]
    window = DedupWindow(
        redis.Redis.from_url(redis_url),
        ReceiverKeys("crash"),
        owner="test",
        window=600,
        max_remembered=10,
        inflight_ttl=30,
    )
    # Given a handler that succeeds but switches on an outage of the primary on its way out, so the done
    # mark is written and the completion that follows cannot reach Service Bus
    proc = start_receiver(tmp_path, env, "crash", "outage_after")
    try:
        send(primary, "crash", ["crash-1"])
        wait_until(lambda: window.is_done("crash-1"), 30, what=f"the done mark: {log_of(proc)}")
        # When the receiver is killed (-9) in that state
        proc.kill()
    finally:
        proc.stop()
        primary.control.restore()
    assert count_in(primary, "crash") == 1, "the copy must still be there (never completed)"
    # Then after a restart the redelivered copy is recognised and completed without a second call
    again = start_receiver(tmp_path, env, "crash", name="receive-crash-again")
    try:
        wait_until(
            lambda: counts(redis_url, "crash").duplicates_suppressed >= 1,
            40,
            what=f"the redelivered copy recognised: {log_of(again)}",
        )
        wait_until(lambda: count_in(primary, "crash") == 0, 10, what="the copy completed")
    finally:
        again.stop()
    assert per_id(recorded(redis_url, "crash")) == {"crash-1": 1}
    assert counts(redis_url, "crash").handled == 1


def test_a_receiver_killed_inside_its_handler_leaves_a_mark_that_expires_and_the_copy_is_handed_again(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    with NamespaceAdmin(namespace(primary)) as admin:
        admin.create_queue("inside", lock_duration=timedelta(seconds=3))
    # In-flight marks that live 2 s unrenewed (the default 30 s would only make the test wait longer)
    short_marks = {"BRIDGE_RECEIVER__INFLIGHT_TTL": "2"}
    window = DedupWindow(
        redis.Redis.from_url(redis_url),
        ReceiverKeys("inside"),
        owner="test",
        window=600,
        max_remembered=10,
        inflight_ttl=30,
    )
    # Given a handler that runs for a minute
    proc = start_receiver(
        tmp_path,
        environment(redis_url, primary, secondary, RX_TEST_SLEEP="60", **short_marks),
        "inside",
        "slow",
    )
    try:
        send(primary, "inside", ["inside-1"])
        wait_until(lambda: recorded(redis_url, "inside"), 30, what=f"the handler started: {log_of(proc)}")
        assert window.in_flight("inside-1") and not window.is_done("inside-1")
        # When the receiver is killed (-9) inside the handler
        proc.kill()
    finally:
        proc.stop()
    assert count_in(primary, "inside") == 1, "the copy must still be there (never completed)"
    # Then its mark expires once another receiver reaches Redis, and that receiver hands the copy again
    again = start_receiver(
        tmp_path,
        environment(redis_url, primary, secondary, **short_marks),
        "inside",
        name="receive-inside-again",
    )
    try:
        wait_until(
            lambda: count_in(primary, "inside") == 0, 60, what=f"the copy handed again: {log_of(again)}"
        )
    finally:
        again.stop()
    calls = recorded(redis_url, "inside")
    assert [c["phase"] for c in calls] == ["start", "call"], calls
    assert per_id(calls) == {"inside-1": 2} and calls[0]["pid"] != calls[1]["pid"]
    assert window.is_done("inside-1")
    assert counts(redis_url, "inside").handled == 1


def test_a_failing_handler_is_retried_then_dead_lettered_with_its_error_as_the_reason(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    with NamespaceAdmin(namespace(primary)) as admin:
        admin.create_queue("poison", max_delivery_count=3, lock_duration=timedelta(seconds=5))
    # Given a handler that always raises, on an entity whose MaxDeliveryCount is 3
    proc = start_receiver(tmp_path, environment(redis_url, primary, secondary), "poison", "fail")
    try:
        send(primary, "poison", ["bad-1"])
        wait_until(
            lambda: counts(redis_url, "poison").dead_lettered >= 1,
            40,
            what=f"the dead-letter: {log_of(proc)}",
        )
    finally:
        proc.stop()
    # Then it was abandoned and redelivered twice, then dead-lettered on the third delivery with the error
    entries = recorded(redis_url, "poison")
    assert [e["delivery_count"] for e in entries] == [0, 1, 2]
    got = counts(redis_url, "poison")
    assert (got.handler_errors, got.dead_lettered, got.handled) == (3, 1, 0)
    client = ServiceBusClient.from_connection_string(primary.connection_string)
    with client, client.get_queue_receiver("poison", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
        (dead,) = receiver.receive_messages(max_message_count=5, max_wait_time=5)
        assert dead.message_id == "bad-1"
        assert dead.dead_letter_reason == "ValueError"
        assert dead.dead_letter_error_description == "cannot handle bad-1"
        receiver.complete_message(dead)
    # And the failed id is not remembered as done: a copy arriving later would be handed again
    window = DedupWindow(
        redis.Redis.from_url(redis_url),
        ReceiverKeys("poison"),
        owner="test",
        window=600,
        max_remembered=10,
        inflight_ttl=30,
    )
    assert not window.is_done("bad-1") and not window.in_flight("bad-1")


def test_sigterm_lets_the_handler_in_flight_finish_and_settles_its_copy(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    proc = start_receiver(
        tmp_path, environment(redis_url, primary, secondary, RX_TEST_SLEEP="1.5"), "drain", "slow"
    )
    try:
        send(primary, "drain", ["slow-1"])
        wait_until(lambda: recorded(redis_url, "drain"), 30, what=f"the handler started: {log_of(proc)}")
        # When SIGTERM arrives while the handler runs
        os.kill(proc.proc.pid, signal.SIGTERM)
        code = proc.proc.wait(20)
    finally:
        proc.stop()
    # Then the process waited for the handler, settled the copy and exited cleanly
    assert code == 0, log_of(proc)
    assert [e["phase"] for e in recorded(redis_url, "drain")] == ["start", "end"]
    assert count_in(primary, "drain") == 0
    assert counts(redis_url, "drain").handled == 1


def test_the_window_forgets_an_id_after_its_duration(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str
) -> None:
    primary, _ = pair
    handled: list[str] = []
    config = settings(redis_url, primary, None, receiver={"window": 2.0, "max_wait": 0.5})
    receiver = Receiver("expiry", lambda m: handled.append(m.message_id or ""), settings=config)
    thread = threading.Thread(target=receiver.run)
    thread.start()
    try:
        # Given an id handled once
        send(primary, "expiry", ["again"])
        wait_until(lambda: len(handled) == 1, 20, what="first call")
        first_done = time.monotonic()
        # When a copy arrives within the window, it is completed unhandled
        send(primary, "expiry", ["again"])
        wait_until(lambda: receiver.counts().duplicates_suppressed == 1, 20, what="duplicate suppressed")
        assert len(handled) == 1
        # When a copy arrives after the window (2 s) passed, it is handed again: the window is all we promise
        time.sleep(max(0.0, first_done + 2.5 - time.monotonic()))
        send(primary, "expiry", ["again"])
        wait_until(lambda: len(handled) == 2, 20, what="second call after the window")
    finally:
        receiver.stop()
        thread.join(20)
    assert receiver.counts().handled == 2 and not thread.is_alive()


def test_a_full_window_stops_receiving_until_ids_expire_and_loses_nothing(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str
) -> None:
    primary, _ = pair
    handled: list[tuple[str, float]] = []
    # Given a window bounded to 5 ids that are remembered for 2 s, and 12 messages
    config = settings(
        redis_url,
        primary,
        None,
        receiver={"window": 2.0, "max_remembered": 5, "max_wait": 0.5, "batch_size": 5},
    )
    receiver = Receiver("bounded", lambda m: handled.append((m.message_id or "", time.monotonic())),
                        settings=config)  # fmt: skip
    send(primary, "bounded", [f"b-{i}" for i in range(12)])
    thread = threading.Thread(target=receiver.run)
    thread.start()
    try:
        wait_until(lambda: len(handled) >= 12, 40, what="all handled")
    finally:
        receiver.stop()
        thread.join(20)
    # Then the receiver waited for room (back-pressure) instead of forgetting ids, and handed each id once
    assert sorted(m for m, _ in handled) == sorted(f"b-{i}" for i in range(12))
    assert receiver.counts().backpressure_waits >= 1
    times = sorted(t for _, t in handled)
    assert times[5] - times[0] >= 1.5, "the sixth id waited for the first ones to leave the window"
    assert count_in(primary, "bounded") == 0


def test_the_asyncio_receiver_runs_async_handlers_on_the_callers_loop_once_per_id(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str
) -> None:
    primary, secondary = pair
    ids = [f"as-{i}" for i in range(100)]
    send(primary, "async", ids)
    send(secondary, "async", ids)
    config = settings(redis_url, primary, secondary, receiver={"max_wait": 0.5})

    async def main() -> tuple[list[str], object]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []

        async def handler(message: ReceivedMessage) -> None:
            assert asyncio.get_running_loop() is loop
            await asyncio.sleep(0)
            seen.append(message.message_id or "")

        receiver = AsyncReceiver("async", handler, settings=config)
        task = asyncio.create_task(receiver.run())
        # 120 s: a loaded fresh-clone run once saw nothing handled within 60 s; the counts say how far it got
        deadline = loop.time() + 120
        counts = await receiver.counts()
        while counts.duplicates_suppressed < 100 and loop.time() < deadline and not task.done():
            await asyncio.sleep(0.05)
            counts = await receiver.counts()
        task.cancel()  # cancelling stops the receiver after the work in hand
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen, counts

    seen, counts = asyncio.run(main())
    assert sorted(seen) == sorted(ids), counts
    assert count_in(primary, "async") == 0 and count_in(secondary, "async") == 0


def test_celery_task_mode_queues_one_task_per_message_with_the_message_as_json(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str, tmp_path: Path
) -> None:
    primary, secondary = pair
    send(primary, "celery", ["cel-1", "cel-2"])
    send(secondary, "celery", ["cel-1", "cel-2"])
    # When the receiver hands messages to a Celery task (the broker is the bridge's Redis)
    args = ["receive", "celery", "--celery-task", "app.on_message", "--celery-queue", "rx-tasks"]
    proc = BridgeProcess("receive-celery", args, environment(redis_url, primary, secondary),
                         tmp_path / "receive-celery.log")  # fmt: skip
    try:
        wait_until(
            lambda: counts(redis_url, "celery").duplicates_suppressed >= 2,
            30,
            what=f"both copies settled: {log_of(proc)}",
        )
    finally:
        proc.stop()
    # Then the queue holds one task per message, whose argument is the message as JSON
    client = redis.Redis.from_url(redis_url)
    raw = [json.loads(item) for item in client.lrange("rx-tasks", 0, -1)]
    client.close()
    assert [item["headers"]["task"] for item in raw] == ["app.on_message"] * 2
    bodies = [json.loads(base64.b64decode(item["body"]))[0][0] for item in raw]
    assert sorted(b["message_id"] for b in bodies) == ["cel-1", "cel-2"]
    assert {base64.b64decode(b["body_base64"]) for b in bodies} == {b"cel-1", b"cel-2"}


def test_a_handler_slower_than_the_lock_keeps_its_lock_and_its_in_flight_mark(
    pair: tuple[LocalNamespace, LocalNamespace], redis_url: str
) -> None:
    primary, _ = pair
    with NamespaceAdmin(namespace(primary)) as admin:
        admin.create_queue("slow", lock_duration=timedelta(seconds=6))
    window = DedupWindow(redis.Redis.from_url(redis_url), ReceiverKeys("slow"), owner="test", window=600,
                         max_remembered=10, inflight_ttl=30)  # fmt: skip
    marks: list[bool] = []

    def handler(message: ReceivedMessage) -> None:
        # Given a handler that takes 7.5 s, longer than the 6 s lock and the 2.5 s in-flight mark (a lock of
        # 3 s left a loaded 2-core machine too little time to renew it: a second delivery, suppressed)
        for _ in range(3):
            time.sleep(2.5)
            marks.append(window.in_flight(message.message_id or ""))

    config = settings(redis_url, primary, None, receiver={"inflight_ttl": 2.5, "max_wait": 0.5})
    receiver = Receiver("slow", handler, settings=config)
    thread = threading.Thread(target=receiver.run)
    thread.start()
    try:
        send(primary, "slow", ["slow-1"])
        wait_until(lambda: receiver.counts().handled == 1, 30, what="the slow call")
        wait_until(lambda: count_in(primary, "slow") == 0, 10, what="the copy completed")
    finally:
        receiver.stop()
        thread.join(20)
    # Then the lock was renewed (no second delivery while the handler ran) and so was the in-flight mark
    got = receiver.counts()
    assert (got.received_primary, got.handled, got.duplicates_suppressed) == (1, 1, 0)
    assert marks == [True, True, True]
