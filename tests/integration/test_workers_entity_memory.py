"""What a worker process keeps per entity comes back down once the entities fall silent and retire.

Real parts: a ``DrainService`` in this process with its real ``NamespacePool`` against a local namespace
through the SDK, the test's private Redis, the real entity retirement (``workers.entity_idle``) and the
real idle close of senders (``workers.idle_sender_close``), both shortened to a second. Anyone who may post
may name a new entity, so nothing a worker keeps may grow with the entity names it ever served: the
failure streaks, the pool's senders (an SDK link and keep-alive thread each) and path locks, and the
label sets of the per-process metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest

from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.outbox import keys as outbox_keys
from bridge.outbox.entities import EntitySet
from bridge.producer import Producer
from bridge.settings import Settings
from tests.integration.paired_support import namespace_settings

NAMES = 40
"""Entity names written once each: their senders alone are a thread each while open."""
OWN_THREADS = ("bridge-", "servicebus-", "MainThread")
"""Thread names of the bridge's own bounded pools (drain, settling, read-ahead, attempt threads: they grow
with the work up to their bounds, never with the number of entities); every other thread of the process
is the SDK's (a sender's keep-alive thread) or this test runner's."""


@pytest.fixture
def context(redis_url: str, shared_namespace: LocalNamespace) -> Iterator[DeliveryContext]:
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(shared_namespace),
            "entities": {"configured": {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            "workers": {"lease_ttl": 5, "entity_idle": 1.0, "idle_sender_close": 1.0},
        }
    )
    ctx = DeliveryContext.build(settings)
    try:
        yield ctx
    finally:
        ctx.close()


def _samples(names: list[str]) -> int:
    """Samples of this process's metrics that name one of ``names``."""
    text = generate_latest(REGISTRY).decode()
    return sum(1 for line in text.splitlines() if any(f'entity="{n}"' in line for n in names))


def _kept(ctx: DeliveryContext, names: list[str]) -> dict[str, int]:
    """What the process holds for ``names``: streaks, and the pool's senders, their times and path locks."""
    wanted = set(names)
    clients = ctx.pool._live_clients()  # the pool's own per-path records, read directly
    return {
        "streaks": sum(1 for entity, _ in list(ctx.streaks.streaks) if entity in wanted),
        "senders": sum(len(wanted & set(c.senders)) for c in clients),
        "last_used": sum(len(wanted & set(c.last_used)) for c in clients),
        "locks": sum(len(c.locks) for c in clients),
    }


def _threads() -> tuple[int, int]:
    """This process's threads: all of them, and those not of the bridge's own pools."""
    threads = threading.enumerate()
    return len(threads), sum(1 for t in threads if not t.name.startswith(OWN_THREADS))


def _pending(ctx: DeliveryContext) -> int:
    return int(ctx.redis.hget(outbox_keys.TOTALS, "messages") or 0)


@pytest.mark.timeout(180)
def test_what_a_worker_keeps_per_entity_comes_back_down_once_the_entities_retire(
    context: DeliveryContext, unique_name: str
) -> None:
    names = [f"{unique_name}-{n:02d}" for n in range(NAMES)]
    service = DrainService(context, tick=0.1, block_ms=200).start()
    try:
        with Producer(settings=context.settings) as p:
            # Given a drain service that has sent to its configured entity
            p.send("configured", b"first")
            wait_until(lambda: _pending(context) == 0, 60, what="the configured entity's message delivered")
            before = _threads()
            # When one message is written to each of 40 entity names nobody configured
            for name in names:
                p.send(name, b"x")
            wait_until(lambda: _pending(context) == 0, 120, what=f"{NAMES} messages delivered")
        peak = (_threads(), _samples(names), _kept(context, names))
        # Then while they are served the process holds something for each of them: label sets in the
        # metrics, and an open sender with the SDK's thread (the first ones may be closed already: idle)
        assert peak[0][1] >= before[1] + NAMES // 2 and peak[1] >= NAMES, peak
        # And once they are empty and idle past workers.entity_idle they retire, and what the process kept
        # for them goes: streaks, senders and their threads, path locks, metric label sets
        entities = EntitySet(context.redis)
        wait_until(lambda: not set(names) & set(entities.members()), 60, what="the names retired")
        settled = lambda: (  # noqa: E731
            _samples(names) == 0
            and not any(_kept(context, names).values())
            and _threads()[1] <= before[1]
            and _threads()[0] <= peak[0][0] - NAMES // 2
        )
        wait_until(settled, 60, what=f"state freed: {_kept(context, names)} {_samples(names)} {_threads()}")
        print(f"threads before={before} peak={peak[0]} after={_threads()} samples peak={peak[1]} after=0")
    finally:
        service.stop()
