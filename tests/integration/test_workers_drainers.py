"""Event-driven drainers: shards are read as soon as entries arrive, by one reader at a time.

Real parts throughout: a ``bridge worker`` process with no beat (so no sweep ever runs), drain services and
drain runs in this process against the session's private Redis and the shared local namespace, fenced
scripts checked against a lease that really passed to another holder.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, Self

import pytest
import redis

from bridge.core.decisions import SECONDARY
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import READ_COUNT, ShardDrainer
from bridge.delivery.lease_keeper import LeaseKeeper
from bridge.delivery.service import DrainService
from bridge.delivery.tenure import READ_BYTES
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.errors import LeaseLostError
from bridge.outbox import keys as outbox_keys
from bridge.producer import Producer
from bridge.settings import Settings
from bridge.state import keys as state_keys
from bridge.state.retry import encode_targets
from tests.integration.outbox_support import read_new
from tests.integration.paired_support import active_all_settings, namespace_settings
from tests.integration.worker_support import make_stack, producer, receive_all

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(180)


def _send_many(p: Producer, entity: str, bodies: list[bytes]) -> list[str]:
    """Store ``bodies`` in order, as many producer batches as the ingress limit takes (1,000 each)."""
    return [mid for i in range(0, len(bodies), 1000) for mid in p.send_batch(entity, bodies[i : i + 1000])]


def _settings(
    redis_url: str,
    ns: LocalNamespace,
    entity: str,
    shards: int,
    lease_ttl: float = 5,
    replication: str = "none",
) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"outbox_shards": shards, "replication": replication}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            "workers": {"lease_ttl": lease_ttl},
        }
    )


@pytest.fixture
def contexts() -> Iterator[list[DeliveryContext]]:
    """Delivery contexts built by a test (each one a separate "process": its own identity); closed after."""
    built: list[DeliveryContext] = []
    yield built
    for ctx in built:
        ctx.close()


def _context(built: list[DeliveryContext], settings: Settings, identity: str) -> DeliveryContext:
    ctx = DeliveryContext.build(settings)
    ctx.identity = identity
    built.append(ctx)
    return ctx


def _consumers(client: redis.Redis, entity: str, shard: int) -> dict[str, int]:
    infos = client.xinfo_consumers(outbox_keys.outbox(entity, shard), outbox_keys.SENDERS_GROUP)
    return {info["name"].decode(): int(info["pending"]) for info in infos}


def _backoff(ctx: DeliveryContext, entity: str) -> float:
    left = ctx.retry.backoff_left(entity, 0)
    assert left is not None
    return left


def _pending(client: redis.Redis, entity: str) -> int:
    try:
        return int(client.xpending(outbox_keys.outbox(entity, 0), outbox_keys.SENDERS_GROUP)["pending"])
    except redis.ResponseError:  # no group yet
        return 0


def test_a_message_written_while_the_system_is_idle_is_sent_without_any_sweep(make_stack: Any) -> None:
    # Given a worker and no beat: no sweep, no drain task is ever queued
    stack = make_stack({"orders": {"outbox_shards": 2}})
    stack.start_worker()
    client = redis.Redis.from_url(stack.redis.url)
    try:
        # (the worker's drainers own both shards once they are up)
        wait_until(
            lambda: all(client.exists(state_keys.shard_lease("orders", s)) for s in (0, 1)),
            30,
            what="both shards owned",
        )
        time.sleep(1.0)  # idle: whatever the drainers do while nothing comes in, they are waiting now
        # When one message is written
        with producer(stack) as p:
            message_id = p.send("orders", b"hello", partition_key="k")
        # Then it reaches the namespace, and the outbox is empty again
        assert [m.message_id for m in receive_all(stack.primary, "orders", 1, timeout=20)] == [message_id]
        wait_until(lambda: int(client.hget(outbox_keys.stats("orders"), "messages") or 0) == 0, 10)
        assert client.llen("bridge") == 0  # nothing went through the Celery queue
    finally:
        client.close()


def test_one_reader_per_shard_while_drainers_and_drain_runs_compete(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, shards=2)
    client = redis.Redis.from_url(redis_url)
    stop = threading.Event()
    overlaps: list[dict[str, int]] = []
    samples = [0]

    def watch() -> None:
        # At any instant at most one consumer of a shard may have entries in flight (pending).
        while not stop.is_set():
            for shard in (0, 1):
                try:
                    busy = {n: p for n, p in _consumers(client, entity, shard).items() if p}
                except redis.ResponseError:  # the group does not exist yet
                    continue
                samples[0] += 1
                if len(busy) > 1:
                    overlaps.append(busy)
            time.sleep(0.001)

    def compete(index: int) -> None:
        # The sweeper's fallback path, triggered again and again: a bounded drain run of each shard.
        ctx = _context(contexts, settings, f"runner-{index}")
        while not stop.is_set():
            for shard in (0, 1):
                ShardDrainer(ctx, entity, shard).run(budget=0.3, idle_reads=1, block_ms=20)

    services = [
        DrainService(_context(contexts, settings, f"service-{i}"), tick=0.1, block_ms=200).start()
        for i in range(2)
    ]
    threads = [threading.Thread(target=watch)] + [
        threading.Thread(target=compete, args=(i,)) for i in range(2)
    ]
    for thread in threads:
        thread.start()
    late: DrainService | None = None
    sent: dict[str, list[int]] = defaultdict(list)
    try:
        with Producer(settings=settings) as p:
            for burst in range(20):
                if burst == 5:  # a third drainer joins: shards are handed over while traffic flows
                    late = DrainService(_context(contexts, settings, "service-late"), tick=0.1).start()
                if burst == 14 and late is not None:
                    late.stop()
                for n in range(20):
                    key = f"k{n % 6}"
                    i = burst * 20 + n
                    p.send(entity, f"m{i}".encode(), partition_key=key, application_properties={"i": i})
                    sent[key].append(i)
                time.sleep(0.05)
        got = receive_all(shared_namespace, entity, 400, timeout=60)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for service in services:
            service.stop()
        if late is not None:
            late.stop()
        client.close()
    # Then every message arrived once, in order per key, and no shard ever had two readers at once
    assert sorted(m.application_properties[b"i"] for m in got) == list(range(400))
    by_key: dict[str, list[int]] = defaultdict(list)
    for m in got:
        by_key[m.partition_key].append(m.application_properties[b"i"])
    assert by_key == sent
    assert {zlib.crc32(k.encode()) % 2 for k in sent} == {0, 1}  # both shards carried traffic
    assert samples[0] > 100
    assert overlaps == []


def test_the_consumer_group_stays_small_over_a_thousand_drains(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, shards=1)
    # Every drain comes from a different "process" (consumer name), as after 1,000 worker restarts
    ctx = _context(contexts, settings, "drainer")
    client = redis.Redis.from_url(redis_url)
    ids: list[str] = []
    largest = 0
    try:
        with Producer(settings=settings) as p:
            for run in range(1000):
                if run % 50 == 0:
                    ids.append(p.send(entity, f"m{run}".encode()))
                if run % 100 == 7:
                    # a drainer that read and died: its entry stays pending under its own name
                    ids.append(p.send(entity, f"crash{run}".encode()))
                    assert read_new(ctx.reader, entity, 0, f"crashed-{run}", count=10)
                report = ShardDrainer(ctx, entity, 0, consumer=f"process-{run}").run(
                    budget=5, idle_reads=1, block_ms=1
                )
                assert not report.busy
                largest = max(largest, len(_consumers(client, entity, 0)))
        consumers = _consumers(client, entity, 0)
    finally:
        client.close()
    # Then everything was delivered and at most the last drainer (or a crashed one, until the next drain
    # claims its entries) is left in the group
    got = receive_all(shared_namespace, entity, len(ids), timeout=30)
    assert sorted(m.message_id for m in got) == sorted(ids)
    assert largest <= 2
    assert consumers == {}


def test_a_drain_whose_lease_was_taken_over_cannot_read_ack_move_clear_or_back_off(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, shards=1)
    ctx = _context(contexts, settings, "both")
    client = redis.Redis.from_url(redis_url)
    try:
        with Producer(settings=settings) as p:
            ids = [p.send(entity, f"m{i}".encode()) for i in range(3)]
        # Given drainer A read the shard under its lease ...
        first, second = (ShardDrainer(ctx, entity, 0, consumer=c) for c in ("a", "b"))
        assert ctx.leases.acquire(entity, 0, first.token, 60_000)
        ctx.reader.ensure_groups(entity)
        entries = ctx.reader.read_fenced(entity, 0, "a", first.state.tenure.fence, 10).entries
        assert [e.envelope.message_id for e in entries if e.envelope] == ids
        # ... and its lease expired and B took the shard and set a backoff
        client.delete(state_keys.shard_lease(entity, 0))
        assert ctx.leases.acquire(entity, 0, second.token, 60_000)
        ctx.retry.back_off(entity, 0, 3600.0, fence=second.state.tenure.fence)
        # When A goes on as if it still held the shard, every write is refused and changes nothing
        entry_ids = [e.entry_id for e in entries]
        with pytest.raises(LeaseLostError):
            ctx.reader.ack(entity, 0, entry_ids, fence=first.state.tenure.fence)
        with pytest.raises(LeaseLostError):
            ctx.reader.move(
                entries[0], to="deadletter", code="x", reason="y", now=1.0, fence=first.state.tenure.fence
            )
        with pytest.raises(LeaseLostError):
            ctx.retry.clear(entity, 0, fence=first.state.tenure.fence)
        with pytest.raises(LeaseLostError):
            ctx.retry.back_off(entity, 0, 1.0, fence=first.state.tenure.fence)
        with pytest.raises(LeaseLostError):
            ctx.reader.read_fenced(entity, 0, "a", first.state.tenure.fence, 10)
        with pytest.raises(LeaseLostError):
            ctx.reader.claim_fenced(entity, 0, "a", first.state.tenure.fence)
        assert client.xlen(outbox_keys.outbox(entity, 0)) == 3
        assert client.xlen(outbox_keys.deadletter(entity)) == 0
        assert _backoff(ctx, entity) > 3500 and ctx.retry.attempts(entity, 0) == 1
        # And B, the holder, claims A's pending entries and can acknowledge them
        claimed = ctx.reader.claim_fenced(entity, 0, "b", second.state.tenure.fence, prune=True)
        assert [e.entry_id for e in claimed] == entry_ids
        assert ctx.reader.ack(entity, 0, entry_ids, fence=second.state.tenure.fence)[0] == 3
        ctx.retry.clear(entity, 0, fence=second.state.tenure.fence)
        assert ctx.retry.backoff_left(entity, 0) is None
        assert _consumers(client, entity, 0) == {"b": 0}
    finally:
        client.close()


def test_a_drain_that_loses_its_lease_during_a_send_leaves_the_entries_and_the_new_backoff(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, shards=1, lease_ttl=30)
    ctx = _context(contexts, settings, "slow")
    client = redis.Redis.from_url(redis_url)
    shared_namespace.control.stall(delay=2.0, entity=entity)
    try:
        with Producer(settings=settings) as p:
            for i in range(5):
                p.send(entity, f"m{i}".encode())
        # Given a drain whose send the namespace holds for 2 s
        drainer = ShardDrainer(ctx, entity, 0)
        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(drainer.run(budget=20)))
        thread.start()
        wait_until(lambda: _pending(client, entity) == 5, 10, what="a batch in flight")
        # When its lease passes to another holder mid-send, who backs the shard off
        client.delete(state_keys.shard_lease(entity, 0))
        intruder = ShardDrainer(ctx, entity, 0, consumer="intruder")
        assert ctx.leases.acquire(entity, 0, intruder.token, 60_000)
        ctx.retry.back_off(entity, 0, 3600.0, fence=intruder.state.tenure.fence)
        thread.join(30)
        # Then the drain stopped without acknowledging anything or touching the new holder's backoff
        (report,) = result
        assert "lease lost" in report.notes and report.sent == 0
        assert client.xlen(outbox_keys.outbox(entity, 0)) == 5
        assert _backoff(ctx, entity) > 3500 and ctx.retry.attempts(entity, 0) == 1
        assert client.get(state_keys.shard_lease(entity, 0)) == intruder.token.encode()
    finally:
        shared_namespace.control.restore(entity=entity)
        client.close()


def test_entries_read_ahead_of_a_refused_batch_are_sent_after_it_in_order(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    """While a batch is sent the drainer reads the next one (``bridge.delivery.read_ahead``); when the
    batch is refused, the entries read ahead stay pending behind it and go after it, in order, once."""
    entity = unique_name
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(shared_namespace),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0, "outbox_backoff_max": 0.3},
        }
    )
    ctx = _context(contexts, settings, "ahead")
    client = redis.Redis.from_url(redis_url)
    count = READ_COUNT + 50
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [f"m{i}".encode() for i in range(count)])
    drainer = ShardDrainer(ctx, entity, 0)
    keeper = LeaseKeeper(ctx.leases, settings.workers.lease_ttl)
    held = keeper.acquire(entity, 0, drainer.token)
    assert held is not None
    stop = threading.Event()
    keeper.keep_alive(stop)
    shared_namespace.control.busy(entity=entity)
    try:
        # Given the first batch (READ_COUNT entries) is refused while the rest was read ahead of it
        end = drainer.turn(held, stop, 10.0)
        assert end.backoff and drainer.report.sent == 0
        assert _pending(client, entity) == count
        shared_namespace.control.restore(entity=entity)
        # When the tenure goes on after its backoff
        deadline = time.monotonic() + 60
        while drainer.report.sent < count and time.monotonic() < deadline:
            end = drainer.turn(held, stop, 10.0)
            time.sleep(end.wait or 0.0)
    finally:
        shared_namespace.control.restore(entity=entity)
        stop.set()
        keeper.release(held)
        client.close()
    # Then every message arrived once, in the order written
    got = receive_all(shared_namespace, entity, count, timeout=30)
    assert [m.message_id for m in got] == ids


class _Monitor:
    """Redis's own ``MONITOR`` while the test drains: ``seen`` is called with every command (its text and
    who asked: a client's round trip, ``tcp``/``unix``, or a script, ``lua``) until the ``with`` ends."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)
        self.end = f"monitor-end-{time.monotonic_ns()}"
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def seen(self, text: str, client_type: str) -> None:
        raise NotImplementedError

    def _watch(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            for command in monitor.listen():
                if self.end in command["command"]:
                    return
                self.seen(command["command"], command["client_type"])

    def __enter__(self) -> Self:
        self.thread.start()
        assert self.ready.wait(5)
        time.sleep(0.1)  # MONITOR's reply is in before the first command watched
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.echo(self.end)
        self.thread.join(10)
        self.client.close()


class _HashReads(_Monitor):
    """Every ``verb`` (``HGETALL``, ``HMGET``) of one hash, by who asked."""

    def __init__(self, redis_url: str, key: str, verb: str = "HGETALL") -> None:
        super().__init__(redis_url)
        self.key, self.verb = key, verb
        self.by: dict[str, int] = defaultdict(int)

    def seen(self, text: str, client_type: str) -> None:
        if text.upper().startswith(self.verb) and self.key in text:
            self.by["lua" if client_type == "lua" else "client"] += 1


class _ReadCounts(_Monitor):
    """The ``COUNT`` of every ``XREADGROUP`` of one stream."""

    def __init__(self, redis_url: str, stream: str) -> None:
        super().__init__(redis_url)
        self.stream = stream
        self.counts: list[int] = []

    def seen(self, text: str, client_type: str) -> None:
        words = text.split()
        if words and words[0].upper() == "XREADGROUP" and self.stream in text:
            upper = [w.upper() for w in words]
            self.counts.append(int(words[upper.index("COUNT") + 1]))


@pytest.mark.parametrize("fresh", [True, False], ids=["roles-read-with-the-entries", "roles-too-old"])
def test_a_passive_batch_takes_its_roles_from_the_read_of_its_entries(
    redis_url: str,
    shared_namespace: LocalNamespace,
    unique_name: str,
    contexts: list[DeliveryContext],
    monkeypatch: pytest.MonkeyPatch,
    fresh: bool,
) -> None:
    """A passive send needs the entity's roles: the read of the batch's entries returns them (the same
    script, after the entries), so no batch reads them in a round trip of its own, unless they are older
    than ``ROLES_FRESH`` when the batch is sent; then the batch reads them itself."""
    from bridge.delivery import shard_sending

    # However long a send takes here (the first one opens the connection), the roles count as fresh, or not
    monkeypatch.setattr(shard_sending, "ROLES_FRESH", 600.0 if fresh else -1.0)
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, 1, replication="passive")
    ctx = _context(contexts, settings, "roles")
    count = 3 * READ_COUNT
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [f"m{i}".encode() for i in range(count)])
    with _HashReads(redis_url, state_keys.role(entity)) as reads:
        report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=1, block_ms=20)
    assert report.sent == count
    got = receive_all(shared_namespace, entity, count, timeout=30)
    assert [m.message_id for m in got] == ids
    # Three batches, each read with its roles; a batch sent with older roles read them again
    assert reads.by["lua"] >= 3
    assert reads.by["client"] == (0 if fresh else reads.by["lua"])


