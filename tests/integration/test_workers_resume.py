"""A namespace back after a long outage: the shards that were backing off try again at once, in every worker
process, instead of after what is left of their backoff — and order per key holds.

Real parts: two drain services in this process, each with a delivery context of its own (two "worker
processes" that share only Redis), the session's private Redis and a private local namespace whose fault
control refuses connections (an outage) and then takes them again.
"""

from __future__ import annotations

import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest
import redis

from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.outbox import keys as outbox_keys
from bridge.producer import Producer
from bridge.settings import Settings
from bridge.state import keys as state_keys
from bridge.state.retry import RetryStore
from tests.integration.paired_support import namespace_settings
from tests.integration.worker_support import receive_all

pytestmark = pytest.mark.timeout(300)

ENTITY = "resume"
KEYS = [f"k{n}" for n in range(6)]
LONG_BACKOFF = 20.0
"""Seconds each shard's recorded backoff has left when the namespace comes back (at least)."""


@pytest.fixture
def contexts() -> Iterator[list[DeliveryContext]]:
    built: list[DeliveryContext] = []
    yield built
    for ctx in built:
        ctx.close()


def _settings(redis_url: str, ns: LocalNamespace, **retry: float | None) -> Settings:
    # Backoffs as long as a long outage leaves them (40 s for the first retry, then up to 60 s), a
    # short attempt deadline; everything else is the default (the scout's interval, 1 s, too) or ``retry``.
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {ENTITY: {"outbox_shards": 2, "replication": "none"}},
            "retry": {
                "attempt_deadline": 3,
                "retry_total": 0,
                "outbox_backoff_factor": 40,
                "outbox_backoff_max": 60,
                **retry,
            },
            "workers": {"lease_ttl": 10},
        }
    )


def _no_scout(
    redis_url: str,
    entities: dict[str, dict[str, str]],
    primary: LocalNamespace,
    secondary: LocalNamespace | None = None,
    *,
    attempt_deadline: float = 3,
    lease_ttl: float = 10,
    retry: dict[str, float | None] | None = None,
) -> Settings:
    """Long backoffs and no scout: only news of a namespace back (or the door watch) ends a backoff early."""
    namespaces = {"primary": namespace_settings(primary)}
    if secondary is not None:
        namespaces["secondary"] = namespace_settings(secondary)
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            **namespaces,
            "entities": entities,
            "retry": {
                "attempt_deadline": attempt_deadline,
                "retry_total": 0,
                "outbox_backoff_factor": 40,
                "outbox_backoff_max": 60,
                "outbox_scout_interval": None,
                **(retry or {}),
            },
            "workers": {"lease_ttl": lease_ttl},
        }
    )


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def test_shards_backing_off_through_an_outage_send_as_soon_as_the_namespace_is_back(
    redis_url: str,
    namespace_factory: Callable[..., LocalNamespace],
    contexts: list[DeliveryContext],
) -> None:
    ns = namespace_factory("primary", auto_create=True)
    settings = _settings(redis_url, ns)
    # Worker b neither scouts nor watches the door: only the news that worker a saw the namespace back
    # ends its shard's backoff before its time.
    deaf = _settings(redis_url, ns, outbox_scout_interval=None, outbox_door_watch=None)
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    retry = RetryStore(client)
    services = []
    for name, own in (("worker-a", settings), ("worker-b", deaf)):
        ctx = DeliveryContext.build(own)
        ctx.identity = name
        contexts.append(ctx)
        services.append(DrainService(ctx, tick=0.1, block_ms=200).start())
    sent: dict[str, list[int]] = defaultdict(list)
    try:
        # (each worker serves one of the two shards)
        wait_until(lambda: sorted(len(s.owned()) for s in services) == [1, 1], 30, what="one shard each")
        with Producer(settings=settings) as producer:

            def send(count: int, start: int) -> None:
                for i in range(start, start + count):
                    key = KEYS[i % len(KEYS)]
                    producer.send(
                        ENTITY, f"m{i}".encode(), partition_key=key, application_properties={"i": i}
                    )
                    sent[key].append(i)

            # Given traffic that flowed while the namespace worked, on both shards
            send(12, 0)
            assert len(receive_all(ns, ENTITY, 12, timeout=60)) == 12
            assert {zlib.crc32(k.encode()) % 2 for k in KEYS} == {0, 1}
            # When the namespace is down long enough that both shards back off for a long time
            ns.control.outage()
            send(60, 12)

            def long_backoffs() -> bool:
                lefts = [retry.backoff_left(ENTITY, shard) for shard in (0, 1)]
                return all(left is not None and left >= LONG_BACKOFF for left in lefts)

            wait_until(long_backoffs, 150, what=f"both shards backing off for {LONG_BACKOFF:.0f} s or more")
            # ... and it comes back (the backoffs read before: a worker that sees it back rewrites its own)
            backoff_ends = retry.all_not_before(ENTITY)
            ns.control.restore()
            restored_at = _redis_now(client)
        assert min(backoff_ends.values()) - restored_at >= LONG_BACKOFF / 2, backoff_ends

        # Then the outbox is empty before either shard's backoff (as recorded when the namespace came back)
        # would have let it try again: a shard of each worker resumed at once, worker b's on the news.
        def empty() -> bool:
            depth = client.hget(outbox_keys.stats(ENTITY), "messages")
            return int(depth or 0) == 0

        wait_until(empty, max(backoff_ends.values()) - restored_at + 30, what="the outbox drained")
        emptied_at = _redis_now(client)
        assert emptied_at < min(backoff_ends.values()), (
            f"drained {emptied_at - restored_at:.1f} s after the restore; the backoffs ended "
            f"{sorted(at - restored_at for at in backoff_ends.values())} s after it"
        )
        # ... because the namespace was announced back to every worker
        assert client.xlen(state_keys.NAMESPACE_BACK) >= 1
        # ... every message arrived once, in order per key
        got = receive_all(ns, ENTITY, 60, timeout=30)
        numbers = [int((m.application_properties or {})[b"i"]) for m in got]
        assert sorted(numbers) == list(range(12, 72))
        by_key: dict[str, list[int]] = defaultdict(list)
        for m, number in zip(got, numbers, strict=True):
            by_key[str(m.partition_key)].append(number)
        assert by_key == {key: [i for i in ids if i >= 12] for key, ids in sent.items()}
    finally:
        for service in services:
            service.stop()
        client.close()


