"""The status history's Redis side on a real server: one claim per slot, the window's trim, the latency
histograms, and two samplers that take turns instead of sampling a slot twice."""

from __future__ import annotations

import redis

from bridge.core.history import EntitySample, Sample, slot_of
from bridge.observability.history import HistorySampler
from bridge.observability.snapshot import StateReader
from bridge.redis.clock import server_time
from bridge.settings import load_settings
from bridge.state.history import SAMPLES, HistoryStore, LatencyStore


def _sample(at: float, depth: int = 0) -> Sample:
    entity = EntitySample(1, 1, 0, depth, 0.0, (), "primary", False, {"primary": True})
    return Sample(at, {"orders": entity})


def test_exactly_one_claim_per_slot(redis_client: redis.Redis) -> None:
    first, second = HistoryStore(redis_client, 60, 10), HistoryStore(redis_client, 60, 10)
    assert first.claim(100) is True
    assert second.claim(100) is False  # the same slot, another process
    assert second.claim(99) is False  # an older slot (a process whose clock read late)
    assert second.claim(101) is True and first.claim(101) is False


def test_append_keeps_the_window_and_the_count(redis_client: redis.Redis) -> None:
    store = HistoryStore(redis_client, window=20, most=3)
    for at in (0.0, 5.0, 10.0, 15.0, 20.0, 25.0):
        store.append(_sample(at, depth=int(at)))
    # By time: 25 - 20 keeps 5.0 and later; by count: the newest 3
    assert [s.at for s in store.samples()] == [15.0, 20.0, 25.0]
    assert [s.entities["orders"].depth for s in store.samples(since=20.0)] == [20, 25]
    assert redis_client.pttl(SAMPLES) > 0  # gone when nobody samples any more
    assert (store.memory() or 0) > 0


def test_latency_histograms_add_up_across_workers(redis_client: redis.Redis) -> None:
    store = LatencyStore(redis_client)
    store.record("orders", {0: 2, 5: 1})
    LatencyStore(redis_client).record("orders", {5: 3})
    store.record("orders", {})
    got = store.histograms(["orders", "payments"])
    assert got["orders"][:6] == (2, 0, 0, 0, 0, 4) and sum(got["orders"]) == 6
    assert sum(got["payments"]) == 0


def test_two_samplers_store_one_sample_per_slot(redis_url: str, redis_client: redis.Redis) -> None:
    # Given two processes' samplers on one Redis (no namespaces: the state is read from Redis alone)
    settings = load_settings(redis_url=redis_url, entities={"orders": {}}, status_history={"interval": 60})
    samplers = [HistorySampler(settings, StateReader(settings, backlog=False)) for _ in range(2)]
    # When both tick in the same slot (unless the slot turns between them: then each samples its own)
    slot = slot_of(server_time(redis_client), 60)
    waits = [s.tick() for s in samplers]
    stored = samplers[0].store().samples()
    if slot_of(server_time(redis_client), 60) == slot:
        # Then one sampled it and the other skipped it
        assert sorted(s.sampled for s in samplers) == [0, 1]
        assert [s.at for s in stored] == [slot * 60.0]
    assert all(0 < w <= 60 for w in waits)
    (sample, *_) = stored
    assert sample.entities["orders"].accepted in (0, None) and sample.redis is not None
