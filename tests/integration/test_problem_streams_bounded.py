"""The quarantine and dead-letter streams are bounded (``entities.<name>.max_problem_entries``) and never
trimmed: an entry that finds its stream full stays where it is — pending in the outbox, or in the ingress
stream — loudly (log, metric, status), and moves once an operator made room.

Real parts: the session's private Redis, the shared local namespace, a drain run in this process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import REGISTRY

from bridge.cli.status import _problem_depth
from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import PROBLEM_FULL_WAIT, ShardDrainer
from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import ProblemStreamFullError
from bridge.journal.store import JournalStore
from bridge.outbox import keys
from bridge.outbox.problems import list_problems
from bridge.outbox.redis_door import move_ingress
from bridge.outbox.store import SyncOutbox
from bridge.producer import Producer
from bridge.redis.connection import sync_client
from bridge.settings import JournalSettings, Settings
from bridge.status.collect import entity_status
from tests.integration.paired_support import namespace_settings
from tests.integration.worker_support import receive_all

pytestmark = pytest.mark.timeout(120)

BOUND = 2


def _settings(redis_url: str, ns: LocalNamespace, entity: str, bound: int = BOUND) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none", "max_problem_entries": bound}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
        }
    )


@pytest.fixture
def contexts() -> Iterator[list[DeliveryContext]]:
    built: list[DeliveryContext] = []
    yield built
    for ctx in built:
        ctx.close()


def _full_count(entity: str, stream: str) -> float:
    labels = {"entity": entity, "stream": stream}
    return REGISTRY.get_sample_value("bridge_problem_stream_full_total", labels) or 0.0


def _pending(client: redis.Redis, entity: str) -> int:
    return int(client.hget(keys.stats(entity), "messages") or 0)


def test_a_full_dead_letter_stream_holds_the_entries_in_the_outbox_until_there_is_room(
    redis_url: str,
    redis_client: redis.Redis,
    shared_namespace: LocalNamespace,
    unique_name: str,
    contexts: list[DeliveryContext],
    caplog: pytest.LogCaptureFixture,
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    # Given four messages that expire in the outbox and one that does not, behind them
    with Producer(settings=settings) as producer:
        expired = [producer.send(entity, f"x{i}".encode(), time_to_live=0.2) for i in range(4)]
        live = producer.send(entity, b"live", time_to_live=600)
    time.sleep(0.5)
    before = _full_count(entity, "deadletter")
    # When a drain runs with room for two entries in the dead-letter stream
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    report = ShardDrainer(ctx, entity, 0).run(budget=5)
    # Then two are moved, the live one is delivered, and the other two stay in the outbox: nothing trimmed
    assert (report.dead_lettered, report.sent) == (2, 1)
    # (the hold's time left when the drain ended: the wait, less the moments since it began)
    assert report.retry_after is not None and PROBLEM_FULL_WAIT - 1 < report.retry_after <= PROBLEM_FULL_WAIT
    assert any("deadletter stream is full" in note for note in report.notes)
    assert [m.message_id for m in receive_all(shared_namespace, entity, 1)] == [live]
    moved = [p["original"]["id"] for p in list_problems(redis_client, entity, "deadletter")]
    assert moved == expired[:2]
    assert _pending(redis_client, entity) == 2
    # And it is loud: the metric counts the refusal, the status shows the stream full, and the journal
    # holds a dead-letter event only for what was moved
    assert _full_count(entity, "deadletter") > before
    status = entity_status(settings, sync_client(redis_url), entity)
    assert (status["problem_streams_full"], status["max_problem_entries"]) == (["deadletter"], BOUND)
    assert _problem_depth(status, "deadletter", 2) == "2 FULL"  # as ``bridge status`` shows it
    held = [
        r for r in caplog.records if r.levelno == logging.ERROR and "deadletter stream is full" in r.message
    ]
    assert held and entity in held[0].message
    journal = JournalStore(redis_client, JournalSettings()).read(entity, 1000)
    assert sorted(e.message_id for _, e in journal if e.kind == "dead_lettered") == sorted(expired[:2])

    # When an operator makes room (the reviewed entries deleted) and the next drain runs
    redis_client.delete(keys.deadletter(entity))
    report = ShardDrainer(ctx, entity, 0).run(budget=5)
    # Then the held entries move, in order, and the outbox is empty: none was lost
    assert report.dead_lettered == 2 and report.retry_after is None
    assert [p["original"]["id"] for p in list_problems(redis_client, entity, "deadletter")] == expired[2:]
    assert _pending(redis_client, entity) == 0
    # (two of two: at its bound again; the status clears once the operator has dealt with them)
    assert entity_status(settings, sync_client(redis_url), entity)["problem_streams_full"] == ["deadletter"]
    redis_client.delete(keys.deadletter(entity))
    assert entity_status(settings, sync_client(redis_url), entity)["problem_streams_full"] == []


def test_a_full_quarantine_leaves_redis_door_entries_in_the_ingress_stream(
    redis_url: str, redis_client: redis.Redis, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    stream = keys.ingress(entity)
    # Given a valid entry and three invalid ones in the ingress stream, and room for two in quarantine
    redis_client.xadd(stream, {"body": "good", "message_id": "g1"})
    for i in range(3):
        redis_client.xadd(stream, {"body": f"bad{i}", "colour": "red"})
    outbox = SyncOutbox(sync_client(redis_url), _settings(redis_url, shared_namespace, entity))
    before = _full_count(entity, "quarantine")
    # When the door's task runs, it is refused whole: nothing moved, nothing acknowledged
    with pytest.raises(ProblemStreamFullError):
        move_ingress(outbox, entity, consumer="mover", now=1.0)
    assert redis_client.xlen(stream) == 4
    assert redis_client.xlen(keys.quarantine(entity)) == 0
    assert _pending(redis_client, entity) == 0
    assert _full_count(entity, "quarantine") > before
    # When the bound is raised, the same entries move, in order
    outbox = SyncOutbox(sync_client(redis_url), _settings(redis_url, shared_namespace, entity, bound=10))
    report = move_ingress(outbox, entity, consumer="mover", now=2.0)
    assert (report.moved, report.quarantined) == (1, 3)
    assert redis_client.xlen(stream) == 0
    bodies = [p["original"]["body"] for p in list_problems(redis_client, entity, "quarantine")]
    assert bodies == ["bad0", "bad1", "bad2"]


def test_a_full_quarantine_holds_a_corrupt_outbox_entry_and_what_follows_it(
    redis_url: str,
    redis_client: redis.Redis,
    shared_namespace: LocalNamespace,
    unique_name: str,
    contexts: list[DeliveryContext],
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, bound=1)
    # Given a quarantine at its bound, then a corrupt outbox entry with a good message behind it
    redis_client.xadd(keys.quarantine(entity), {"code": "earlier", "reason": "reviewed later"})
    with Producer(settings=settings) as producer:
        producer.send(entity, b"first")  # (creates the outbox and its counters)
    ctx = DeliveryContext.build(settings)
    contexts.append(ctx)
    assert ShardDrainer(ctx, entity, 0).run(budget=5).sent == 1
    receive_all(shared_namespace, entity, 1)
    redis_client.xadd(keys.outbox(entity, 0), {b"v": b"999", b"garbage": b"\xff"})
    with Producer(settings=settings) as producer:
        behind = producer.send(entity, b"behind")
    # When a drain runs
    report = ShardDrainer(ctx, entity, 0).run(budget=5)
    # Then the corrupt entry is not moved, and nothing behind it is sent past it: the shard holds
    assert (report.quarantined, report.sent) == (0, 0)
    assert report.retry_after is not None and PROBLEM_FULL_WAIT - 1 < report.retry_after <= PROBLEM_FULL_WAIT
    assert redis_client.xlen(keys.outbox(entity, 0)) == 2
    assert redis_client.xlen(keys.quarantine(entity)) == 1
    # When the reviewed entry is deleted and the next drain runs, both go, in order
    redis_client.delete(keys.quarantine(entity))
    report = ShardDrainer(ctx, entity, 0).run(budget=5)
    assert (report.quarantined, report.sent) == (1, 1)
    assert [m.message_id for m in receive_all(shared_namespace, entity, 1)] == [behind]
    assert redis_client.xlen(keys.outbox(entity, 0)) == 0