def test_a_namespace_back_makes_the_links_of_the_shards_it_wakes_before_a_batch_needs_them(
    redis_url: str,
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
    contexts: list[DeliveryContext],
) -> None:
    """An active ``all`` shard backing off through the primary's outage holds entries the secondary already
    has, so its first batch after the restore goes to the primary only; the secondary's link, closed with
    the primary's faults, is made again as soon as the news wakes the shard, not when a later batch needs
    it."""
    primary, secondary = namespace_pair
    # No scout: what ends the long backoff is the news below.
    settings = _no_scout(
        redis_url, {ENTITY: {"replication": "active", "success_policy": "all"}}, primary, secondary
    )
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    retry = RetryStore(client)
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    # Given three messages held while the primary is down (written before the worker starts, so that its
    # first batch is all three): the secondary takes them, the shard backs off, and the close coupling
    # closes the secondary's client after the primary's faults
    primary.control.outage()
    with Producer(settings=settings) as producer:
        for i in range(3):
            producer.send(ENTITY, f"m{i}".encode(), application_properties={"i": i})
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        assert len(receive_all(secondary, ENTITY, 3, timeout=30)) == 3
        wait_until(lambda: (retry.backoff_left(ENTITY, 0) or 0) >= LONG_BACKOFF, 60, what="a long backoff")
        wait_until(lambda: ctx.pool.sender_paths("secondary") == [], 60, what="the secondary's link closed")
        # When the primary is back and announced
        primary.control.restore()
        ctx.seen_back("primary", ENTITY, "a test announced it")

        # Then the batch goes to the primary (the only namespace it lacks) and the outbox empties
        def empty() -> bool:
            return int(client.hget(outbox_keys.stats(ENTITY), "messages") or 0) == 0

        wait_until(empty, 30, what="the outbox drained")
        assert len(receive_all(primary, ENTITY, 3, timeout=30)) == 3
        # ... and the secondary's link was made again without a batch needing it
        wait_until(
            lambda: ctx.pool.sender_paths("secondary") == [ENTITY], 15, what="the secondary's link made"
        )
        assert receive_all(secondary, ENTITY, 1, timeout=2) == []  # nothing was sent there again
    finally:
        service.stop()
        client.close()


def test_a_backing_off_shard_tries_as_soon_as_the_refusing_address_accepts_again(
    redis_url: str,
    namespace_factory: Callable[..., LocalNamespace],
    contexts: list[DeliveryContext],
) -> None:
    """No scout and nothing else that sends: no news announces the namespace back. The worker's watcher
    connects to the address that refused connections and has the shard try the moment it accepts."""
    ns = namespace_factory("primary", auto_create=True)
    settings = _no_scout(redis_url, {ENTITY: {"replication": "none"}}, ns)
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    retry = RetryStore(client)
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        with Producer(settings=settings) as producer:
            # Given a namespace seen working (so that its refusals are believed) ...
            producer.send(ENTITY, b"before", application_properties={"i": -1})
            assert len(receive_all(ns, ENTITY, 1, timeout=30)) == 1
            # ... then refusing connections while three messages wait and the shard backs off for long
            ns.control.outage()
            for i in range(3):
                producer.send(ENTITY, f"m{i}".encode(), application_properties={"i": i})
        wait_until(lambda: (retry.backoff_left(ENTITY, 0) or 0) >= LONG_BACKOFF, 150, what="a long backoff")
        assert ctx.pool.connect_probe.shut_roles() == ["primary"]
        # When the namespace takes connections again
        ns.control.restore()
        restored_at = _redis_now(client)
        not_before = retry.all_not_before(ENTITY)

        # Then the outbox is empty long before the backoff would have let the shard try
        def empty() -> bool:
            return int(client.hget(outbox_keys.stats(ENTITY), "messages") or 0) == 0

        wait_until(empty, LONG_BACKOFF / 2, what="the outbox drained before the backoff's end")
        assert _redis_now(client) < min(not_before.values()), (restored_at, not_before)
        assert client.xlen(state_keys.NAMESPACE_BACK) >= 1  # and its success was announced to every worker
        got = receive_all(ns, ENTITY, 3, timeout=30)
        assert [int((m.application_properties or {})[b"i"]) for m in got] == [0, 1, 2]
    finally:
        service.stop()
        client.close()


