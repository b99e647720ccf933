"""Paired-namespace mode, the send side: FailoverInterval, aliased sends to backlog queues, rotation.

Real processes throughout; the syphon and the ping are tested in their own modules.
"""

from __future__ import annotations

import datetime as dt
import time
from contextlib import ExitStack
from typing import Any

import redis
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.core.paired import backlog_queue_path, rendezvous_backlog
from bridge.embedded.stack import LocalStack, wait_until
from bridge.settings import NamespaceSettings
from bridge.state import keys
from tests.integration.paired_support import paired_state
from tests.integration.worker_support import (
    count_in,
    entity_status,
    make_stack,
    outbox_depth,
    producer,
    receive_all,
    status_json,
)

__all__ = ["make_stack"]

BACKLOGS = 3
INTERVAL = 6.0  # the FailoverInterval under test: long enough to look inside it on a loaded machine


def _paired_stack(make_stack: Any, interval: float, **settings: str) -> LocalStack:
    stack = make_stack(
        {"orders": {"replication": "paired"}},
        settings={
            "BRIDGE_PAIRED__FAILOVER_INTERVAL": str(interval),
            "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": str(BACKLOGS),
            "BRIDGE_PAIRED__ENABLE_SYPHON": "false",
            "BRIDGE_PAIRED__PING_PRIMARY_INTERVAL": "3600",
            **settings,
        },
    )
    for index in range(BACKLOGS):
        _create_queue(stack.secondary, backlog_queue_path(_primary_name(stack), index))
    return stack


def _primary_name(stack: LocalStack) -> str:
    return NamespaceSettings(connection_string=stack.primary.connection_string).namespace_name


def _create_queue(ns: Any, name: str) -> None:
    with ServiceBusAdministrationClient.from_connection_string(
        ns.connection_string, connection_verify=ns.certificate
    ) as admin:
        admin.create_queue(name, lock_duration=dt.timedelta(minutes=1))


def _backlog_messages(
    stack: LocalStack, expected: int, timeout: float = 30.0, skip: tuple[int, ...] = ()
) -> list[Any]:
    """Receive-and-delete from the backlog queues until ``expected`` arrived (or the timeout), then one more
    short round that would catch extra copies.

    One receiver per queue stays open for the whole wait: a receive-and-delete receiver closed between
    polls drops what the namespace delivered to it after its last receive call returned (the link's credit
    outlives the call), and those messages are gone from the queue too.
    """
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    paths = [backlog_queue_path(_primary_name(stack), i) for i in range(BACKLOGS) if i not in skip]
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with (
        ServiceBusClient.from_connection_string(stack.secondary.connection_string, retry_total=3) as client,
        ExitStack() as opened,
    ):
        # Entered, so each link opens without a deadline: a first receive call would give the open only its
        # 0.5 s wait (it timed out on a loaded machine).
        receivers = [opened.enter_context(client.get_queue_receiver(p, receive_mode=mode)) for p in paths]
        while len(got) < expected and time.monotonic() < deadline:
            for receiver in receivers:
                got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=0.5))
        for receiver in receivers:
            got.extend(receiver.receive_messages(max_message_count=100, max_wait_time=0.5))
    return got


