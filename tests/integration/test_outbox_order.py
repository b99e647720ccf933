"""Order per key through the Redis door and through a change of ``outbox_shards``.

Real Redis (the session's private server); the outbox is read the way the drainers read it. No Service
Bus here: ``test_workers_order.py`` checks the same cases end to end with the order checker.
"""

from __future__ import annotations

import redis

from bridge import Producer
from bridge.errors import BackpressureError
from bridge.outbox import keys
from bridge.outbox.layout import LayoutStore
from bridge.outbox.reader import OutboxReader
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.redis.connection import sync_client
from bridge.settings import Settings
from tests.integration.outbox_support import shard_lease


def _take_all(reader: OutboxReader, entity: str) -> list[bytes]:
    """Read and acknowledge everything the outbox holds now (as a worker that delivered it would)."""
    bodies: list[bytes] = []
    reader.ensure_groups(entity)
    for shard in range(reader.shards(entity)):
        with shard_lease(reader, entity, shard, "worker") as fence:
            entries = reader.read_fenced(entity, shard, "worker", fence, 1000).entries
            bodies.extend(e.envelope.body for e in entries if e.envelope is not None)
            reader.ack(entity, shard, [e.entry_id for e in entries], fence=fence)
    return bodies


def test_redis_door_entries_refused_by_backpressure_are_moved_before_newer_ones(
    redis_url: str, redis_client: redis.Redis
) -> None:
    settings = Settings(redis_url=redis_url, entities={"tiny": {"max_pending_messages": 3}})
    outbox = SyncOutbox(sync_client(redis_url), settings)
    reader = OutboxReader(sync_client(redis_url), settings)
    stream = keys.ingress("tiny")
    for i in range(8):
        redis_client.xadd(stream, {"body": f"k{i}", "session_id": "s"})
    moved: list[bytes] = []
    # Given a mover that moved two entries, then had the next two refused by backpressure
    assert move_ingress(outbox, "tiny", consumer="mover", now=1.0, count=2).moved == 2
    try:
        move_ingress(outbox, "tiny", consumer="mover", now=1.0, count=2)
        raise AssertionError("expected backpressure")
    except BackpressureError:
        pass
    # When the outbox drains and the door moves on, at once (no idle time passes)
    for _ in range(10):
        moved += _take_all(reader, "tiny")
        move_ingress(outbox, "tiny", consumer="mover", now=2.0, count=2)
    moved += _take_all(reader, "tiny")
    # Then the refused entries went first: the session's order is the stream's
    assert moved == [f"k{i}".encode() for i in range(8)]
    assert redis_client.xlen(stream) == 0


def test_one_redis_door_mover_per_entity(redis_url: str, redis_client: redis.Redis) -> None:
    settings = Settings(redis_url=redis_url)
    outbox = SyncOutbox(sync_client(redis_url), settings)
    redis_client.xadd(keys.ingress("orders"), {"body": "x"})
    # Given another mover holding the entity's lease
    redis_client.set(keys.ingest_lease("orders"), "other-mover", px=30_000)
    # Then a second mover moves nothing; once the lease is free it moves the entry
    assert move_ingress(outbox, "orders", consumer="second", now=1.0).moved == 0
    redis_client.delete(keys.ingest_lease("orders"))
    assert move_ingress(outbox, "orders", consumer="second", now=1.0).moved == 1


def test_a_shard_count_change_keeps_every_key_in_order_and_strands_nothing(redis_url: str) -> None:
    def settings(shards: int) -> Settings:
        return Settings(redis_url=redis_url, entities={"orders": {"outbox_shards": shards}})

    client = sync_client(redis_url)
    layouts = LayoutStore(client)
    keys_ = [f"s{k}" for k in range(12)]
    sent: dict[str, list[bytes]] = {k: [] for k in keys_}
    got: dict[str, list[bytes]] = {k: [] for k in keys_}

    def produce(producer: Producer, phase: str) -> None:
        for k in keys_:
            for i in range(3):
                body = f"{k}:{phase}{i}".encode()
                producer.send("orders", body, session_id=k)
                sent[k].append(body)

    def drain_shard(reader: OutboxReader, shard: int) -> None:
        # One drainer's turn on one shard, as ``ShardDrainer`` does it: what is pending, then what is new,
        # and of those the entries that may go now.
        with shard_lease(reader, "orders", shard, "w") as fence:
            entries = reader.claim_fenced("orders", shard, "w", fence, count=1000)
            entries += reader.read_fenced("orders", shard, "w", fence, 1000).entries
            entries = sorted(
                {e.entry_id: e for e in entries}.values(),
                key=lambda e: tuple(map(int, e.entry_id.split("-"))),
            )
            layout = layouts.get("orders")
            go = []
            for entry in entries:
                if layout is not None and layout.must_wait(shard, entry.entry_id):
                    if not layouts.finish_if_drained("orders", layout):
                        break
                    layout = layouts.get("orders")
                go.append(entry)
            for entry in go:
                assert entry.envelope is not None and entry.envelope.session_id is not None
                got[entry.envelope.session_id].append(entry.envelope.body)
            reader.ack("orders", shard, [e.entry_id for e in go], fence=fence)

    # Given an outbox of 2 shards with entries in both
    with Producer(settings=settings(2)) as old_writer:
        produce(old_writer, "a")
        # When the settings say 4 (the sweeper starts the migration) and a writer that still has the old
        # settings keeps writing
        layout = layouts.follow_settings("orders", 4)
        assert layout is not None and layout.shards == 4 and layout.previous == 2
        produce(old_writer, "b")
    reader = OutboxReader(client, settings(4))
    reader.ensure_groups("orders")
    assert reader.shards("orders") == 4
    # And the new shards are drained first (the worst case), then the old ones, in turns
    for _ in range(3):
        for shard in (3, 2, 1, 0):
            drain_shard(reader, shard)
    # Then every key's messages came out in the order they were written, and nothing is left
    assert got == sent
    assert not layouts.get("orders").migrating  # type: ignore[union-attr]
    # When the count goes down to 1 under more traffic
    with Producer(settings=settings(4)) as writer:
        produce(writer, "c")
        layouts.follow_settings("orders", 1)
        produce(writer, "d")
    for _ in range(3):
        for shard in range(4):
            drain_shard(reader, shard)
        layouts.follow_settings("orders", 1)
    # Then the higher shards were still read until empty, and order held
    assert got == sent
    assert reader.shards("orders") == 1
    assert sum(client.xlen(keys.outbox("orders", i)) for i in range(4)) == 0
