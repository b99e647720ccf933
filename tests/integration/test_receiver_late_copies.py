"""Copies the bridge itself makes late, against the receiver's window (``docs/durability.md``, loss table:
"A copy the bridge makes late").

Active replication with ``success_policy = "all"`` retries the namespace that was down until it is back, so
the second copy of every message sent during an outage arrives when the outage ends, however long it was.
The receiver suppresses it while the first copy's id is remembered (``receiver.window``, 7 days by
default, plus at most a seventh of it) and hands it again after. Here the window is compressed to seconds:
one receiver with a 3 s window (ids remembered 3 to 3.5 s), one with the default, the secondary down 6 s.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bridge.embedded.stack import wait_until
from tests.integration.receiver_support import HANDLERS, counts, per_id, recorded
from tests.integration.worker_support import make_stack, producer

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(150)

OUTAGE = 6.0
"""Seconds the secondary stays down after the first copies were handled: longer than the short window
and its span (3.5 s), far shorter than the default window."""


def test_a_late_copy_is_handed_again_only_after_the_window(make_stack: Any) -> None:
    policy = {"replication": "active", "success_policy": "all"}
    stack = make_stack({"short": policy, "week": policy}, settings={"BRIDGE_RECEIVER__MAX_WAIT": "1"})
    stack.start_worker()
    stack.start_beat()
    receive = ("receive", "--handler", f"{HANDLERS}:record")
    short = stack.start_bridge("receive-short", *receive, "short", "--window", "3")
    week = stack.start_bridge("receive-week", *receive, "week")  # the default window: 7 days
    url = stack.redis.url
    # Given the secondary down: every message lands on the primary, and the workers retry the secondary
    stack.secondary.control.outage()
    try:
        with producer(stack) as p:
            ids = {entity: p.send_batch(entity, [f"{entity}-{i}".encode() for i in range(10)])
                   for entity in ("short", "week")}  # fmt: skip
        # When the primary copies are handed, and the outage outlasts the short window
        for entity, proc in (("short", short), ("week", week)):
            wait_until(
                lambda e=entity: counts(url, e).handled >= 10, 60, what=f"first copies: {proc.log_tail()}"
            )
        time.sleep(OUTAGE)
    finally:
        stack.secondary.control.restore()
    # Then the late copies arrive from the secondary once it is back
    for entity, proc in (("short", short), ("week", week)):
        wait_until(
            lambda e=entity: (
                counts(url, e).received_secondary >= 10
                and counts(url, e).handled + counts(url, e).duplicates_suppressed >= 20
            ),
            90,
            what=f"the late copies settled: {proc.log_tail()}",
        )
    short.stop()
    week.stop()
    # After the short window each late copy was handed again: the primary's copy, then the secondary's
    calls = recorded(url, "short")
    assert per_id(calls) == dict.fromkeys(ids["short"], 2)
    assert sorted(c["namespace"] for c in calls) == ["primary"] * 10 + ["secondary"] * 10
    assert counts(url, "short").duplicates_suppressed == 0
    # Within the default window none was: each handed once, the late copy completed unhandled
    assert per_id(recorded(url, "week")) == dict.fromkeys(ids["week"], 1)
    got = counts(url, "week")
    assert (got.handled, got.duplicates_suppressed, got.received_secondary) == (10, 10, 10)
