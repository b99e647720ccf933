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


def test_not_before_per_shard(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.not_before("orders", 0) is None
    store.set_not_before("orders", 0, 1700000000.123456789)
    store.set_not_before("orders", 3, 1700000005.5)
    store.set_not_before("invoices", 0, 42.0)

    other = RetryStore(redis_client)
    assert other.not_before("orders", 0) == 1700000000.123456789
    assert other.not_before("orders", 1) is None
    assert other.all_not_before("orders") == {0: 1700000000.123456789, 3: 1700000005.5}

    store.set_not_before("orders", 0, 1700000009.0)  # a later failure replaces the time
    assert other.not_before("orders", 0) == 1700000009.0
    store.clear("orders", 0)
    assert other.not_before("orders", 0) is None
    assert other.all_not_before("orders") == {3: 1700000005.5}
    assert other.not_before("invoices", 0) == 42.0


def test_schedule_counts_retries_in_a_row_until_clear(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.attempts("orders", 1) == 0
    assert store.schedule("orders", 1, 100.0) == 1
    assert store.schedule("orders", 1, 102.5) == 2
    assert (store.attempts("orders", 1), store.not_before("orders", 1)) == (2, 102.5)
    assert store.attempts("orders", 0) == 0
    store.clear("orders", 1)
    assert (store.attempts("orders", 1), store.not_before("orders", 1)) == (0, None)
    assert store.schedule("orders", 1, 200.0) == 1


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
    now = time.time()
    # Given shard 0 waiting for the entity on the primary and for a backlog queue path on the secondary
    store.wait_after_abandoned("orders", 0, "primary", "orders", now=now, wait=2.0)
    store.wait_after_abandoned("orders", 0, "secondary", "ns/x-servicebus-transfer/1", now=now, wait=2.0)
    store.wait_after_abandoned("orders", 1, "secondary", "orders", now=now, wait=2.0)
    # And a field that is not a wait (a hand-written key must not break a drainer)
    redis_client.hset(keys.abandoned("orders"), "junk", "1")
    # Then the next holder of each shard reads its own waits only
    assert store.abandoned_waits("orders", 0) == {
        ("primary", "orders"): now + 2.0,
        ("secondary", "ns/x-servicebus-transfer/1"): now + 2.0,
    }
    assert store.abandoned_waits("orders", 1) == {("secondary", "orders"): now + 2.0}
    assert store.abandoned_waits("invoices", 0) == {}
    # And the record is gone a second after the last wait ended
    assert 2000 < redis_client.pttl(keys.abandoned("orders")) <= 3000
    # And a wait that the resent messages ended is gone for its shard only
    store.end_wait_after_abandoned("orders", 0, "primary", "orders")
    assert store.abandoned_waits("orders", 0) == {("secondary", "ns/x-servicebus-transfer/1"): now + 2.0}
    assert store.abandoned_waits("orders", 1) == {("secondary", "orders"): now + 2.0}
