"""Leases, retry times and cost counters against a real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from bridge.core.cost import CostTally, Operation
from bridge.core.decisions import PRIMARY, SECONDARY, Target
from bridge.redis.connection import sync_client
from bridge.redis.lease import Lease
from bridge.state import keys
from bridge.state.cost import CostStore
from bridge.state.lease import LeaseStore
from bridge.state.retry import RetryStore
from tests.contention import Contender, race

# ---- leases -------------------------------------------------------------------------------------------


def test_only_one_of_many_racing_owners_gets_the_lease(redis_url: str) -> None:
    def contend(c: Contender[redis.Redis]) -> bool:
        c.together()
        return LeaseStore(c.client).acquire("orders", 2, f"worker-{c.index}", ttl_ms=30000)

    acquired = race(10, lambda: sync_client(redis_url), contend)
    won = [f"worker-{index}" for index, ok in enumerate(acquired) if ok]
    assert len(won) == 1
    assert LeaseStore(redis.Redis.from_url(redis_url)).holder("orders", 2) == won[0]


def test_leases_of_different_shards_are_independent(redis_client: redis.Redis) -> None:
    store = LeaseStore(redis_client)
    assert store.acquire("orders", 0, "a", ttl_ms=30000)
    assert store.acquire("orders", 1, "b", ttl_ms=30000)
    assert store.acquire("invoices", 0, "c", ttl_ms=30000)
    assert not store.acquire("orders", 0, "b", ttl_ms=30000)
    assert (store.holder("orders", 0), store.holder("orders", 1), store.holder("invoices", 0)) == (
        "a",
        "b",
        "c",
    )


def test_reacquire_by_the_holder_refreshes(redis_client: redis.Redis) -> None:
    lease = Lease.named(redis_client, "beat")
    assert lease.acquire("me", ttl_ms=1000)
    assert lease.acquire("me", ttl_ms=60000)
    assert redis_client.pttl(keys.lease("beat")) > 30_000


def test_renew_by_owner_only(redis_client: redis.Redis) -> None:
    store = LeaseStore(redis_client)
    assert store.acquire("orders", 0, "owner", ttl_ms=5000)
    assert not store.renew("orders", 0, "intruder", ttl_ms=60000)
    assert redis_client.pttl(keys.shard_lease("orders", 0)) <= 5000
    assert store.renew("orders", 0, "owner", ttl_ms=60000)
    assert redis_client.pttl(keys.shard_lease("orders", 0)) > 5000
    assert store.holder("orders", 0) == "owner"


def test_renewing_a_free_lease_does_not_take_it(redis_client: redis.Redis) -> None:
    store = LeaseStore(redis_client)
    assert not store.renew("orders", 0, "owner", ttl_ms=5000)
    assert store.holder("orders", 0) is None


def test_release_by_non_owner_is_refused(redis_client: redis.Redis) -> None:
    store = LeaseStore(redis_client)
    assert store.acquire("orders", 0, "owner", ttl_ms=30000)
    assert not store.release("orders", 0, "intruder")
    assert store.holder("orders", 0) == "owner"
    assert store.release("orders", 0, "owner")
    assert store.holder("orders", 0) is None
    assert not store.release("orders", 0, "owner")  # already free


def test_a_dead_holders_lease_expires_and_its_late_calls_cannot_hurt_the_new_holder(
    redis_client: redis.Redis,
) -> None:
    # Given a syphon lease whose holder stopped renewing (it died)
    dead = Lease.named(redis_client, "syphon:ns1/x-servicebus-transfer/3")
    assert dead.acquire("dead-process", ttl_ms=200)
    taker = Lease.named(redis_client, "syphon:ns1/x-servicebus-transfer/3")
    assert not taker.acquire("survivor", ttl_ms=30000)

    # When the TTL passes, another process takes over
    deadline = time.monotonic() + 5
    while not taker.acquire("survivor", ttl_ms=30000):
        assert time.monotonic() < deadline, "the expired lease was never released"
        time.sleep(0.05)

    # Then the old holder, come back to life, can neither renew nor release the new holder's lease
    assert not dead.renew("dead-process", ttl_ms=30000)
    assert not dead.release("dead-process")
    assert taker.holder() == "survivor"


@pytest.mark.parametrize("ttl_ms", [0, -1, 1.5])
def test_a_lease_needs_a_positive_whole_ttl(redis_client: redis.Redis, ttl_ms: int) -> None:
    with pytest.raises(ValueError, match="positive whole"):
        Lease.named(redis_client, "beat").acquire("me", ttl_ms=ttl_ms)
    assert Lease.named(redis_client, "beat").holder() is None


# ---- retry not-before ---------------------------------------------------------------------------------


def _server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def test_a_backoff_is_a_time_on_redis_s_clock_per_shard(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.backoff_left("orders", 0) is None
    before = _server_now(redis_client)
    store.hold_off("orders", 0, 30.0)
    store.hold_off("orders", 3, 60.0)
    store.hold_off("invoices", 0, 90.0)
    after = _server_now(redis_client)

    other = RetryStore(redis_client)
    left = other.backoff_left("orders", 0)
    assert left is not None and 30.0 - (after - before) - 1 < left <= 30.0
    assert other.backoff_left("orders", 1) is None
    stored = other.all_not_before("orders")  # what ``bridge status`` shows: epoch seconds, Redis's clock
    assert set(stored) == {0, 3}
    assert before + 30 <= stored[0] <= after + 30 and before + 60 <= stored[3] <= after + 60

    store.hold_off("orders", 0, 0.0)  # a later wait replaces the time; a passed one reads 0 until cleared
    assert other.backoff_left("orders", 0) == 0.0
    store.clear("orders", 0)
    assert other.backoff_left("orders", 0) is None
    assert set(other.all_not_before("orders")) == {3}
    invoices = other.backoff_left("invoices", 0)
    assert invoices is not None and 88 < invoices <= 90


def test_back_off_counts_retries_in_a_row_until_clear(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.attempts("orders", 1) == 0
    assert store.back_off("orders", 1, 100.0) == 1
    assert store.back_off("orders", 1, 2.5) == 2
    left = store.backoff_left("orders", 1)
    assert store.attempts("orders", 1) == 2 and left is not None and 1.5 < left <= 2.5
    assert store.attempts("orders", 0) == 0
    store.hold_off("orders", 1, 5.0)  # not a retry: the count stays
    assert store.attempts("orders", 1) == 2
    store.clear("orders", 1)
    assert (store.attempts("orders", 1), store.backoff_left("orders", 1)) == (0, None)
    assert store.back_off("orders", 1, 200.0) == 1


def test_delivered_targets_per_entry(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    backlog = Target("secondary", "ns:1/x-servicebus-transfer/0")
    store.remember_delivered("orders", 0, "1-0", (PRIMARY,))
    store.remember_delivered("orders", 0, "2-0", (SECONDARY, PRIMARY, backlog))
    store.remember_delivered("orders", 1, "1-0", (SECONDARY,))

    got = store.delivered("orders", 0, ["1-0", "2-0", "3-0"])
    assert got == {"1-0": (PRIMARY,), "2-0": (PRIMARY, SECONDARY, backlog)}
    assert store.delivered("orders", 1, ["1-0"]) == {"1-0": (SECONDARY,)}
    assert store.delivered("orders", 0, []) == {}

    store.forget_delivered("orders", 0, ["1-0", "3-0"])
    assert store.delivered("orders", 0, ["1-0", "2-0"]).keys() == {"2-0"}
    store.forget_delivered("orders", 0, [])


def test_a_drain_is_marked_scheduled_once_until_unmarked_or_expired(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.mark_scheduled("orders", 0, 60_000)
    assert not store.mark_scheduled("orders", 0, 60_000)
    assert store.mark_scheduled("orders", -1, 60_000)  # the ingest marker is its own
    store.unmark_scheduled("orders", 0)
    assert store.mark_scheduled("orders", 0, 100)
    deadline = time.monotonic() + 5
    while not store.mark_scheduled("orders", 0, 100):
        assert time.monotonic() < deadline, "the marker never expired"
        time.sleep(0.05)


# ---- cost ---------------------------------------------------------------------------------------------


def test_cost_counts_per_entity_and_in_total(redis_client: redis.Redis) -> None:
    store = CostStore(redis_client)
    store.add("orders", Operation.PRIMARY_SEND)
    store.add("orders", Operation.BACKLOG_SEND, 3)
    store.add("orders", Operation.PING, 0)  # nothing to count
    store.add("invoices", CostTally(primary_sends=5, syphon_receives=2))
    store.add("invoices", CostTally())

    assert store.get("orders") == CostTally(primary_sends=1, backlog_sends=3)
    assert store.get("invoices") == CostTally(primary_sends=5, syphon_receives=2)
    assert store.get("nothing") == CostTally()
    assert store.totals() == CostTally(primary_sends=6, backlog_sends=3, syphon_receives=2)
    assert store.get("orders") + store.get("invoices") == store.totals()


def test_cost_rejects_meaningless_counts(redis_client: redis.Redis) -> None:
    store = CostStore(redis_client)
    with pytest.raises(ValueError, match="negative"):
        store.add("orders", Operation.PING, -1)
    with pytest.raises(ValueError, match="single Operation"):
        store.add("orders", CostTally(pings=1), 2)
    assert store.totals() == CostTally()


def test_concurrent_flushes_lose_nothing(redis_url: str) -> None:
    workers, flushes = 6, 50

    def flush(c: Contender[redis.Redis]) -> None:
        store = CostStore(c.client)
        c.together()
        for _ in range(flushes):
            store.add("orders", CostTally(primary_sends=2, pings=1))

    race(workers, lambda: sync_client(redis_url), flush)
    want = CostTally(primary_sends=2 * workers * flushes, pings=workers * flushes)
    store = CostStore(redis.Redis.from_url(redis_url))
    assert store.get("orders") == want
    assert store.totals() == want


# ---- waits after abandoned sends ----------------------------------------------------------------------


def test_waits_after_abandoned_sends_are_per_shard_and_expire(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    # Given shard 0 waiting for the entity on the primary and for a backlog queue path on the secondary
    store.wait_after_abandoned("orders", 0, "primary", "orders", wait=20.0)
    store.wait_after_abandoned("orders", 0, "secondary", "ns/x-servicebus-transfer/1", wait=20.0)
    store.wait_after_abandoned("orders", 1, "secondary", "orders", wait=20.0)
    # And fields that are not a wait (a hand-written key must not break a drainer), and a wait that ended
    redis_client.hset(keys.abandoned("orders"), "junk", "1")
    redis_client.hset(keys.abandoned("orders"), "0|primary|old", "not a time")
    store.wait_after_abandoned("orders", 0, "primary", "gone", wait=0.0)
    # Then the next holder of each shard reads its own waits only, as seconds left on Redis's clock
    waits = store.abandoned_waits_left("orders", 0)
    assert set(waits) == {("primary", "orders"), ("secondary", "ns/x-servicebus-transfer/1")}
    assert all(19 < left <= 20 for left in waits.values()), waits
    assert set(store.abandoned_waits_left("orders", 1)) == {("secondary", "orders")}
    assert store.abandoned_waits_left("invoices", 0) == {}
    # And the record is gone a second after the last wait ended (the last one written was 0 s long)
    assert 0 < redis_client.pttl(keys.abandoned("orders")) <= 1000
    # And a wait that the resent messages ended is gone for its shard only
    store.end_wait_after_abandoned("orders", 0, "primary", "orders")
    assert set(store.abandoned_waits_left("orders", 0)) == {("secondary", "ns/x-servicebus-transfer/1")}
    assert set(store.abandoned_waits_left("orders", 1)) == {("secondary", "orders")}
