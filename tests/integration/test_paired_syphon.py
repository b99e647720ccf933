"""The syphon (paired mode, ``docs/paired.md``): backlog queues back to the primary.

Real processes throughout: redis-server, two local namespaces, ``bridge worker`` and ``bridge beat``. The
backlog is filled the way a failed-over worker fills it (``to_backlog_message`` into
``<primary>/x-servicebus-transfer/<i>`` of the secondary); the syphon beat task does the rest.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.core.paired import PING_CONTENT_TYPE, rendezvous_backlog
from bridge.embedded.stack import wait_until
from tests.integration.paired_support import (
    PAIRED_SETTINGS,
    body,
    cost,
    create_backlog_queues,
    create_entities,
    envelope,
    fill_backlog,
    mark_failed_over,
    receive,
    redis_client,
    stack_pool,
    text,
)
from tests.integration.worker_support import count_in, make_stack

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(180)

PROPERTIES: dict[str, Any] = {
    "text": "plain",
    "raw": b"\x00\xff",
    "count": 7,
    "big": 2**40,
    "ratio": 0.25,
    "flag": True,
    "when": datetime(2024, 5, 6, 7, 8, 9, 250000, tzinfo=UTC),
    "id": uuid.UUID(int=5),
}


def backlog_empty(stack: Any, paths: tuple[str, ...]) -> bool:
    """Every backlog queue holds nothing (peeked)."""
    return all(count_in(stack.secondary, path) == 0 for path in paths)


def test_syphon_restores_every_field_reaches_every_subscription_and_empties_the_backlog(
    make_stack: Any,
) -> None:
    entities = {"orders": {"replication": "paired"}, "events": {"replication": "paired"}}
    stack = make_stack(entities, settings=PAIRED_SETTINGS)
    create_entities(stack.primary, queues=["orders"], topics={"events": ["audit", "billing"]})
    paths = create_backlog_queues(stack)
    scheduled = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
    # Given messages in both backlog queues, aliased as a failed-over worker sends them
    with stack_pool(stack) as pool:
        full = envelope(
            "orders",
            0,
            partition_key="pk-1",
            time_to_live=600.0,
            content_type="application/json",
            correlation_id="c-1",
            subject="subj",
            reply_to="r",
            to="t",
            application_properties=dict(PROPERTIES),
        )
        later = envelope("orders", 1, scheduled_enqueue_time_utc=scheduled, time_to_live=600.0)
        event = envelope("events", 0, application_properties={"kind": "created"})
        filled_at = time.monotonic()
        fill_backlog(pool, paths[0], [full, event])
        fill_backlog(pool, paths[1], [later])
    time.sleep(1.5)  # time passes in the backlog: the restored TTL must be what is left of it
    # When a worker and a beat run with the primary healthy
    stack.start_worker()
    stack.start_beat()
    got = {text(m.message_id): m for m in receive(stack.primary, "orders", 2, timeout=40)}
    in_backlog = time.monotonic() - filled_at  # at most: a loaded machine makes it longer than the sleep
    # Then every field comes back as sent, with the remaining TTL
    assert set(got) == {full.message_id, later.message_id}
    first = got[full.message_id]
    assert body(first) == full.body
    assert text(first.partition_key) == "pk-1"
    assert text(first.content_type) == "application/json" and text(first.correlation_id) == "c-1"
    assert text(first.subject) == "subj" and text(first.reply_to) == "r" and text(first.to) == "t"
    assert first.time_to_live is not None and 600 - in_backlog - 1 < first.time_to_live.total_seconds() < 599
    props = {text(k): v for k, v in (first.application_properties or {}).items()}
    assert not any(name and name.startswith("x-ms-") for name in props)
    assert props["count"] == 7 and props["big"] == 2**40 and props["raw"] == b"\x00\xff"
    assert props["text"] == b"plain" and props["flag"] is True and props["ratio"] == 0.25
    second = got[later.message_id]
    assert second.scheduled_enqueue_time_utc == scheduled
    assert second.enqueued_time_utc is not None
    assert second.enqueued_time_utc >= scheduled - timedelta(seconds=1)
    # And the topic message reaches every subscription
    for subscription in ("audit", "billing"):
        (copy,) = receive(stack.primary, "events", 1, subscription=subscription)
        assert text(copy.message_id) == event.message_id and body(copy) == event.body
    # And the backlog queues end empty; the work is counted
    wait_until(lambda: backlog_empty(stack, paths), 20, what="empty backlog queues")
    assert cost(stack, "orders").syphon_sends == 2 and cost(stack, "events").syphon_sends == 1
    assert cost(stack, paths[0]).syphon_receives >= 1 and cost(stack, paths[1]).syphon_receives >= 1


def test_syphon_keeps_per_session_order_on_a_session_entity(make_stack: Any) -> None:
    entities = {"sessions": {"replication": "paired", "requires_session": True}}
    stack = make_stack(entities, settings={**PAIRED_SETTINGS, "BRIDGE_PAIRED__SYPHON_BATCH_SIZE": "7"})
    create_entities(stack.primary, sessions=["sessions"])
    paths = create_backlog_queues(stack)
    # Given four sessions' messages, more than one batch of them, spread over both backlog queues the way
    # the ordered sender spreads them (each session sticks to one queue, chosen by rendezvous hashing),
    # interleaved in each queue; the two queues are syphoned in parallel
    envelopes = [envelope("sessions", i, session_id=f"s-{i % 4}") for i in range(80)]
    with stack_pool(stack) as pool:
        for index, path in enumerate(paths):
            mine = [e for e in envelopes if rendezvous_backlog(str(e.session_id), [0, 1]) == index]
            assert mine, "rendezvous hashing put every session in one queue; pick other session names"
            fill_backlog(pool, path, mine)
    # When the syphon moves them
    stack.start_worker()
    stack.start_beat()
    # Then each session receives its messages in the order they were sent
    for session in ("s-0", "s-1", "s-2", "s-3"):
        got = receive(stack.primary, "sessions", 20, session_id=session, timeout=40)
        expected = [e.message_id for e in envelopes if e.session_id == session]
        assert [text(m.message_id) for m in got] == expected
        assert {text(m.session_id) for m in got} == {session}
    wait_until(lambda: backlog_empty(stack, paths), 20, what="empty backlog queues")


def test_expired_and_undeliverable_backlog_messages_are_dead_lettered_with_a_reason(make_stack: Any) -> None:
    entities = {"orders": {"replication": "paired"}}
    stack = make_stack(entities, settings=PAIRED_SETTINGS, auto_create=False)
    create_entities(stack.primary, queues=["orders"])
    paths = create_backlog_queues(stack)
    # Given a message whose TTL runs out in the backlog, one for an entity the primary does not have,
    # and a good one
    with stack_pool(stack) as pool:
        short = envelope("orders", 0, time_to_live=1.0)
        gone = envelope("no-such-entity", 0)
        good = envelope("orders", 1, time_to_live=600.0)
        fill_backlog(pool, paths[0], [short, gone, good])
    time.sleep(1.5)
    # When the syphon runs
    stack.start_worker()
    stack.start_beat()
    # Then only the good one is delivered
    got = receive(stack.primary, "orders", 1, timeout=30)
    assert [text(m.message_id) for m in got] == [good.message_id]
    # And the others are dead-lettered in the backlog queue, each with its reason
    dead = {text(m.message_id): m for m in receive(stack.secondary, paths[0], 2, dead_letter=True)}
    assert set(dead) == {short.message_id, gone.message_id}
    assert dead[short.message_id].dead_letter_reason == "expired_in_backlog"
    assert "orders" in (dead[short.message_id].dead_letter_error_description or "")
    assert dead[gone.message_id].dead_letter_reason == "destination_missing"
    assert "no-such-entity" in (dead[gone.message_id].dead_letter_error_description or "")
    wait_until(lambda: count_in(stack.secondary, paths[0]) == 0, 20, what="empty backlog queue")


def test_backlog_waits_while_its_entity_is_failed_over(make_stack: Any) -> None:
    stack = make_stack({"orders": {"replication": "paired"}}, settings=PAIRED_SETTINGS)
    create_entities(stack.primary, queues=["orders"])
    paths = create_backlog_queues(stack)
    # Given a failed-over entity whose primary is down, with messages in the backlog
    stack.primary.control.outage()
    mark_failed_over(stack, "orders")
    with stack_pool(stack) as pool:
        ids = fill_backlog(pool, paths[0], [envelope("orders", i) for i in range(5)])
    stack.start_worker()
    stack.start_beat()
    # Then the syphon does not even poll: nothing moves, nothing is billed
    time.sleep(3)
    assert count_in(stack.secondary, paths[0]) == 5
    assert cost(stack, paths[0]).syphon_receives == 0
    # When the primary comes back, the ping makes the entity available and the syphon moves everything
    stack.primary.control.restore()
    got = receive(stack.primary, "orders", 6, timeout=40)
    pings = [m for m in got if text(m.content_type) == PING_CONTENT_TYPE]  # the bridge's receiver drops them
    assert len(pings) == 1
    assert sorted(text(m.message_id) for m in got if m not in pings) == sorted(ids)
    wait_until(lambda: backlog_empty(stack, paths), 20, what="empty backlog queues")


def holder_pid(stack: Any, path: str) -> int | None:
    """The pid of the process whose syphon holds ``path``'s lease (owner ``host:pid:run:...``)."""
    client = redis_client(stack)
    try:
        value = client.get("bridge:{lease:syphon:" + path + "}")
    finally:
        client.close()
    return int(text(value).split(":")[1]) if value else None


