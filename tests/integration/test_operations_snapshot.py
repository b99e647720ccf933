"""The state snapshot and its collector against a real Redis: oldest outbox age, Redis down."""

from __future__ import annotations

import time

import redis
from prometheus_client import generate_latest

from bridge import Producer
from bridge.core.paired import EngageFailover, MarkAvailable, RecordError
from bridge.embedded.ports import free_port
from bridge.settings import Settings
from bridge.state.paired import PairedStore
from bridge.status.collector import StateCollector
from bridge.status.snapshot import StateReader, collect_snapshot
from tests.integration.operations_support import Scrape


def test_oldest_age_is_the_age_of_the_oldest_message_still_in_the_outbox(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, entities={"orders": {"outbox_shards": 3}})
    with Producer(redis_url) as producer:
        producer.send("orders", b"first", partition_key="a")
        time.sleep(0.5)
        for key in "bcdef":
            producer.send("orders", b"later", partition_key=key)
    reader = StateReader(settings, backlog=False)
    snapshot = collect_snapshot(settings, reader.client())
    orders = next(e for e in snapshot["entities"] if e["name"] == "orders")
    assert orders["outbox_depth"] == 6
    assert 0.5 <= orders["outbox_oldest_age"] < 30
    assert orders["receiver"]["handled"] == 0
    scrape = Scrape(generate_latest(StateCollector(reader)).decode())
    assert scrape.value("bridge_state_up") == 1
    assert scrape.value("bridge_outbox_messages", entity="orders") == 6
    assert scrape.value("bridge_outbox_oldest_age_seconds", entity="orders") >= 0.5


def test_a_scrape_while_redis_is_down_says_so_and_answers() -> None:
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0")
    scrape = Scrape(generate_latest(StateCollector(StateReader(settings, backlog=False))).decode())
    assert scrape.value("bridge_state_up") == 0
    assert "bridge_outbox_messages" not in scrape.names()


def test_a_paired_failover_stays_on_the_page_after_the_restore(
    redis_client: redis.Redis, redis_url: str
) -> None:
    settings = Settings(redis_url=redis_url, entities={"orders": {"replication": "paired"}})
    store = PairedStore(redis_client)
    store.apply("orders", [EngageFailover(100.0, "primary down"), RecordError(100.0, "primary down")])

    def last_failover() -> dict[str, object] | None:
        snapshot = collect_snapshot(settings, StateReader(settings, backlog=False).client())
        found: dict[str, object] | None = next(e for e in snapshot["entities"] if e["name"] == "orders")[
            "last_failover"
        ]
        return found

    assert last_failover() == {"at": 100.0, "kind": "paired", "reason": "primary down"}
    store.apply("orders", [MarkAvailable(200.0, "ping ok")])
    assert last_failover() == {"at": 100.0, "kind": "paired (restored)", "reason": "primary down"}
