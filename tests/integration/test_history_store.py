"""The status history's Redis side on a real server: one claim per slot, the window's trim, the latency
histograms, and two samplers that take turns instead of sampling a slot twice."""

from __future__ import annotations

import hashlib

import httpx
import redis

from bridge.core.history import EntitySample, Sample, slot_of
from bridge.embedded.stack import wait_until
from bridge.observability.history import HistorySampler
from bridge.observability.snapshot import StateReader
from bridge.redis.clock import server_time
from bridge.settings import load_settings
from bridge.state.history import SAMPLES, HistoryStore, LatencyStore
from tests.integration.ingress_support import running_ingress


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


def test_the_ingress_serves_the_history_and_the_charting_library(redis_url: str) -> None:
    # Given an ingress that requires API keys and samples every 0.2 s
    key = "status-key"
    settings = load_settings(
        redis_url=redis_url,
        entities={"orders": {}},
        status_history={"interval": 0.2, "window": 60},
        ingress={"api_keys": [{"name": "ops", "sha256": hashlib.sha256(key.encode()).hexdigest()}]},
    )
    with running_ingress(settings, require_auth=True, sample_history=True) as url:
        # Then the page's assets need no key and no network: the library and its licence come from the ingress
        library = httpx.get(f"{url}/status/assets/uplot/uPlot.iife.min.js", timeout=10)
        assert library.status_code == 200 and "uPlot" in library.text
        assert "MIT" in httpx.get(f"{url}/status/assets/uplot/LICENSE", timeout=10).text
        assert httpx.get(f"{url}/status/assets/status/page.js", timeout=10).status_code == 200
        # And the history needs a key, like status.json
        assert httpx.get(f"{url}/status/history.json", timeout=10).status_code == 401
        history = wait_until(
            lambda: (
                (h := httpx.get(f"{url}/status/history.json", headers={"x-api-key": key}, timeout=10).json())
                and len(h["times"]) >= 3
                and h
            ),
            20,
            0.2,
            "three samples",
        )
        assert history["interval"] == 0.2 and history["enabled"] is True
        assert set(history["entities"]["orders"]) >= {"accepted", "depth", "latency_p99"}
        status = httpx.get(f"{url}/status.json", headers={"x-api-key": key}, timeout=10).json()
        assert status["summary"]["level"] == "ok" and status["summary"]["text"].startswith("all healthy")
        assert status["errors"] == []