def test_failover_waits_one_interval_then_sends_aliased_messages_to_backlog_queues(make_stack: Any) -> None:
    stack = _paired_stack(make_stack, interval=INTERVAL)
    stack.start_worker()
    stack.start_beat()
    # Given a healthy primary
    with producer(stack) as p:
        p.send("orders", b"warm")
        assert len(receive_all(stack.primary, "orders", 1)) == 1
        # When the primary goes down and messages keep coming
        stack.primary.control.outage()
        down_at = time.monotonic()
        due = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        ids = [
            p.send(
                "orders",
                f"m{i}".encode(),
                session_id=f"s{i % 2}",
                time_to_live=600,
                scheduled_enqueue_time_utc=due,
                application_properties={"n": i},
            )
            for i in range(10)
        ]
        # Then during the FailoverInterval nothing reaches a backlog queue: it waits in the outbox
        time.sleep(0.8)
        assert (
            sum(
                count_in(stack.secondary, backlog_queue_path(_primary_name(stack), i))
                for i in range(BACKLOGS)
            )
            == 0
        )
        assert outbox_depth(stack, "orders") == 10
        assert time.monotonic() - down_at < INTERVAL, "the check itself took too long to prove anything"
        # And after it, every message is in a backlog queue, aliased, with nothing left on the broker message
        got = _backlog_messages(stack, 10)
        engaged_after = time.monotonic() - down_at
    assert sorted(m.message_id for m in got) == sorted(ids)
    assert engaged_after >= INTERVAL
    for message in got:
        props = {
            k.decode() if isinstance(k, bytes) else k: v for k, v in message.application_properties.items()
        }
        assert props["x-ms-path"] in (b"orders", "orders")
        assert props["x-ms-sessionid"] in (b"s0", b"s1", "s0", "s1")
        assert "x-ms-timetolive" in props and "x-ms-scheduledenqueuetimeutc" in props
        assert message.session_id is None
        assert message.scheduled_enqueue_time_utc is None
        assert message.time_to_live is None or message.time_to_live > dt.timedelta(days=365)
    status = entity_status(stack, "orders")
    assert status["outbox_depth"] == 0
    assert status["paired"]["failed_over"] is True
    stack.primary.control.restore()
    assert count_in(stack.primary, "orders") == 0  # failed over: no syphon here, no ping yet


def test_a_failing_backlog_queue_leaves_the_rotation_for_every_worker(make_stack: Any) -> None:
    # Every queue is broken at first, so each one certainly fails and leaves the rotation; no readmission
    # by time within the test: queues come back only when the test readmits them (as an operator would).
    stack = _paired_stack(
        make_stack, interval=0.0, BRIDGE_PAIRED__BACKLOG_READMIT_AFTER="3600", BRIDGE_WORKERS__LEASE_TTL="3"
    )
    queues = [backlog_queue_path(_primary_name(stack), i) for i in range(BACKLOGS)]
    for queue in queues:
        stack.secondary.control.outage(entity=queue)
    stack.primary.control.outage()
    first_worker = stack.start_worker("worker-a")
    stack.start_beat()
    with producer(stack) as p:
        ids = [p.send("orders", f"m{i}".encode()) for i in range(20)]
    # Then every queue leaves the shared rotation and the messages wait in the outbox, none lost
    wait_until(
        lambda: len(status_json(stack)["backlog"]["removed"]) == BACKLOGS,
        30,
        what="every backlog queue out of the rotation",
    )
    assert outbox_depth(stack, "orders") == 20
    # When two queues are repaired (not readmitted yet) and another worker process takes over
    for queue in queues[1:]:
        stack.secondary.control.restore(entity=queue)
    first_worker.kill()
    started = time.time()
    stack.start_worker("worker-b")
    # Then the new worker follows the rotation worker-a left: it sends nowhere, even to the repaired
    # queues, and records that every queue is out of the rotation
    wait_until(
        lambda: (
            (paired_state(stack, "orders").last_error_at or 0) > started
            and "out of rotation" in (paired_state(stack, "orders").last_error or "")
        ),
        60,
        what="worker-b finding every backlog queue out of the rotation",
    )
    assert outbox_depth(stack, "orders") == 20
    assert sum(count_in(stack.secondary, queue) for queue in queues[1:]) == 0  # queue 0 is still broken
    # When the repaired queues are readmitted (their removal records deleted), the messages land in them
    # and never in the broken one, which stays out
    client = redis.Redis.from_url(stack.redis.url)
    try:
        client.hdel(keys.rotation(_primary_name(stack)), "1", "2")
    finally:
        client.close()
    got = _backlog_messages(stack, 20, timeout=120, skip=(0,))
    assert sorted(m.message_id for m in got) == sorted(ids)
    backlog = status_json(stack)["backlog"]
    assert list(backlog["removed"]) == ["0"] and "outage" in (backlog["removed"]["0"]["error"] or "").lower()
    assert outbox_depth(stack, "orders") == 0


