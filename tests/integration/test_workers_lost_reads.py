"""A read whose reply a Redis failure lost: its entries go before any newer entry of their shard.

When Redis fails over (a killed primary or Cluster master), a read the old primary answered may have reached
the promoted replica (the entries are pending under the drainer's consumer) while its reply never reached
the drainer. Reads of new entries (``>``) skip such entries, so a drainer that kept its lease would send
newer entries of the same keys first and the skipped ones only at its next ``workers.reclaim_interval``:
order per key broken (found by ``python -m bench.failover`` on a Cluster). Here the lost reply is the
drainer's own consumer reading the entry, and the failure is the real Redis server stopped under a turn.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from bridge.delivery.context import DeliveryContext
from bridge.delivery.drainer import ShardDrainer
from bridge.delivery.lease_keeper import LeaseKeeper
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.redis_server import RedisServer
from bridge.errors import StateStoreUnavailableError
from bridge.outbox import keys as outbox_keys
from bridge.producer import Producer
from bridge.settings import Settings
from tests.integration.paired_support import namespace_settings
from tests.integration.worker_support import receive_all


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A Redis server of this test's own (it is stopped under a turn), with AOF so it keeps the outbox."""
    with RedisServer() as started:
        yield started


def _send(settings: Settings, entity: str, body: bytes) -> str:
    with Producer(settings=settings) as p:
        (message_id,) = p.send_batch(entity, [body])
    return message_id


def _turns_until(drainer: ShardDrainer, held: object, stop: threading.Event, sent: int) -> None:
    deadline = time.monotonic() + 60
    while drainer.state.report.sent < sent and time.monotonic() < deadline:
        try:
            end = drainer.turn(held, stop, 5.0)  # type: ignore[arg-type]
        except StateStoreUnavailableError:
            time.sleep(0.2)
            continue
        time.sleep(min(end.wait or 0.0, 0.5))


def test_entries_a_lost_read_left_pending_go_before_newer_ones(
    server: RedisServer, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = Settings.model_validate(
        {
            "redis_url": server.url,
            "primary": namespace_settings(shared_namespace),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            # The periodic claim of the pending list must not be what saves the order here
            "workers": {"reclaim_interval": 3600},
        }
    )
    ctx = DeliveryContext.build(settings)
    client = redis.Redis.from_url(server.url)
    drainer = ShardDrainer(ctx, entity, 0)
    keeper = LeaseKeeper(ctx.leases, settings.workers.lease_ttl)
    held = keeper.acquire(entity, 0, drainer.token)
    assert held is not None
    stop = threading.Event()
    keeper.keep_alive(stop)
    try:
        # Given a tenure that took the shard over and sent a first message
        first = _send(settings, entity, b"first")
        _turns_until(drainer, held, stop, sent=1)
        assert drainer.state.report.sent == 1
        # and an entry Redis handed to this drainer's consumer in a read whose reply was lost
        lost = _send(settings, entity, b"lost")
        stream = outbox_keys.outbox(entity, 0)
        consumer = drainer.state.tenure.consumer
        read = client.xreadgroup(outbox_keys.SENDERS_GROUP, consumer, {stream: ">"}, count=1)
        assert len(read[0][1]) == 1
        # and Redis failing under the next turn
        server.stop()
        # the read fails, or the lease renewals fail first and the turn starts nothing
        with contextlib.suppress(StateStoreUnavailableError):
            drainer.turn(held, stop, 2.0)
        server.start()
        client = redis.Redis.from_url(server.url)
        # When a newer message arrives and the tenure goes on
        newer = _send(settings, entity, b"newer")
        _turns_until(drainer, held, stop, sent=3)
    finally:
        stop.set()
        keeper.release(held)
        client.close()
        ctx.close()
    # Then the entry the lost read left pending went before the newer one
    got = receive_all(shared_namespace, entity, 3, timeout=30)
    assert [m.message_id for m in got] == [first, lost, newer]
