"""Key layout of the replication state: every key of one entity hashes to the outbox's Cluster slot."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from bridge.outbox import keys as outbox_keys
from bridge.state import keys

ENTITIES = ["orders", "topic/sub", "a.b-c_d~e", "weird}name{", "x" * 200]


def _entity_keys(entity: str) -> tuple[str, ...]:
    """Every per-entity state key except the per-shard ones."""
    return (
        keys.role(entity),
        keys.health(entity, "primary"),
        keys.health(entity, "secondary"),
        keys.paired(entity),
        keys.cost(entity),
        keys.not_before(entity),
        keys.attempts(entity),
        keys.abandoned(entity),
    )


@pytest.mark.parametrize("entity", ENTITIES)
def test_all_keys_of_an_entity_share_one_slot_with_its_outbox(entity: str) -> None:
    per_shard = (keys.shard_lease, keys.delivered, keys.scheduled)
    state = [*_entity_keys(entity), *(f(entity, i) for f in per_shard for i in range(-1, 16))]
    outbox = [
        outbox_keys.outbox(entity, 0),
        outbox_keys.stats(entity),
        outbox_keys.deadletter(entity),
        outbox_keys.quarantine(entity),
    ]
    slots = {key_slot(k.encode()) for k in state + outbox}
    assert len(slots) == 1, f"{entity!r} spans slots {slots}"


def test_keys_are_distinct_and_do_not_collide_across_entities() -> None:
    every = [k for e in ENTITIES for k in (*_entity_keys(e), keys.shard_lease(e, 0), keys.shard_lease(e, 1))]
    assert len(every) == len(set(every))


def test_shared_records_are_out_of_any_entity_slot_layout() -> None:
    # The shared keys have their own tags: an entity literally named "bridge" shares the totals' slot,
    # which is harmless, but a backlog namespace never lands in an entity's tag.
    assert keys.rotation("ns1") == "bridge:{backlog:ns1}:rotation"
    assert (
        keys.lease("syphon:ns1/x-servicebus-transfer/0")
        == "bridge:{lease:syphon:ns1/x-servicebus-transfer/0}"
    )
    assert keys.FAILED_OVER.startswith("bridge:{bridge}:") and keys.COST_TOTALS.startswith("bridge:{bridge}:")
    assert keys.role("orders") == "bridge:{orders}:role"
