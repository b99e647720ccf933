"""The ping, the whole paired round trip, and beat HA (``docs/paired.md``).

Real processes: redis-server, two local namespaces, ``bridge worker`` and one or two ``bridge beat``. The
primary's outage is the namespace's fault control; a killed beat is ``kill -9``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bridge.core.paired import PING_CONTENT_TYPE
from bridge.embedded.stack import wait_until
from tests.integration.paired_support import (
    PAIRED_SETTINGS,
    cost,
    create_backlog_queues,
    create_entities,
    mark_failed_over,
    paired_state,
    receive,
    text,
)
from tests.integration.worker_support import count_in, make_stack, producer

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(180)


def test_pings_while_the_primary_is_down_then_restore_sends_straight_to_the_primary(make_stack: Any) -> None:
    stack = make_stack(
        {"orders": {"replication": "paired"}},
        settings={**PAIRED_SETTINGS, "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1"},
    )
    create_entities(stack.primary, queues=["orders"])
    paths = create_backlog_queues(stack)
    stack.start_worker()
    stack.start_beat()
    with producer(stack) as p:
        # Given a primary outage long enough for failover to engage: messages go to the backlog
        stack.primary.control.outage()
        backlogged = [p.send("orders", f"down-{i}".encode()) for i in range(10)]
        wait_until(lambda: paired_state(stack, "orders").failed_over, 30, what="failover engaged")
        wait_until(lambda: cost(stack, "orders").backlog_sends >= 10, 30, what="backlog sends")
        # Then the primary is pinged every interval (1 s), each ping counted, the entity stays failed over
        first = cost(stack, "orders").pings
        time.sleep(4)
        pinged = cost(stack, "orders").pings - first
        assert 2 <= pinged <= 6, f"{pinged} pings in 4 s at a 1 s interval"
        state = paired_state(stack, "orders")
        assert state.failed_over and state.last_ping_at is not None and state.last_error
        assert sum(count_in(stack.secondary, path) for path in paths) == 10  # no syphon while failed over
        # When the primary comes back, the next ping succeeds and the entity is available again
        stack.primary.control.restore()
        wait_until(lambda: not paired_state(stack, "orders").failed_over, 10, what="ping restoring orders")
        sent_before = cost(stack, "orders")
        fresh = [p.send("orders", f"up-{i}".encode()) for i in range(5)]
    # Then new messages go straight to the primary, and the syphon brings the backlog too
    got = receive(stack.primary, "orders", 15, timeout=40)
    delivered = [text(m.message_id) for m in got if text(m.content_type) != PING_CONTENT_TYPE]
    assert sorted(delivered) == sorted(backlogged + fresh)
    after = cost(stack, "orders")
    assert after.backlog_sends == sent_before.backlog_sends
    assert after.primary_sends - sent_before.primary_sends == 5
    assert after.syphon_sends == 10
    wait_until(
        lambda: all(count_in(stack.secondary, path) == 0 for path in paths), 20, what="empty backlog queues"
    )


def test_a_session_entity_accepts_the_ping(make_stack: Any) -> None:
    entities = {"sessions": {"replication": "paired", "requires_session": True}}
    stack = make_stack(entities, settings=PAIRED_SETTINGS)
    create_entities(stack.primary, sessions=["sessions"])
    # Given a failed-over session entity whose primary is up again
    mark_failed_over(stack, "sessions")
    stack.start_worker()
    stack.start_beat()
    # Then the first ping (with its random SessionId) is accepted and the entity is available again
    wait_until(lambda: not paired_state(stack, "sessions").failed_over, 60, what="ping accepted")
    assert cost(stack, "sessions").pings >= 1
    assert paired_state(stack, "sessions").last_ping_at is not None


def test_schedule_mode_pings_leave_nothing_receivable_on_the_primary(make_stack: Any) -> None:
    stack = make_stack(
        {"orders": {"replication": "paired"}},
        settings={**PAIRED_SETTINGS, "BRIDGE_PAIRED__PING_MODE": "schedule"},
    )
    create_entities(stack.primary, queues=["orders"])
    stack.primary.control.outage()
    mark_failed_over(stack, "orders")
    stack.start_worker()
    stack.start_beat()
    # Given pings that fail while the primary is down
    # (the bound covers a worker and a beat starting on a loaded machine: the pings are 1 s apart)
    wait_until(lambda: cost(stack, "orders").pings >= 2, 45, what="failed pings")
    # When it comes back, a scheduled-and-cancelled ping restores the entity (schedule + cancel: 2 ops)
    stack.primary.control.restore()
    wait_until(lambda: not paired_state(stack, "orders").failed_over, 30, what="ping accepted")
    # Then nothing was ever left on the primary: no message, no scheduled one
    assert count_in(stack.primary, "orders") == 0
    assert receive(stack.primary, "orders", 1, timeout=3) == []


def sends(beat: Any, name: str) -> int:
    """How many times ``beat`` sent schedule ``name`` (Celery beat logs each send at INFO)."""
    log: str = beat.log_path.read_text()
    return log.count(f"Sending due task {name} ")


def test_two_beats_send_each_schedule_once_per_interval_and_one_survives_the_other(make_stack: Any) -> None:
    stack = make_stack(
        {"orders": {"replication": "paired"}},
        settings={**PAIRED_SETTINGS, "BRIDGE_WORKERS__SWEEP_INTERVAL": "1"},
    )
    stack.start_worker()
    beats = [stack.start_beat("beat-a"), stack.start_beat("beat-b")]
    # Both must be up and scheduling: each printed its start banner, and the sweep is being sent. (Which of
    # them wins each claim is up to timing, so one beat may legitimately send every firing.)
    wait_until(
        lambda: (
            all(b.running and "beat: Starting" in b.log_path.read_text() for b in beats)
            and sum(sends(b, "sweep") for b in beats) >= 2
        ),
        30,
        what="both beats running",
    )
    # When both run for 8 s with a 1 s sweep interval
    before = sum(sends(b, "sweep") for b in beats)
    time.sleep(8)
    together = sum(sends(b, "sweep") for b in beats) - before
    # Then the sweep was sent about 8 times between them, not 16
    assert 5 <= together <= 11, f"sweep sent {together} times in 8 s by two beats"
    # When one beat dies, the other sends every schedule on its own
    beats[0].kill()
    alone_before = sends(beats[1], "sweep")
    time.sleep(5)
    alone = sends(beats[1], "sweep") - alone_before
    assert alone >= 3, f"the surviving beat sent the sweep {alone} times in 5 s"
