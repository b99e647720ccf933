"""Where the replication state lives in Redis (the outbox's layout is in ``bridge.outbox.keys``).

Same scheme as the outbox: every key of one entity carries the hash tag ``{<entity>}``, so on a Redis
Cluster the role hash, both health hashes, the paired state, cost counters, retry times and shard leases of
an entity sit in the outbox's slot and a Lua script may touch any of them together. Records shared by many
entities live under tags of their own and are never touched in the same script as an entity key.

=========================================  ==============================================================
key                                        holds
=========================================  ==============================================================
``bridge:{E}:role``                        hash ``RoleState`` (active, epoch, swapped_at, reason)
``bridge:{E}:health:<role>``               hash ``NamespaceHealth`` of the primary/secondary for E
``bridge:{E}:paired``                      hash ``PairedState`` (failover timer, failed_over_at, ping)
``bridge:{E}:cost``                        hash ``CostTally`` counters (HINCRBY)
``bridge:{E}:notbefore``                   hash shard -> epoch seconds before which not to retry it
``bridge:{E}:attempts``                    hash shard -> retries in a row of the shard's head entry
``bridge:{E}:delivered:<i>``               hash entry id -> targets that already accepted it (active
                                           mode, policy ``all``: not sent there again on retry)
``bridge:{E}:scheduled:<i>``               string, short PX: a drain of shard i is queued (-1: ingest)
``bridge:{E}:lease:<i>``                   string: owner of the drain lease of outbox shard i (PX ttl)
``bridge:{backlog:<N>}:rotation``          hash index -> removed_at, ``<index>.error`` -> why, for the
                                           backlog queues ``<N>/x-servicebus-transfer/<i>``
``bridge:{bridge}:failed-over``            set of entities with failover engaged (what the ping visits)
``bridge:{bridge}:cost``                   hash ``CostTally``: totals over all entities
``bridge:{lease:<name>}``                  string: owner of a named lease (syphon per backlog queue, beat)
=========================================  ==============================================================
"""

from __future__ import annotations

from bridge.core.roles import Role

FAILED_OVER = "bridge:{bridge}:failed-over"
COST_TOTALS = "bridge:{bridge}:cost"


def _tag(name: str) -> str:
    # Identical to bridge.outbox.keys: a '}' would end the tag early and split one entity over two slots.
    return "bridge:{" + name.replace("}", "%7D") + "}:"


def role(entity: str) -> str:
    """The entity's role hash (compare-and-swap target)."""
    return _tag(entity) + "role"


def health(entity: str, which: Role) -> str:
    """Availability of one namespace for the entity."""
    return f"{_tag(entity)}health:{which}"


def paired(entity: str) -> str:
    """Paired-mode failover state of the entity."""
    return _tag(entity) + "paired"


def cost(entity: str) -> str:
    """Billable-operation counters of the entity."""
    return _tag(entity) + "cost"


def not_before(entity: str) -> str:
    """Retry times of the entity's outbox shards."""
    return _tag(entity) + "notbefore"


def attempts(entity: str) -> str:
    """Retry counts of the entity's outbox shards."""
    return _tag(entity) + "attempts"


def delivered(entity: str, shard: int) -> str:
    """Targets that already accepted entries of one shard."""
    return f"{_tag(entity)}delivered:{shard}"


def scheduled(entity: str, shard: int) -> str:
    """Marker that a drain (or, for shard -1, an ingest) of the entity is already queued."""
    return f"{_tag(entity)}scheduled:{shard}"


def shard_lease(entity: str, shard: int) -> str:
    """The drain lease of one outbox shard."""
    return f"{_tag(entity)}lease:{shard}"


def rotation(namespace: str) -> str:
    """The backlog rotation of the queues named after primary namespace ``namespace``."""
    return _tag("backlog:" + namespace) + "rotation"


def lease(name: str) -> str:
    """A named lease (one syphon per backlog queue, one beat scheduler)."""
    return "bridge:{lease:" + name.replace("}", "%7D") + "}"


def entity_keys(entity: str) -> tuple[str, ...]:
    """Every per-entity state key except the per-shard ones (for slot checks and clean-up)."""
    return (
        role(entity),
        health(entity, "primary"),
        health(entity, "secondary"),
        paired(entity),
        cost(entity),
        not_before(entity),
        attempts(entity),
    )
