"""Reads of several stores on one pipeline against a real Redis: each store's reader parses its own replies,
and the batch costs one round trip (the status snapshot's reads, ``bridge.status.snapshot``)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge import Producer
from bridge.core.syphon import syphon_lease_name
from bridge.embedded.ports import free_port
from bridge.errors import StateStoreUnavailableError
from bridge.outbox.view import oldest_written
from bridge.receiving.counters import ReceiverCounterStore, counts_read
from bridge.receiving.keys import ReceiverKeys
from bridge.redis.connection import sync_client
from bridge.redis.lease import Lease, named_holders
from bridge.redis.pipelined import ReadBatch
from bridge.redis.types import SyncRedis
from bridge.settings import Settings
from bridge.status.snapshot import entity_extras, syphon_state


class CountedClient:
    """The real client, counting the pipelines it runs (one ``execute``: one round trip)."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client
        self.round_trips = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self.client.pipeline(*args, **kwargs)
        execute = pipe.execute

        def counted(*a: Any, **k: Any) -> Any:
            self.round_trips += 1
            return execute(*a, **k)

        pipe.execute = counted
        return pipe


def test_the_reads_of_three_stores_cost_one_round_trip(redis_url: str) -> None:
    client = sync_client(redis_url)
    with Producer(redis_url) as producer:
        producer.send("orders", b"one", partition_key="a")
    ReceiverCounterStore(client, ReceiverKeys("orders")).add({"handled": 2})
    Lease.named(client, syphon_lease_name("ns/x-servicebus-transfer/1")).acquire("syphon-7", 30_000)
    counted = CountedClient(client)

    batch = ReadBatch(counted)  # type: ignore[arg-type]  # the real client, counted
    oldest = batch.add(oldest_written("orders", 4))
    counts = batch.add(counts_read("orders"))
    names = [syphon_lease_name(f"ns/x-servicebus-transfer/{i}") for i in range(2)]
    holders = batch.add(named_holders(names))
    with pytest.raises(RuntimeError):
        _ = counts.value
    batch.execute()

    assert counted.round_trips == 1
    assert oldest.value is not None and oldest.value > 0
    assert counts.value.handled == 2
    assert holders.value == {names[1]: "syphon-7"}
    client.close()


def test_the_status_extras_read_through_the_stores_in_one_round_trip_each(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, entities={"orders": {"outbox_shards": 3}})
    client = sync_client(redis_url)
    ReceiverCounterStore(client, ReceiverKeys("orders")).add({"handled": 5})
    queues = ["ns/x-servicebus-transfer/0", "ns/x-servicebus-transfer/1"]
    Lease.named(client, syphon_lease_name(queues[0])).acquire("syphon-1", 30_000)
    counted = CountedClient(client)

    extras = entity_extras(settings, counted, "orders", now=1000.0)
    syphon = syphon_state(settings, counted, queues)

    assert counted.round_trips == 2
    assert extras == {"outbox_oldest_age": 0.0, "receiver": {**extras["receiver"], "handled": 5}}
    assert syphon["running"] == {queues[0]: "syphon-1"}
    assert syphon_state(settings, counted, [])["running"] == {}
    assert counted.round_trips == 2  # no queue, no round trip
    client.close()


def test_a_batch_on_an_unreachable_redis_raises_the_store_error() -> None:
    client = sync_client(f"redis://127.0.0.1:{free_port()}/0")
    batch = ReadBatch(client)
    batch.add(counts_read("orders"))
    with pytest.raises(StateStoreUnavailableError):
        batch.execute()
    client.close()