def test_a_wall_clock_that_steps_back_keeps_no_roles_read_with_a_batch_fresh(
    redis_url: str,
    shared_namespace: LocalNamespace,
    unique_name: str,
    contexts: list[DeliveryContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """How old the roles read with a batch's entries are is measured on the process's monotonic clock: the
    context's clock (Redis's) may step back when Redis fails over to a server whose clock is behind, and
    must not make roles read long before a send count as read just now."""
    from bridge.delivery import shard_sending

    # Given roles that are never fresh enough (any time since their read is too long)
    monkeypatch.setattr(shard_sending, "ROLES_FRESH", -1.0)
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, 1, replication="passive")
    ctx = _context(contexts, settings, "stepped")
    # And a context clock that steps ten seconds back every time it is read
    ticks = itertools.count()
    ctx.clock = lambda: time.time() - 10.0 * next(ticks)
    count = 10
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [f"m{i}".encode() for i in range(count)])
    # When a drainer sends them
    with _HashReads(redis_url, state_keys.role(entity)) as reads:
        report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=1, block_ms=20)
    assert report.sent == count
    assert [m.message_id for m in receive_all(shared_namespace, entity, count, timeout=30)] == ids
    # Then every batch read its roles again before its send, however far back the clock stepped
    assert reads.by["lua"] >= 1
    assert reads.by["client"] == reads.by["lua"]