def test_a_batch_goes_to_its_backlog_queues_at_once_so_one_stalled_queue_holds_back_no_other(
    make_stack: Any,
) -> None:
    # Sends to backlog queue 0 are never settled; the SDK's own timeout (half the attempt deadline, 30 s)
    # is far longer than the test waits for the other queues.
    stack = _paired_stack(make_stack, interval=0.0, BRIDGE_RETRY__ATTEMPT_DEADLINE="60")
    queues = [backlog_queue_path(_primary_name(stack), i) for i in range(BACKLOGS)]
    stack.secondary.control.stall(None, entity=queues[0])
    stack.primary.control.outage()
    # Given one batch whose keys stick to every backlog queue, queue 0 among them (the queue a key sticks
    # to is the core's rendezvous choice; the plan lists the queues in index order, queue 0 first)
    sessions = [f"s{i}" for i in range(12)]
    queue_of = {s: rendezvous_backlog(s, list(range(BACKLOGS))) for s in sessions}
    assert set(queue_of.values()) == set(range(BACKLOGS)), "the batch must need every queue"
    with producer(stack) as p:
        ids = p.send_batch("orders", [{"body": f"m-{s}".encode(), "session_id": s} for s in sessions])
    id_of = dict(zip(sessions, ids, strict=True))
    elsewhere = sorted(id_of[s] for s in sessions if queue_of[s] != 0)
    # When a worker drains it while the primary is down (failover at once)
    stack.start_worker()
    stack.start_beat()
    # Then the messages for queues 1 and 2 land while the send to queue 0 still hangs: the batch's backlog
    # sends go at once, not one queue after the other
    got = _backlog_messages(stack, len(elsewhere), timeout=20, skip=(0,))
    assert sorted(m.message_id for m in got) == elsewhere
    # And the batch is still unsettled: queue 0's send had not returned when the others landed
    assert outbox_depth(stack, "orders") == len(sessions)


def test_queues_that_left_because_the_secondary_refused_connections_are_back_once_it_accepts(
    make_stack: Any,
) -> None:
    # No readmission by time within the test: only the secondary's return can bring the queues back.
    stack = _paired_stack(make_stack, interval=0.0, BRIDGE_PAIRED__BACKLOG_READMIT_AFTER="3600")
    queues = [backlog_queue_path(_primary_name(stack), i) for i in range(BACKLOGS)]
    # Given failover engaged while the primary is down, the secondary taking the backlog
    stack.primary.control.outage()
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        first = p.send("orders", b"first", session_id="s-first")
        assert [m.message_id for m in _backlog_messages(stack, 1)] == [first]
        # When the whole secondary goes down too (its address refuses connections) while messages come
        stack.secondary.control.outage()
        ids = [p.send("orders", f"m{i}".encode(), session_id=f"s{i}") for i in range(12)]
    # Then every queue leaves the rotation because the address refused, and the messages wait
    wait_until(
        lambda: len(status_json(stack)["backlog"]["removed"]) == BACKLOGS,
        60,
        what="every backlog queue out of the rotation",
    )
    errors = status_json(stack)["backlog"]["removed"]
    assert all("refused" in (errors[str(i)]["error"] or "") for i in range(BACKLOGS)), errors
    assert outbox_depth(stack, "orders") == 12
    # When the secondary comes back (the primary stays down)
    stack.secondary.control.restore()
    # Then the messages land in the backlog queues at once, not an hour later
    got = _backlog_messages(stack, 12, timeout=45)
    assert sorted(m.message_id for m in got) == sorted(ids)
    assert sum(count_in(stack.secondary, queue) for queue in queues) == 0  # received and deleted, no extra
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 30, what="the outbox acknowledged")
