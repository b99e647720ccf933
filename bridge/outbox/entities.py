"""The set of entities with an outbox (``bridge:{bridge}:entities``): listed by every write, removed when
an entity has been empty and idle for ``workers.entity_idle`` seconds.

Why: the drain service owns and watches every shard of every listed entity, and the sweeper, the probe and
``bridge status`` walk the set. With ``only_configured_entities = false`` anyone who can post can create
entities, so a set that only grows makes every entity ever named cost something forever.

Race-free with a concurrent write (an entry must never sit in an unlisted entity, where no drainer looks):

- A write that stores something lists the entity after (or, on a single server, in the same script as)
  its ``XADD`` (``bridge.outbox.store``), every time: the writer keeps no "already listed" cache.
- ``retire_if_idle`` asks ``scripts.IDLE`` (empty and idle, one step in the entity's slot), removes the
  entity (``SREM``), then asks ``IDLE`` again and lists the entity again (``SADD``) when the answer
  changed. A write's ``XADD`` either comes before the second ``IDLE`` (which then sees the entry, or the
  write's fresh last id, and lists the entity again) or after it, and so after the ``SREM``: the write's
  own ``SADD``, which follows its ``XADD``, then lists it again. Either way the entity is listed while it
  has an entry. The two steps work across Cluster slots because each waits for the other's answer.

What stays in Redis after a retirement: the empty shard streams with their consumer group, the stats and
layout hashes (a few hundred bytes per entity); a later write finds them as it left them.
"""

from __future__ import annotations

from typing import Any

from bridge.errors import OutboxUnavailableError
from bridge.outbox import keys
from bridge.outbox.scripts import IDLE
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class EntitySet:
    """Listing and retiring entities (see the module docstring)."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def members(self) -> list[str]:
        """The entities listed now."""
        with driver_errors(OutboxUnavailableError):
            return sorted(_text(name) for name in self.client.smembers(keys.ENTITIES))

    def idle(self, entity: str, shards: int, idle_seconds: float) -> bool:
        """The entity's outbox is empty and none of its ``shards`` was written for ``idle_seconds``."""
        script_keys = [keys.stats(entity), *(keys.outbox(entity, shard) for shard in range(shards))]
        with driver_errors(OutboxUnavailableError):
            return int(run_script(self.client, IDLE, script_keys, [int(idle_seconds * 1000)])) == 1

    def retire_if_idle(self, entity: str, shards: int, idle_seconds: float) -> bool:
        """Remove the entity from the set when it is empty and idle; True when removed (it stays listed
        when a write came in meanwhile)."""
        if not self.idle(entity, shards, idle_seconds):
            return False
        self.forget(entity)
        if self.idle(entity, shards, idle_seconds):
            return True
        self.list(entity)
        return False

    def forget(self, entity: str) -> None:
        """``SREM``: one step of ``retire_if_idle``."""
        with driver_errors(OutboxUnavailableError):
            self.client.srem(keys.ENTITIES, entity)

    def list(self, entity: str) -> None:
        """``SADD``: one step of ``retire_if_idle`` (a write lists its entity itself)."""
        with driver_errors(OutboxUnavailableError):
            self.client.sadd(keys.ENTITIES, entity)