def test_an_active_batch_takes_where_its_entries_landed_from_the_read_of_its_entries(
    redis_url: str,
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
    unique_name: str,
    contexts: list[DeliveryContext],
) -> None:
    """An active batch needs where each of its entries was already accepted (the ``delivered`` records):
    the read of the entries returns them (the same script), so no batch looks them up in a round trip of
    its own, and a record found that way is obeyed: the entry goes only where it is missing."""
    primary, secondary = namespace_pair
    entity = unique_name
    settings = active_all_settings(redis_url, namespace_pair, entity)
    ctx = _context(contexts, settings, "delivered")
    count = 3 * READ_COUNT
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [f"m{i}".encode() for i in range(count)])
    # Given an entry of the second batch recorded as accepted by the secondary (an earlier tenure's record)
    client = redis.Redis.from_url(redis_url)
    try:
        entry_ids = [eid.decode() for eid, _ in client.xrange(outbox_keys.outbox(entity, 0))]
        landed = READ_COUNT + 7
        client.hset(state_keys.delivered(entity, 0), entry_ids[landed], encode_targets((SECONDARY,)))
    finally:
        client.close()
    # When one drainer drains the shard
    with _HashReads(redis_url, state_keys.delivered(entity, 0), verb="HMGET") as reads:
        report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=1, block_ms=20)
    assert report.sent == count
    # Then the primary got every message and the secondary every one but the entry it already had
    assert [m.message_id for m in receive_all(primary, entity, count, timeout=30)] == ids
    assert [m.message_id for m in receive_all(secondary, entity, count - 1, timeout=30)] == (
        ids[:landed] + ids[landed + 1 :]
    )
    # And every batch's records came with its entries, none in a round trip of its own
    assert reads.by["lua"] >= 3
    assert reads.by["client"] == 0


