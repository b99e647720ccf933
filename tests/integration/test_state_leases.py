"""Leases, retry times and cost counters against a real Redis."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from bridge.core.cost import CostTally, Operation
from bridge.outbox.connection import sync_client
from bridge.state import keys
from bridge.state.cost import CostStore
from bridge.state.lease import Lease
from bridge.state.retry import RetryStore

# ---- leases -------------------------------------------------------------------------------------------


def test_only_one_of_many_racing_owners_gets_the_lease(redis_url: str) -> None:
    owners = 10
    clients = [sync_client(redis_url) for _ in range(owners)]
    barrier = threading.Barrier(owners)
    won: list[str] = []
    lock = threading.Lock()

    def contend(index: int) -> None:
        barrier.wait()
        if RetryStore(clients[index]).acquire("orders", 2, f"worker-{index}", ttl=30):
            with lock:
                won.append(f"worker-{index}")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(owners)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        for c in clients:
            c.close()
    assert len(won) == 1
    assert RetryStore(redis.Redis.from_url(redis_url)).holder("orders", 2) == won[0]


def test_leases_of_different_shards_are_independent(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.acquire("orders", 0, "a", ttl=30)
    assert store.acquire("orders", 1, "b", ttl=30)
    assert store.acquire("invoices", 0, "c", ttl=30)
    assert not store.acquire("orders", 0, "b", ttl=30)
    assert (store.holder("orders", 0), store.holder("orders", 1), store.holder("invoices", 0)) == (
        "a",
        "b",
        "c",
    )


def test_reacquire_by_the_holder_refreshes(redis_client: redis.Redis) -> None:
    lease = Lease.named(redis_client, "beat")
    assert lease.acquire("me", ttl=1)
    assert lease.acquire("me", ttl=60)
    assert redis_client.pttl(keys.lease("beat")) > 30_000


def test_renew_by_owner_only(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.acquire("orders", 0, "owner", ttl=5)
    assert not store.renew("orders", 0, "intruder", ttl=60)
    assert redis_client.pttl(keys.shard_lease("orders", 0)) <= 5000
    assert store.renew("orders", 0, "owner", ttl=60)
    assert redis_client.pttl(keys.shard_lease("orders", 0)) > 5000
    assert store.holder("orders", 0) == "owner"


def test_renewing_a_free_lease_does_not_take_it(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert not store.renew("orders", 0, "owner", ttl=5)
    assert store.holder("orders", 0) is None


def test_release_by_non_owner_is_refused(redis_client: redis.Redis) -> None:
    store = RetryStore(redis_client)
    assert store.acquire("orders", 0, "owner", ttl=30)
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
    assert dead.acquire("dead-process", ttl=0.2)
    taker = Lease.named(redis_client, "syphon:ns1/x-servicebus-transfer/3")
    assert not taker.acquire("survivor", ttl=30)

    # When the TTL passes, another process takes over
    deadline = time.monotonic() + 5
    while not taker.acquire("survivor", ttl=30):
        assert time.monotonic() < deadline, "the expired lease was never released"
        time.sleep(0.05)

    # Then the old holder, come back to life, can neither renew nor release the new holder's lease
    assert not dead.renew("dead-process", ttl=30)
    assert not dead.release("dead-process")
    assert taker.holder() == "survivor"


@pytest.mark.parametrize("ttl", [0, -1.0])
def test_a_lease_needs_a_positive_ttl(redis_client: redis.Redis, ttl: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Lease.named(redis_client, "beat").acquire("me", ttl=ttl)


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
    assert store.totals_from(["orders", "invoices"]) == store.totals()


def test_cost_rejects_meaningless_counts(redis_client: redis.Redis) -> None:
    store = CostStore(redis_client)
    with pytest.raises(ValueError, match="negative"):
        store.add("orders", Operation.PING, -1)
    with pytest.raises(ValueError, match="single Operation"):
        store.add("orders", CostTally(pings=1), 2)
    assert store.totals() == CostTally()


def test_concurrent_flushes_lose_nothing(redis_url: str) -> None:
    workers, flushes = 6, 50
    clients = [sync_client(redis_url) for _ in range(workers)]

    def flush(index: int) -> None:
        store = CostStore(clients[index])
        for _ in range(flushes):
            store.add("orders", CostTally(primary_sends=2, pings=1))

    threads = [threading.Thread(target=flush, args=(i,)) for i in range(workers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        for c in clients:
            c.close()
    want = CostTally(primary_sends=2 * workers * flushes, pings=workers * flushes)
    store = CostStore(redis.Redis.from_url(redis_url))
    assert store.get("orders") == want
    assert store.totals() == want