def test_the_door_watch_makes_the_links_of_the_other_backing_off_shards_before_the_news(
    redis_url: str,
    namespace_factory: Callable[..., LocalNamespace],
    contexts: list[DeliveryContext],
) -> None:
    """Two entities back off; when the address accepts again one shard tries, and the other's link is made
    meanwhile rather than after that try's news. The namespace holds every transfer for 4 s after the
    restore (its stall fault), so the one try cannot succeed — and announce anything — before we look."""
    ns = namespace_factory("primary", auto_create=True)
    other = f"{ENTITY}-b"
    modes = {ENTITY: {"replication": "none"}, other: {"replication": "none"}}
    settings = _no_scout(redis_url, modes, ns, attempt_deadline=10, lease_ttl=15)
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    retry = RetryStore(client)
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    entities = [ENTITY, other]
    try:
        with Producer(settings=settings) as producer:
            # Given both entities seen working, then messages waiting for each through an outage
            for entity in entities:
                producer.send(entity, b"before")
            assert all(len(receive_all(ns, entity, 1, timeout=30)) == 1 for entity in entities)
            ns.control.outage()
            for entity in entities:
                producer.send(entity, f"{entity}-held".encode())

        def backing_off() -> bool:
            return all((retry.backoff_left(entity, 0) or 0) >= LONG_BACKOFF for entity in entities)

        wait_until(backing_off, 150, what="both shards backing off for long")
        assert ctx.pool.sender_paths("primary") == []
        # When the address accepts connections again, its transfers held for 4 s
        ns.control.restore()
        for entity in entities:
            ns.control.stall(4.0, entity=entity)
        # Then both links are made before any news that the namespace is back
        wait_until(
            lambda: sorted(ctx.pool.sender_paths("primary")) == sorted(entities), 3, what="both links made"
        )
        assert client.xlen(state_keys.NAMESPACE_BACK) == 0
        # ... and once the transfers go through, both outboxes empty and each message arrives once
        for entity in entities:
            ns.control.restore(entity)

        def empty() -> bool:
            return all(int(client.hget(outbox_keys.stats(e), "messages") or 0) == 0 for e in entities)

        wait_until(empty, 30, what="both outboxes drained")
        for entity in entities:
            got = receive_all(ns, entity, 1, timeout=30)
            assert [b"".join(m.body) for m in got] == [f"{entity}-held".encode()]
    finally:
        service.stop()
        client.close()


def test_a_backoff_ends_early_only_on_news_of_a_namespace_it_waits_for(
    redis_url: str,
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
    contexts: list[DeliveryContext],
) -> None:
    """A shard of a ``none`` entity backs off while the primary is down: news that the secondary is back
    (for another entity) is news of a namespace it never sends to and leaves it be; news that the primary
    is back, even for another entity, has it try at once."""
    primary, secondary = namespace_pair
    entities = {
        ENTITY: {"replication": "none", "outbox_shards": "1"},
        "other": {"replication": "passive", "outbox_shards": "1"},
    }
    # One long draw (up to 1,000 s, at least LONG_BACKOFF in 49 runs of 50), and no door watch: only news
    # ends the backoff early.
    long_draw: dict[str, float | None] = {
        "outbox_backoff_factor": 1000,
        "outbox_backoff_max": 1000,
        "outbox_door_watch": None,
    }
    settings = _no_scout(redis_url, entities, primary, secondary, retry=long_draw)
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    retry = RetryStore(client)
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    # Given the primary down and the entity's shard backing off for a long time
    primary.control.outage()
    with Producer(settings=settings) as producer:
        producer.send(ENTITY, b"m0")
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        wait_until(lambda: (retry.backoff_left(ENTITY, 0) or 0) >= LONG_BACKOFF, 120, what="a long backoff")
        tries = retry.attempts(ENTITY, 0)
        # When the secondary is announced back for another entity
        ctx.seen_back("secondary", "other", "a test announced it")
        # Then the shard does not try (a try would count one more failure: the primary is still down)
        time.sleep(6)
        left = retry.backoff_left(ENTITY, 0) or 0
        assert left > 0 and retry.attempts(ENTITY, 0) == tries, (left, retry.attempts(ENTITY, 0), tries)
        # When the primary is announced back (for another entity: the outage is the namespace's)
        ends_at = _redis_now(client) + left
        ctx.seen_back("primary", "other", "a test announced it")
        # Then the shard tries at once, long before its backoff ran out (and fails again: it is still down)
        wait_until(lambda: retry.attempts(ENTITY, 0) > tries, 30, what="the shard tried again")
        assert _redis_now(client) < ends_at
    finally:
        service.stop()
        client.close()