def test_one_syphon_per_backlog_queue_and_a_killed_one_is_taken_over(make_stack: Any) -> None:
    settings = {
        **PAIRED_SETTINGS,
        "BRIDGE_PAIRED__BACKLOG_QUEUE_COUNT": "1",
        "BRIDGE_PAIRED__SYPHON_BATCH_SIZE": "5",
        "BRIDGE_PAIRED__SYPHON_RUN_BUDGET": "30",
    }
    stack = make_stack({"orders": {"replication": "paired"}}, settings=settings)
    create_entities(stack.primary, queues=["orders"])
    (path,) = create_backlog_queues(stack, count=1)
    with stack_pool(stack) as pool:
        ids = fill_backlog(pool, path, [envelope("orders", i) for i in range(400)])
    # A primary that settles each send after 0.2 s keeps the syphon busy long enough to watch it
    stack.primary.control.stall(delay=0.2)
    # Given two worker processes, each able to run the syphon
    workers = [stack.start_worker("worker-a", concurrency=1), stack.start_worker("worker-b", concurrency=1)]
    stack.start_beat()
    # When one of them took the backlog queue's lease and is moving messages
    first = wait_until(lambda: holder_pid(stack, path), 30, what="a syphon lease holder")
    wait_until(lambda: count_in(stack.primary, "orders") > 0, 30, what="syphoned messages")
    working = next(w for w in workers if os.getpgid(first) == w.proc.pid)
    other = next(w for w in workers if w is not working)
    # Then the other one waits: its runs find the lease held and return
    wait_until(
        lambda: "'busy': [" + repr(path) in other.log_path.read_text(),
        20,
        what="the other worker's syphon run finding the lease busy",
    )
    assert holder_pid(stack, path) == first
    # When the working one is killed mid-stream
    moved_before_kill = count_in(stack.primary, "orders")
    working.kill()
    stack.primary.control.restore()
    assert moved_before_kill < 400, "the syphon finished before the kill; the test needs more messages"
    # Then the other takes the lease over once it expires, and finishes the job
    successor = wait_until(
        lambda: holder_pid(stack, path) not in (None, first) and holder_pid(stack, path),
        30,
        what="a new lease holder",
    )
    assert os.getpgid(successor) == other.proc.pid
    got = receive(stack.primary, "orders", 400, timeout=90)
    assert set(ids) <= {text(m.message_id) for m in got}  # duplicates of the killed batch are allowed
    wait_until(lambda: count_in(stack.secondary, path) == 0, 30, what="empty backlog queue")
