"""Billable-operation counters in Redis, per entity and in total (``docs/paired.md``).

Workers count locally in a ``CostTally`` (or one ``Operation`` at a time) and flush with ``HINCRBY`` per
non-zero field, into the entity's hash and the totals hash. On one server both increments run in one
``MULTI``; on a Cluster the totals live in another slot, so the two are separate commands and the totals
may miss a flush whose second half failed — the per-entity counters (``get``) are the authoritative ones.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from dataclasses import fields

from bridge.core.cost import CostTally, Operation
from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis
from bridge.state import keys


def _deltas(tally_or_op: CostTally | Operation, n: int) -> dict[str, int]:
    if isinstance(tally_or_op, Operation):
        if n < 0:
            raise ValueError("count must not be negative")
        return {tally_or_op.value: n} if n else {}
    if n != 1:
        raise ValueError("n applies to a single Operation, not to a CostTally")
    return {f.name: getattr(tally_or_op, f.name) for f in fields(tally_or_op) if getattr(tally_or_op, f.name)}


class CostStore:
    """Counters of billable operations."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client
        self.cluster = is_cluster(client)

    def add(self, entity: str, tally_or_op: CostTally | Operation, n: int = 1) -> None:
        """Add a whole tally, or ``n`` of one operation, to the entity's counters and the totals."""
        deltas = _deltas(tally_or_op, n)
        if not deltas:
            return
        with driver_errors():
            if self.cluster:
                for target in (keys.cost(entity), keys.COST_TOTALS):
                    pipe = self.client.pipeline(transaction=False)
                    for name, value in deltas.items():
                        pipe.hincrby(target, name, value)
                    pipe.execute()
                return
            pipe = self.client.pipeline(transaction=True)
            for target in (keys.cost(entity), keys.COST_TOTALS):
                for name, value in deltas.items():
                    pipe.hincrby(target, name, value)
            pipe.execute()

    def get(self, entity: str) -> CostTally:
        """The entity's counters (all zero when nothing was counted)."""
        with driver_errors():
            return CostTally.from_fields(self.client.hgetall(keys.cost(entity)))

    def totals(self) -> CostTally:
        """The counters summed over every entity, as flushed."""
        with driver_errors():
            return CostTally.from_fields(self.client.hgetall(keys.COST_TOTALS))
