"""Copies the bridge itself makes late, against the receiver's window (``docs/durability.md``, loss table:
"A copy the bridge makes late").

Active replication with ``success_policy = "all"`` retries the namespace that was down until it is back, so
the second copy of every message sent during an outage arrives when the outage ends, however long it was.
The receiver suppresses it while the first copy's id is remembered (``receiver.window``, 7 days by
default, plus at most a seventh of it) and hands it again after. Here the window is compressed to seconds:
one receiver with a 3 s window (ids remembered 3 to 3.5 s), one with the default, the secondary down 6 s.

What the default is, is pinned without waiting days: the receiver's record of handled ids lives in Redis
and its times are Redis's own (``bridge.receiving.scripts``), so a first copy handled "6 days ago" is made
by moving the record's expiries 6 days back, and a late copy must still be suppressed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.receiving import Receiver
from bridge.receiving.keys import ReceiverKeys
from tests.integration.receiver_support import HANDLERS, counts, per_id, recorded, send, settings
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


# ---- the default window, without waiting days ------------------------------------------------------------
HOUR_MS, DAY_MS = 3_600_000, 86_400_000


def _age_record(client: redis.Redis, entity: str, ms: int) -> None:
    """Move ``entity``'s record of handled ids ``ms`` into the past, as if every id in it had been handled
    that much earlier: each bucket's expiry (in the index, and on its slot hashes) comes ``ms`` sooner, and
    a bucket whose expiry has then passed is gone (what Redis's own expiry would have done by now)."""
    index = ReceiverKeys(entity).seen
    seconds, micros = client.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    for bucket, value in client.hgetall(index).items():
        expiry, shape = value.decode().split(" ", 1)
        aged = int(expiry) - ms
        slots = list(client.scan_iter(match=f"{index}:{bucket.decode()}:*"))
        if aged <= now:
            client.hdel(index, bucket)
            client.delete(*slots)
            continue
        client.hset(index, bucket, f"{aged} {shape}")
        for slot in slots:
            client.pexpireat(slot, aged)


@pytest.mark.parametrize(
    ("age_ms", "handed_again"),
    [(HOUR_MS, False), (6 * DAY_MS, False), (8 * DAY_MS + 60_000, True)],
    ids=["handled-1-hour-ago", "handled-6-days-ago", "handled-8-days-ago"],
)
def test_the_default_window_suppresses_a_copy_of_an_id_handled_up_to_7_days_ago(
    shared_namespace: LocalNamespace, redis_url: str, unique_name: str, age_ms: int, handed_again: bool
) -> None:
    queue = f"{unique_name}-q"
    config = settings(redis_url, shared_namespace, None, receiver={"max_wait": 0.5})
    assert "window" not in config.receiver.model_fields_set  # the default window, whatever it is set to
    handled: list[str] = []
    receiver = Receiver(queue, lambda m: handled.append(m.message_id or ""), settings=config)
    thread = threading.Thread(target=receiver.run)
    thread.start()
    client = redis.Redis.from_url(redis_url)
    try:
        # Given an id handled, and its record aged as if that had been an hour, 6 days or 8 days ago
        send(shared_namespace, queue, ["late"])
        wait_until(lambda: len(handled) == 1, 30, what="the first copy handled")
        _age_record(client, queue, age_ms)
        # When a late copy arrives
        send(shared_namespace, queue, ["late"])
        # Then within 7 days (plus at most a seventh) it is completed unhandled; after that, handed again
        if handed_again:
            wait_until(lambda: len(handled) == 2, 30, what="the late copy handed again")
        else:
            wait_until(
                lambda: receiver.counts().duplicates_suppressed == 1, 30, what="the late copy suppressed"
            )
    finally:
        receiver.stop()
        thread.join(20)
        client.close()
    assert handled == ["late"] * (2 if handed_again else 1)
