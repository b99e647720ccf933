"""Many entities: what a worker spends on them, and the entity set shrinking when they fall idle.

Real parts throughout: ``bridge worker`` processes (prefork, two pool processes, no beat: every message goes
through the drain services), the stack's private Redis and local namespaces, counts read from the namespace
with the SDK's administration client, threads read from ``/proc`` and Redis connections from
``CLIENT LIST``. The race between retiring an entity and a write to it is injected by wrapping the real
steps of the retirement (a write lands exactly between two of them).

``python -m pytest tests/integration/test_workers_entities.py -m slow -n 0`` runs the 5,000-entity variant.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import BridgeProcess, wait_until
from bridge.outbox import keys as outbox_keys
from bridge.outbox.entities import EntitySet
from bridge.outbox.reader import OutboxReader
from bridge.producer import Producer
from bridge.settings import Settings, WorkerSettings
from bridge.state import keys as state_keys
from tests.integration.paired_support import namespace_settings
from tests.integration.worker_support import make_stack, stack_settings

__all__ = ["make_stack"]

_WORKERS = WorkerSettings()
_PER_POOL_PROCESS = (
    _WORKERS.drain_threads  # drain threads
    + 2 + 1 + 1  # the watchers, the coordinator, the lease keeper
    + 8 + 8  # settling and read-ahead threads, shared by the drainers
    + _WORKERS.drain_threads + 8  # the SDK's attempt threads (drain threads + max_stuck_threads)
    + 2 * _WORKERS.max_senders  # a keep-alive thread per open sender, on either namespace
)  # fmt: skip
THREAD_BOUND = 2 * _PER_POOL_PROCESS + 40
"""Threads of one worker (its main process and both pool processes together), whatever the entity count:
the design's bound (docs/operations.md, "Capacity: many entities") with room for each
process's own threads. A thread per owned shard and an SDK sender with its keep-alive thread per entity
path made it more than two per entity (300 entities: over 600)."""
CLIENT_BOUND = 100
"""Redis connections of the whole stack (the worker's processes and this test's own)."""


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Celery's pool processes), read from ``/proc``."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in _listdir(Path(f"/proc/{current}/task")):
            try:
                todo.extend(
                    int(c) for c in (Path(f"/proc/{current}/task/{task}/children").read_text().split())
                )
            except OSError:
                continue
    return found


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _threads(worker: BridgeProcess) -> int:
    return sum(len(_listdir(Path(f"/proc/{pid}/task"))) for pid in _tree(worker.proc.pid))


def _clients(client: redis.Redis) -> int:
    return len(client.client_list())


class _Peak:
    """The largest thread and Redis-connection counts seen while a test runs (sampled in a thread)."""

    def __init__(self, worker: BridgeProcess, client: redis.Redis) -> None:
        self.threads = self.clients = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(worker, client), daemon=True)

    def _sample(self, worker: BridgeProcess, client: redis.Redis) -> None:
        while not self._stop.wait(0.25):
            self.threads = max(self.threads, _threads(worker))
            self.clients = max(self.clients, _clients(client))

    def __enter__(self) -> _Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _queued(ns: LocalNamespace, prefix: str) -> dict[str, int]:
    """Active messages per queue whose name starts with ``prefix``, read with the administration client."""
    admin = ServiceBusAdministrationClient.from_connection_string(
        ns.connection_string, connection_verify=ns.certificate, retry_total=1
    )
    with admin:
        return {
            q.name: q.active_message_count
            for q in admin.list_queues_runtime_properties()
            if q.name.startswith(prefix)
        }


def _pending_total(client: redis.Redis) -> int:
    return int(client.hget(outbox_keys.TOTALS, "messages") or 0)


LIKE_DEFAULTS = {"BRIDGE_RETRY__ATTEMPT_DEADLINE": "10", "BRIDGE_WORKERS__LEASE_TTL": "30"}
"""The defaults where the fast test settings shorten them: on a loaded machine, new links to thousands of
entities can take longer than a 3 s attempt deadline (the passive failover that follows is correct, but
this test is about capacity)."""


def _one_message_to_each_of(make_stack: Any, count: int, deadline: float) -> None:
    # Given a worker (two pool processes, default drain settings) and no configured entity at all
    stack = make_stack({}, settings=LIKE_DEFAULTS)
    worker = stack.start_worker()
    client = redis.Redis.from_url(stack.redis.url)
    names = [f"many-{n:05d}" for n in range(count)]
    try:
        wait_until(lambda: client.zcard(state_keys.drainers()) == 2, 60, what="both drain services up")
        started = time.monotonic()
        with _Peak(worker, client) as peak:
            # When one message is written to each of ``count`` entity names nobody configured
            with Producer(settings=stack_settings(stack)) as p:
                for name in names:
                    p.send(name, b"x")
            # Then every message leaves the outbox (acknowledged only once the namespace accepted it)
            wait_until(lambda: _pending_total(client) == 0, deadline, what=f"{count} messages delivered")
            elapsed = time.monotonic() - started
        # And each entity holds exactly its one message on the namespaces (on the primary unless a send
        # there timed out and the entity failed over to the secondary: passive replication)
        queued = Counter(_queued(stack.primary, "many-"))
        queued.update(_queued(stack.secondary, "many-"))
        assert sorted(queued) == names
        assert set(queued.values()) == {1}
        # And the worker's threads and the Redis connections stayed bounded all along, far below one per
        # entity (measured: printed for docs/operations.md)
        print(f"entities={count} seconds={elapsed:.1f} peak_threads={peak.threads} peak_redis={peak.clients}")
        assert peak.threads <= THREAD_BOUND, worker.log_tail()
        assert peak.clients <= CLIENT_BOUND
        assert "MaxConnectionsError" not in worker.log_path.read_text(errors="replace")
    finally:
        client.close()


@pytest.mark.timeout(600)
def test_one_message_to_each_of_300_entities_is_delivered_with_bounded_threads_and_connections(
    make_stack: Any,
) -> None:
    _one_message_to_each_of(make_stack, 300, deadline=300)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_one_message_to_each_of_5000_entities_is_delivered_with_bounded_threads_and_connections(
    make_stack: Any,
) -> None:
    _one_message_to_each_of(make_stack, 5000, deadline=1500)


# ---- the entity set shrinks -----------------------------------------------------------------------------
def _settings(redis_url: str, ns: LocalNamespace, idle: float) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {"configured": {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            "workers": {"lease_ttl": 5, "entity_idle": idle},
        }
    )


@pytest.fixture
def context(redis_url: str, shared_namespace: LocalNamespace) -> Iterator[DeliveryContext]:
    ctx = DeliveryContext.build(_settings(redis_url, shared_namespace, idle=1.0))
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.mark.timeout(120)
def test_an_entity_empty_and_idle_leaves_the_set_and_its_next_write_brings_it_back(
    context: DeliveryContext, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entities = EntitySet(context.redis)
    names = [f"{unique_name}-{n}" for n in range(3)]
    service = DrainService(context, tick=0.1, block_ms=200).start()
    try:
        with Producer(settings=context.settings) as p:
            # Given three entities nobody configured, each written once and delivered
            for name in names:
                p.send(name, b"first")
            wait_until(lambda: _pending_total(context.redis) == 0, 30, what="first messages delivered")
            # When they stay empty for longer than ``workers.entity_idle`` (1 s)
            # Then they leave the set, and the drain service no longer holds their shards
            wait_until(lambda: not set(names) & set(entities.members()), 30, what="idle entities retired")
            wait_until(lambda: service.owned() == [("configured", 0)], 10, what="their shards handed over")
            assert all(not context.leases.holder(name, 0) for name in names)
            # And a new write to one of them lists it again and is delivered
            p.send(names[0], b"second")
            assert names[0] in entities.members()
            wait_until(lambda: _pending_total(context.redis) == 0, 30, what="second message delivered")
    finally:
        service.stop()
    assert _queued(shared_namespace, unique_name) == {names[0]: 2, names[1]: 1, names[2]: 1}


@pytest.fixture
def writer(redis_url: str, shared_namespace: LocalNamespace) -> Iterator[Callable[[str], None]]:
    """``writer(entity)`` writes one message with one ``Producer`` (one process's writer) for the test."""
    producer = Producer(settings=_settings(redis_url, shared_namespace, idle=1.0))

    def write(entity: str) -> None:
        producer.send(entity, b"late")

    try:
        yield write
    finally:
        producer.close()


def _drained(client: redis.Redis, entity: str) -> None:
    """Acknowledge everything in the entity's shard 0 (as a drainer does once the namespace accepted)."""
    reader = OutboxReader(client, Settings(redis_url="redis://unused"))
    reader.ensure_groups(entity)
    ids = [entry_id.decode() for entry_id, _ in client.xrange(outbox_keys.outbox(entity, 0))]
    reader.ack(entity, 0, ids)


@pytest.mark.parametrize("step", ["forget", "second-check", "after"])
def test_a_write_racing_the_retirement_of_its_entity_always_leaves_the_entity_listed(
    redis_url: str, writer: Callable[[str], None], unique_name: str, step: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    entities = EntitySet(client)
    entity = unique_name

    def write() -> None:
        writer(entity)

    try:
        # Given an entity written once and drained (empty), and idle for the retirement's purposes (0 s)
        write()
        _drained(client, entity)
        assert entity in entities.members()
        real_forget, real_idle = entities.forget, entities.idle
        checks = [0]

        def forget(name: str) -> None:
            if step == "forget":
                write()  # the write lands between the first check and the SREM
            real_forget(name)

        def idle(name: str, shards: int, seconds: float) -> bool:
            checks[0] += 1
            if step == "second-check" and checks[0] == 2:
                write()  # the write lands between the SREM and the second check
            return real_idle(name, shards, seconds)

        entities.forget, entities.idle = forget, idle  # type: ignore[method-assign]
        # When the entity is retired while a write comes in at that step
        retired = entities.retire_if_idle(entity, 1, 0.0)
        if step == "after":
            assert retired  # nothing came in: it left the set
            write()  # the same writer (and process) writes to it again afterwards
        # Then the entity is listed, and its entry is where a drainer will look for it
        assert entity in entities.members()
        assert client.xlen(outbox_keys.outbox(entity, 0)) == 1
        assert retired is (step == "after")
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_an_entity_with_an_entry_is_listed_whenever_writes_and_retirements_race_freely(
    redis_url: str, writer: Callable[[str], None], unique_name: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    entities = EntitySet(client)
    entity = unique_name
    retired = [0]
    try:
        for _ in range(100):
            # Given an empty entity being retired again and again (idle time 0) by another thread
            _drained(client, entity)
            stop = threading.Event()

            def retire(stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    retired[0] += entities.retire_if_idle(entity, 1, 0.0)

            thread = threading.Thread(target=retire)
            thread.start()
            time.sleep(0.002)
            # When a message is written meanwhile
            writer(entity)
            stop.set()
            thread.join(10)
            # Then, once the retirements stop, the entity with its entry is listed
            assert client.xlen(outbox_keys.outbox(entity, 0)) == 1
            assert entity in entities.members()
        assert retired[0] > 0  # the race was run: the entity did leave the set in between
    finally:
        client.close()
