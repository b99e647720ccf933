"""Times one process stores for another are on Redis's clock (``bridge.redis.clock``), not the hosts'.

Real Redis (the session's private server). A host's clock is injected (``RedisClock(host=...)``, the
clock it falls back on; a lambda 30 s ahead of or behind this host's), so is the monotonic clock where a test
moves it; nothing here sleeps to make clocks differ.
"""

from __future__ import annotations

import time

import pytest
import redis

from bridge.core.paired import FailoverPolicy, StartTimer, failover_due, seconds_until_failover
from bridge.delivery.context import DeliveryContext
from bridge.embedded.ports import free_port
from bridge.redis.clock import RedisClock, server_time
from bridge.settings import Settings

SKEW = 30.0


def _host(skew: float) -> float:
    return time.time() + skew


def test_a_redis_clock_answers_redis_s_time_whatever_the_host_s_clock_says(redis_client: redis.Redis) -> None:
    ahead = RedisClock(redis_client, host=lambda: _host(SKEW))
    behind = RedisClock(redis_client, host=lambda: _host(-SKEW))
    # Two hosts 60 s apart read the same time: Redis's, give or take a round trip
    first, second, server = ahead(), behind(), server_time(redis_client)
    assert abs(first - server) < 0.5 and abs(second - server) < 0.5
    assert ahead.error is not None and 0 <= ahead.error < 0.5


def test_a_redis_clock_carries_its_sample_forward_on_the_monotonic_clock_until_the_next(
    redis_client: redis.Redis,
) -> None:
    ticks = [1000.0]
    clock = RedisClock(redis_client, resync=60, monotonic=lambda: ticks[0])
    start = clock()
    # Within the resync interval, a reading is the sample plus the monotonic seconds since (no round trip)
    ticks[0] += 10
    assert clock() == pytest.approx(start + 10, abs=1e-6)
    # After it, Redis is asked again: the monotonic clock raced ahead 70 s, Redis's went on in real time
    ticks[0] += 60
    assert abs(clock() - server_time(redis_client)) < 0.5


def test_a_redis_clock_that_never_reached_redis_answers_the_host_s_clock_and_never_raises() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        clock = RedisClock(client, host=lambda: 1234.5)
        assert clock() == 1234.5 and clock.error is None
    finally:
        client.close()


def _worker(redis_url: str, skew: float) -> DeliveryContext:
    """A worker process's delivery context on a host whose clock is ``skew`` seconds off this one's."""
    ctx = DeliveryContext.build(Settings(redis_url=redis_url, entities={"orders": {"replication": "paired"}}))
    assert isinstance(ctx.clock, RedisClock)  # what a worker reads as "now"
    ctx.clock.host = lambda: _host(skew)
    return ctx


def test_a_failover_timer_started_on_a_host_behind_is_not_due_at_once_on_a_host_ahead(redis_url: str) -> None:
    policy = FailoverPolicy(failover_interval=60.0)
    behind, ahead = _worker(redis_url, -SKEW), _worker(redis_url, SKEW)
    try:
        # Given the primary failing for an entity, seen first by a worker whose host clock runs 30 s behind
        behind.paired.apply("orders", [StartTimer(behind.clock())])
        # When a worker whose host clock runs 30 s ahead decides where the entity's next message goes
        state = ahead.paired.get("orders")
        # Then the 60 s timer has just started for it too: no failover yet, about 60 s to go (host clocks
        # would say 0 s; the margin below 60 is real time passing on a loaded machine, not skew)
        assert not failover_due(state, ahead.clock(), policy)
        left = seconds_until_failover(state, ahead.clock(), policy)
        assert left is not None and 45 < left <= 60.01  # the clock offset is measured to within milliseconds
        # (Had each worker read its host's clock, failover would have come at once.)
        behind.paired.apply("invoices", [StartTimer(_host(-SKEW))])
        assert failover_due(ahead.paired.get("invoices"), _host(SKEW), policy)
    finally:
        behind.close()
        ahead.close()
