"""Producer, Redis door and the workers' reader against real Redis servers (private, AOF)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from bridge import AsyncProducer, Producer
from bridge.core.door_formats import door_message_id, redis_door_message
from bridge.core.envelope import Envelope
from bridge.core.validation import EntityRules, build_envelope
from bridge.embedded.redis_server import RedisServer
from bridge.errors import BackpressureError, InvalidMessageError, OutboxUnavailableError
from bridge.outbox import keys
from bridge.outbox.problems import list_problems
from bridge.outbox.reader import OutboxReader, entry_size
from bridge.outbox.redis_door import ensure_ingress_group, move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.redis.connection import sync_client
from bridge.settings import Settings
from tests.integration.ingress_support import read_all, snapshot
from tests.integration.outbox_support import read_new, shard_lease


def _settings(url: str) -> Settings:
    return Settings(
        redis_url=url,
        entities={
            "orders": {"outbox_shards": 2, "requires_duplicate_detection": True},
            "tiny": {"max_pending_bytes": 500},
        },
    )


def test_producer_round_trip_with_python_types(redis_url: str):
    settings = _settings(redis_url)
    props = {
        "u": uuid.UUID(int=5),
        "when": datetime(2030, 1, 1, tzinfo=UTC),
        "raw": b"\x00\xff",
        "n": -3,
        "t": timedelta(seconds=2),
    }
    with Producer(settings=settings) as producer:
        message_id = producer.send(
            "orders",
            b"\x00body",
            session_id="s",
            time_to_live=timedelta(minutes=5),
            application_properties=props,
        )
    reader = OutboxReader(sync_client(redis_url), settings)
    reader.ensure_groups("orders")
    (entry,) = read_all(reader, "orders", "w1")
    assert entry.envelope is not None
    assert entry.envelope.message_id == message_id
    assert entry.envelope.body == b"\x00body"
    assert entry.envelope.time_to_live == 300
    assert entry.envelope.application_properties == props


def test_producer_batch_is_atomic_and_indexed(redis_url: str, redis_client: redis.Redis):
    with Producer(settings=_settings(redis_url)) as producer:
        producer.send("orders", "seed")
        before = snapshot(redis_client)
        with pytest.raises(InvalidMessageError) as caught:
            producer.send_batch("orders", ["a", {"body": "b", "message_id": "x" * 129}, "c"])
        assert (caught.value.code, caught.value.index) == ("message_id_too_long", 1)
        assert snapshot(redis_client) == before


def test_producer_idempotency_and_duplicate_detection_key(redis_url: str, redis_client: redis.Redis):
    with Producer(settings=_settings(redis_url)) as producer:
        ids = producer.send_batch(
            "orders", [{"body": "a", "message_id": "same"}, {"body": "b", "message_id": "same"}]
        )
        assert ids == ["same", "same"]
        producer.send("orders", "c", message_id="same")
    total = redis_client.xlen(keys.outbox("orders", 0)) + redis_client.xlen(keys.outbox("orders", 1))
    assert total == 1


def test_producer_backpressure_in_bytes(redis_url: str, redis_client: redis.Redis):
    with Producer(settings=_settings(redis_url)) as producer:
        producer.send("tiny", b"x" * 300)
        before = snapshot(redis_client)
        with pytest.raises(BackpressureError) as caught:
            producer.send("tiny", b"x" * 300)
        assert caught.value.retry_after == 1.0
        assert snapshot(redis_client) == before


def test_async_producer(redis_url: str, redis_client: redis.Redis):
    async def scenario() -> list[str]:
        async with AsyncProducer(settings=_settings(redis_url)) as producer:
            first = await producer.send("orders", "a", partition_key="k")
            rest = await producer.send_batch("orders", ["b", "c"], transactional=True)
            return [first, *rest]

    ids = asyncio.run(scenario())
    assert len(set(ids)) == 3
    assert redis_client.hget(keys.stats("orders"), "messages") == b"3"


def test_acknowledged_messages_survive_a_crash_and_restart(tmp_path):
    # Given a Redis with AOF, appendfsync always, and messages the producer got an answer for
    with RedisServer(data_dir=tmp_path / "redis") as server:
        settings = _settings(server.url)
        producer = Producer(settings=settings)
        acknowledged = [producer.send("orders", f"m{i}") for i in range(50)]
        # When redis-server is killed -9 and started again on the same data
        server.kill()
        with pytest.raises(OutboxUnavailableError):
            producer.send("orders", "while down")
        server.start()
        # Then every acknowledged message is in the outbox, readable by a worker
        reader = OutboxReader(sync_client(server.url), settings)
        reader.ensure_groups("orders")
        stored = [entry.envelope.message_id for entry in read_all(reader, "orders", "w") if entry.envelope]
        assert sorted(stored) == sorted(acknowledged)
        # And the idempotency markers survived too: re-sending one adds nothing
        producer.send("orders", "again", message_id=acknowledged[0])
        assert reader.depth("orders")["pending_messages"] == 50
        producer.close()


def test_reader_ack_reclaim_and_dead_letter(redis_url: str, redis_client: redis.Redis):
    settings = Settings(redis_url=redis_url)
    with Producer(settings=settings) as producer:
        producer.send_batch("q", ["a", "b", "c"])
    reader = OutboxReader(sync_client(redis_url), settings)
    reader.ensure_groups("q")
    reader.ensure_groups("q")  # idempotent
    first = read_new(reader, "q", 0, "crashing-worker", count=10)
    assert [e.envelope.body for e in first if e.envelope] == [b"a", b"b", b"c"]
    assert read_new(reader, "q", 0, "other", count=10) == []
    # The first worker "crashes": its entries stay pending; the next lease holder takes whatever is
    # pending, oldest first, whoever read it
    with shard_lease(reader, "q", 0, "next-holder") as fence:
        reclaimed = reader.claim_fenced("q", 0, "next-holder", fence)
        assert [e.entry_id for e in reclaimed] == [e.entry_id for e in first]
        assert reader.claim_fenced("q", 0, "next-holder", fence, count=2) == reclaimed[:2]
        removed = reader.ack("q", 0, [reclaimed[0].entry_id], fence=fence)
        assert removed[0] == 1
        assert reader.ack("q", 0, [reclaimed[0].entry_id], fence=fence) == (0, 0)  # a second ack is harmless
        reader.move(
            reclaimed[1],
            to="deadletter",
            code="message_size_exceeded",
            reason="too big for the namespace",
            now=5.0,
            source="sender",
            fence=fence,
        )
    assert reader.depth("q") == {
        "pending_messages": 1,
        "pending_bytes": reader.depth("q")["pending_bytes"],
        "quarantine": 0,
        "deadletter": 1,
        "ingress": 0,
    }
    (dead,) = list_problems(redis_client, "q", "deadletter")
    assert dead["code"] == "message_size_exceeded"
    assert dead["original"]["b"] == "b"
    assert redis_client.hget(keys.TOTALS, "messages") == b"1"
    assert reader.entities() == ["q"]


def test_a_sized_ack_uncounts_what_the_writer_counted_once(redis_url: str, redis_client: redis.Redis):
    """The drainer passes each entry's size instead of Redis reading it back: the counters end where an
    ack that reads the entries leaves them, and a second ack (after a crash) counts nothing."""
    settings = Settings(redis_url=redis_url)
    with Producer(settings=settings) as producer:
        producer.send_batch("q", [b"x" * 700, "b", {"body": "c", "session_id": "s", "content_type": "t"}])
        producer.send_batch("r", [b"x" * 700, "b", {"body": "c", "session_id": "s", "content_type": "t"}])
    reader = OutboxReader(sync_client(redis_url), settings)
    for entity in ("q", "r"):
        reader.ensure_groups(entity)
    with shard_lease(reader, "q", 0, "holder") as q_fence, shard_lease(reader, "r", 0, "holder") as r_fence:
        q = reader.read_fenced("q", 0, "holder", q_fence, 10).entries
        r = reader.read_fenced("r", 0, "holder", r_fence, 10).entries
        read_back = reader.ack("q", 0, [e.entry_id for e in q], fence=q_fence)
        ids, sizes = [e.entry_id for e in r], [entry_size(e.fields) for e in r]
        assert reader.ack("r", 0, ids[:1], fence=r_fence, sizes=sizes[:1])[0] == 1
        rest = reader.ack("r", 0, ids, fence=r_fence, sizes=sizes)  # the first one again: not counted
        assert reader.ack("r", 0, ids, fence=r_fence, sizes=sizes) == (0, 0)
    assert read_back[0] == 3 and rest[0] == 2
    # The sizes the drainer passes are what Redis reads back (per entity: two entities' entries differ in
    # length by their timestamps' and ids' digits), and the second ack counted only the two not yet counted
    assert read_back[1] == sum(entry_size(e.fields) for e in q)
    assert rest[1] + sizes[0] == sum(sizes)
    assert reader.depth("r")["pending_bytes"] == reader.depth("q")["pending_bytes"] == 0
    assert redis_client.hget(keys.TOTALS, "bytes") == b"0"
    assert redis_client.xpending(keys.outbox("r", 0), keys.SENDERS_GROUP)["pending"] == 0


def test_reader_quarantines_a_corrupt_entry(redis_url: str, redis_client: redis.Redis):
    settings = Settings(redis_url=redis_url)
    reader = OutboxReader(sync_client(redis_url), settings)
    reader.ensure_groups("q")
    redis_client.xadd(keys.outbox("q", 0), {"v": "9", "id": "x"})
    with shard_lease(reader, "q", 0, "w") as fence:
        (entry,) = reader.read_fenced("q", 0, "w", fence, 10).entries
        assert entry.envelope is None
        assert entry.error is not None
        reader.move(
            entry, to="quarantine", code="corrupt_entry", reason=str(entry.error), now=1.0, fence=fence
        )
    assert redis_client.xlen(keys.outbox("q", 0)) == 0
    assert list_problems(redis_client, "q", "quarantine")[0]["original"] == {"v": "9", "id": "x"}


def test_redis_door_moves_valid_entries_and_quarantines_bad_ones(redis_url: str, redis_client: redis.Redis):
    settings = _settings(redis_url)
    # Given an application XADDs to the documented ingress stream, including two bad entries
    stream = keys.ingress("orders")
    redis_client.xadd(stream, {"body": "good", "message_id": "g1", "session_id": "s", "time_to_live": "60"})
    redis_client.xadd(stream, {"body": "bad ttl", "time_to_live": "-1"})
    redis_client.xadd(stream, {"body": "no id", "application_properties": '{"a": 1}'})
    redis_client.xadd(stream, {"body": "x", "colour": "red"})
    # When the door's task runs
    outbox = SyncOutbox(sync_client(redis_url), settings)
    report = move_ingress(outbox, "orders", consumer="mover", now=10.0)
    # Then the valid ones are in the outbox, the bad ones in quarantine with the reason, the stream is empty
    assert (report.moved, report.quarantined) == (2, 2)
    assert redis_client.xlen(stream) == 0
    reasons = {p["code"]: p for p in list_problems(redis_client, "orders", "quarantine")}
    assert set(reasons) == {"time_to_live_not_positive", "unknown_field"}
    assert reasons["unknown_field"]["field"] == "colour"
    assert reasons["time_to_live_not_positive"]["original"]["body"] == "bad ttl"
    reader = OutboxReader(sync_client(redis_url), settings)
    reader.ensure_groups("orders")
    bodies = sorted(e.envelope.body for e in read_all(reader, "orders", "w") if e.envelope)
    assert bodies == [b"good", b"no id"]
    assert move_ingress(outbox, "orders", consumer="mover", now=11.0).moved == 0


def test_redis_door_replay_after_a_crash_does_not_duplicate(redis_url: str, redis_client: redis.Redis):
    settings = _settings(redis_url)
    stream = keys.ingress("orders")
    for i in range(5):
        redis_client.xadd(stream, {"body": f"m{i}"})
    outbox = SyncOutbox(sync_client(redis_url), settings)
    # Given a mover that read the entries and wrote them to the outbox, then died before acknowledging them
    ensure_ingress_group(redis_client, "orders")
    ((_, pending),) = redis_client.xreadgroup(keys.INGRESS_GROUP, "crashed", {stream: ">"})
    envelopes = []
    for entry_id, fields in pending:
        body, props = redis_door_message(fields, door_message_id("orders", entry_id.decode()))
        envelopes.append(build_envelope("orders", body, props, rules=EntityRules(), now=1.0, new_id=str))
    outbox.write([outbox.writer.group("orders", envelopes)])
    assert redis_client.hget(keys.stats("orders"), "messages") == b"5"
    # When another mover reclaims the crashed mover's pending entries
    report = move_ingress(outbox, "orders", consumer="second", now=2.0, reclaim_idle_ms=0)
    # Then it recognises every message as stored already, acknowledges them, and the outbox holds each once
    assert (report.moved, report.duplicates) == (0, 5)
    assert redis_client.hget(keys.stats("orders"), "messages") == b"5"
    assert redis_client.xlen(stream) == 0
    assert redis_client.xpending(stream, keys.INGRESS_GROUP)["pending"] == 0


def test_redis_door_backpressure_leaves_entries_for_later(redis_url: str, redis_client: redis.Redis):
    settings = _settings(redis_url)
    stream = keys.ingress("tiny")
    redis_client.xadd(stream, {"body": "x" * 300})
    redis_client.xadd(stream, {"body": "y" * 300})
    outbox = SyncOutbox(sync_client(redis_url), settings)
    with pytest.raises(BackpressureError):
        move_ingress(outbox, "tiny", consumer="m", now=1.0)
    assert redis_client.xlen(stream) == 2
    assert redis_client.exists(keys.outbox("tiny", 0)) == 0


def test_the_write_script_stores_exactly_the_documented_layout(redis_url: str):
    # Given messages with and without optional fields, one of them repeated in the batch
    settings = _settings(redis_url)
    messages: list[bytes | dict[str, object]] = [
        b"plain",
        {"body": b"props", "message_id": "m-2", "partition_key": "k", "subject": "s", "time_to_live": 9},
        {"body": "again", "message_id": "m-2"},
        {"body": b"", "application_properties": {"a": 1}, "content_type": "x/y"},
    ]
    with Producer(settings=settings) as producer:
        ids = producer.send_batch("orders", messages)
    # When the entries are read back as Redis holds them (field order included)
    client = redis.Redis.from_url(redis_url)
    stored = [
        [item for pair in fields.items() for item in pair]
        for shard in range(2)
        for _, fields in client.xrange(keys.outbox("orders", shard))
    ]
    stats = client.hgetall(keys.stats("orders"))
    # Then each entry is exactly Envelope.encode_flat of what it decodes to, the duplicate is stored once,
    # and the bytes the bounds count are the entries' field name and value lengths (what ACK subtracts)
    assert len(stored) == 3
    assert sorted(flat[3].decode() for flat in stored) == sorted(set(ids))
    for flat in stored:
        assert Envelope.decode(dict(zip(flat[::2], flat[1::2], strict=True))).encode_flat() == flat
    assert int(stats[b"messages"]) == 3
    assert int(stats[b"bytes"]) == sum(len(item) for flat in stored for item in flat)