def test_an_active_batch_read_ahead_is_sent_as_packed_with_its_read(
    redis_url: str,
    namespace_pair: tuple[LocalNamespace, LocalNamespace],
    unique_name: str,
    contexts: list[DeliveryContext],
) -> None:
    """While an active batch is in flight, the next one is read, its messages built and packed into
    batches for both namespaces; that batch sends those, and everything arrives once, in order."""
    primary, secondary = namespace_pair
    entity = unique_name
    settings = active_all_settings(redis_url, namespace_pair, entity)
    ctx = _context(contexts, settings, "packed")
    count = 3 * READ_COUNT
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [f"m{i}".encode() for i in range(count)])
    report = ShardDrainer(ctx, entity, 0).run(budget=30, idle_reads=1, block_ms=20)
    assert report.sent == count
    # (the second batch was read before the links' batch size was known: the third was packed ahead)
    assert report.packed_ahead >= 1
    assert [m.message_id for m in receive_all(primary, entity, count, timeout=30)] == ids
    assert [m.message_id for m in receive_all(secondary, entity, count, timeout=30)] == ids


def test_large_messages_are_read_fewer_at_a_time(
    redis_url: str, shared_namespace: LocalNamespace, unique_name: str, contexts: list[DeliveryContext]
) -> None:
    """A read takes up to ``READ_COUNT`` entries, fewer when they are large (about ``READ_BYTES`` a read),
    so a batch and the one read ahead stay bounded in the worker's memory whatever the message size."""
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, 1)
    ctx = _context(contexts, settings, "sizes")
    body = b"x" * (64 * 1024)
    count = 3 * (READ_BYTES // len(body))
    with Producer(settings=settings) as p:
        ids = _send_many(p, entity, [body] * count)
    with _ReadCounts(redis_url, outbox_keys.outbox(entity, 0)) as reads:
        report = ShardDrainer(ctx, entity, 0).run(budget=60, idle_reads=1, block_ms=20)
    assert report.sent == count
    got = receive_all(shared_namespace, entity, count, timeout=60)
    assert [m.message_id for m in got] == ids
    # The first read knew nothing of the sizes; every later one asked for about READ_BYTES of entries
    assert reads.counts[0] == READ_COUNT
    assert len(reads.counts) > 1
    assert all(n <= READ_BYTES // len(body) for n in reads.counts[1:]), reads.counts
