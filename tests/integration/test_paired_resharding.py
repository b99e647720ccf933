"""Order per key when ``outbox_shards`` changes while a paired entity's backlog still holds its keys.

Real processes: redis-server, two local namespaces, ``bridge worker`` processes and ``bridge beat``. The
primary's outage is the namespace's fault control. The beat schedules no syphon until the newer messages
had their chance to overtake, so the check does not depend on how fast the syphon is.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.embedded.stack import LocalStack, wait_until
from bridge.outbox.layout import LayoutStore
from bridge.redis.connection import sync_client
from bridge.state import keys
from tests.integration.order_checker import check_namespaces
from tests.integration.paired_support import (
    PAIRED_SETTINGS,
    cost,
    create_backlog_queues,
    create_entities,
    paired_state,
    redis_client,
)
from tests.integration.worker_support import count_in, make_stack, outbox_depth, producer

__all__ = ["make_stack"]
pytestmark = pytest.mark.timeout(240)

SETTINGS = {**PAIRED_SETTINGS, "BRIDGE_PAIRED__FAILOVER_INTERVAL": "0"}
KEYS = [f"k{n}" for n in range(12)]


def _entities(shards: int) -> str:
    return json.dumps({"orders": {"replication": "paired", "outbox_shards": shards}})


def _shards(layouts: LayoutStore) -> int:
    layout = layouts.get("orders")
    return 0 if layout is None else layout.shards


def _backlog_records(stack: LocalStack) -> list[str]:
    """The entity's ledgers and key maps still in Redis."""
    client = redis_client(stack)
    try:
        names = [keys.backlog_ledger("orders", i) for i in range(4)]
        names += [keys.backlog_keys("orders", i) for i in range(4)]
        return [name for name in names if client.exists(name)]
    finally:
        client.close()


@pytest.mark.parametrize(("before", "after"), [(1, 3), (3, 1)])
def test_changing_outbox_shards_while_the_backlog_holds_keys_keeps_each_key_in_order(
    make_stack: Any, before: int, after: int
) -> None:
    stack = make_stack({"orders": {"replication": "paired", "outbox_shards": before}}, settings=SETTINGS)
    create_entities(stack.primary, queues=["orders"])
    queues = create_backlog_queues(stack, count=2)
    worker = stack.start_worker("worker-before")
    stack.start_beat(BRIDGE_PAIRED__ENABLE_SYPHON="false")  # no syphon until the test starts one
    sent: dict[str, list[str]] = {key: [] for key in KEYS}
    layouts = LayoutStore(sync_client(stack.redis.url))
    with producer(stack) as p:
        # Given a failed-over entity whose keyed messages sit in the backlog queues
        stack.primary.control.outage()
        for key in KEYS:
            sent[key].append(p.send("orders", f"{key} old".encode(), partition_key=key))
        wait_until(lambda: paired_state(stack, "orders").failed_over, 30, what="failover engaged")
        wait_until(lambda: outbox_depth(stack, "orders") == 0, 30, what="everything in the backlog")
        assert sum(count_in(stack.secondary, q) for q in queues) == len(KEYS)
        # When the workers are redeployed with another shard count (most keys move to another shard)
        worker.kill()
        worker = stack.start_worker("worker-after", BRIDGE_ENTITIES=_entities(after))
        wait_until(lambda: _shards(layouts) == after, 30, what="the change of the shard count")
        # And the primary comes back before the syphon moved the backlog
        stack.primary.control.restore()
        wait_until(lambda: not paired_state(stack, "orders").failed_over, 60, what="the ping restoring")
        # And newer messages of the same keys arrive
        for key in KEYS:
            sent[key].append(p.send("orders", f"{key} new".encode(), partition_key=key))
    # (every shard gets its chance to send to the primary before the syphon runs)
    wait_until(
        lambda: cost(stack, "orders").primary_sends > 0 or cost(stack, "orders").barrier_sends >= after,
        30,
        what="every shard deciding",
    )
    stack.start_beat("beat-syphon")
    wait_until(lambda: outbox_depth(stack, "orders") == 0, 60, what="an empty outbox")
    wait_until(lambda: sum(count_in(stack.secondary, q) for q in queues) == 0, 60, what="empty backlog")
    # Then every key's older message (syphoned from the backlog) reached the primary before its newer one
    report = check_namespaces(sent, {"primary": stack.primary}, "orders", timeout=60)
    assert report.out_of_sequence == 0 and not report.missing, report
    # And no ledger or key map is left behind, not even those of the shards beyond a lowered count
    wait_until(lambda: not _backlog_records(stack), 30, what="every restore barrier passed")
