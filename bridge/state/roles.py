"""Passive replication's shared role state in Redis: which namespace is active per entity, and their health.

``RoleStore`` applies what ``bridge.core.roles`` decides. The swap is one Lua script (``scripts.SWAP``), a
compare-and-swap: it applies only while the stored epoch and active role are still those the
worker observed, so of two workers that saw the active namespace fail only one swaps, and a worker acting
on a stale epoch can never swap back. Health is a plain hash per namespace, replaced as a whole (absent
fields mean None), and only over a record that changed for an older attempt (``scripts.SET_HEALTH``):
a success recorded late never overrides a later failure. Skipping a write when ``next_health`` returned
the same object is the caller's job.

Connection: any blocking client from ``bridge.redis.connection.sync_client`` (single, Sentinel, Cluster:
every key here carries the entity's hash tag). Driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

import logging

from bridge.core.roles import ROLES, NamespaceHealth, Role, RoleState, Swap
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis
from bridge.state import keys, scripts

log = logging.getLogger(__name__)


class RoleStore:
    """Role state and namespace health of entities, shared by every worker."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def get(self, entity: str) -> RoleState:
        """The entity's current role state (primary at epoch 0 when never swapped)."""
        with driver_errors():
            return RoleState.from_fields(self.client.hgetall(keys.role(entity)))

    def swap(self, entity: str, swap: Swap) -> tuple[bool, RoleState]:
        """Compare-and-swap: ``(applied, state after)``; applied only on the epoch and role it was decided on.

        When not applied, the state returned is the one another worker stored; the caller re-reads nothing.
        """
        fields = swap.state().to_fields()
        args: list[str] = [str(swap.expected_epoch), swap.from_role]
        for name, value in fields.items():
            args += [name, value]
        with driver_errors():
            reply = run_script(self.client, scripts.SWAP, [keys.role(entity)], args)
        applied = int(reply[0]) == 1
        state = RoleState.from_fields(scripts.pairs(reply[1:]))
        # The caller logs an applied swap at WARNING (it knows the batch and the outcome); only it sees
        # ``applied`` True, so the transition is logged once across all workers.
        log.debug(
            "swap for %s %s (expected epoch %d, stored now %d)",
            entity,
            "applied" if applied else "refused",
            swap.expected_epoch,
            state.epoch,
        )
        return applied, state

    def health(self, entity: str, role: Role) -> NamespaceHealth:
        """Health of the namespace that has ``role`` for this entity (healthy when never recorded)."""
        with driver_errors():
            return NamespaceHealth.from_fields(self.client.hgetall(keys.health(entity, role)))

    def healths(self, entity: str) -> dict[Role, NamespaceHealth]:
        """Health of both namespaces in one round trip."""
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for role in ROLES:
                pipe.hgetall(keys.health(entity, role))
            replies = pipe.execute()
        return {role: NamespaceHealth.from_fields(reply) for role, reply in zip(ROLES, replies, strict=True)}

    def set_health(self, entity: str, role: Role, health: NamespaceHealth) -> bool:
        """Replace the namespace's health record, unless it changed for a later attempt than ``health``
        did (``scripts.SET_HEALTH``, one key: atomic); True when written."""
        changed_at = health.changed_at
        args: list[str] = ["" if changed_at is None else repr(changed_at)]
        for name, value in health.to_fields().items():
            args += [name, value]
        with driver_errors():
            reply = run_script(self.client, scripts.SET_HEALTH, [keys.health(entity, role)], args)
        return int(reply) == 1
