"""Where everything lives in Redis.

Every key of one entity carries the hash tag ``{<entity>}`` (``bridge.redis.keys.tag``) so that, on a
Redis Cluster, the outbox shards, counters, idempotency markers, the ingress stream, quarantine and
dead-letter streams of an entity sit in one slot: the writer's Lua script touches several of them
atomically, which a cluster only allows within a slot. Totals across entities live under ``{bridge}`` and
are updated outside the per-entity script. The replication state (roles, health, paired failover, cost,
retry times, leases) follows the same scheme; its keys are listed in ``bridge.state.keys``.

=======================================  =================================================================
key                                      holds
=======================================  =================================================================
``bridge:{E}:out:<i>``                   outbox shard ``i`` of entity E (stream; group ``senders``)
``bridge:{E}:stats``                     hash ``messages``, ``bytes``: what E's outbox holds unacknowledged
``bridge:{E}:mid:<bucket>``              idempotency markers of one time bucket (hash MessageId ->
                                         ``<shard> <entry id>``; expires, see ``scripts.WRITE``)
``bridge:{E}:in``                        the Redis door: apps ``XADD`` here (group ``ingress``)
``bridge:{E}:lease:ingest``              string: owner of the Redis-door mover lease of E (one mover at a
                                         time keeps the door's order; ``bridge.redis.lease``)
``bridge:{E}:quarantine``                entries that failed validation, with the reason (stream)
``bridge:{E}:deadletter``                messages Service Bus will never take, with the reason (stream)
``bridge:{bridge}:stats``                hash ``messages``, ``bytes``: totals over all entities
``bridge:{bridge}:entities``             set of entity names with an outbox write, less those empty and idle
                                         for ``workers.entity_idle`` (``bridge.outbox.entities``)
``bridge:{bridge}:door-entities``        set of entities whose Redis-door stream a scan found
                                         (``bridge.outbox.discovery``; ``door-scan``, ``door-scan-mark``:
                                         the scan's cursor and its once-per-interval mark)
``bridge:{bridge}:wake:<member>``        stream: wake-ups of one process's shard watcher (``bridge.delivery
                                         .shard_pool``; a few entries, expires when the process is gone)
``bridge:{E}:layout``                    hash: the shard layout writers and readers agree on
                                         (``bridge.outbox.layout``)
``bridge:{E}:fence``                     never kept: set and deleted after a Cluster write to be confirmed
=======================================  =================================================================
"""

from __future__ import annotations

from bridge.redis.keys import tag as _tag

SENDERS_GROUP = "senders"
INGRESS_GROUP = "ingress"
TOTALS = "bridge:{bridge}:stats"
ENTITIES = "bridge:{bridge}:entities"


def outbox(entity: str, shard: int) -> str:
    """Outbox stream of one shard."""
    return f"{_tag(entity)}out:{shard}"


def fence(entity: str) -> str:
    """Set and deleted at once: a replicated write in E's slot (``bridge.outbox.node_held``)."""
    return _tag(entity) + "fence"


def stats(entity: str) -> str:
    """Per-entity pending counters."""
    return _tag(entity) + "stats"


def message_id_prefix(entity: str) -> str:
    """Prefix of the idempotency marker hashes; a bucket's key is this plus the bucket number."""
    return _tag(entity) + "mid:"


def ingress(entity: str) -> str:
    """The Redis door's stream."""
    return _tag(entity) + "in"


def ingest_lease(entity: str) -> str:
    """The lease of the entity's Redis-door mover: one mover at a time keeps the door's order."""
    return _tag(entity) + "lease:ingest"


def quarantine(entity: str) -> str:
    """Entries that failed validation."""
    return _tag(entity) + "quarantine"


def deadletter(entity: str) -> str:
    """The local dead-letter stream."""
    return _tag(entity) + "deadletter"


def layout(entity: str) -> str:
    """The shard layout writers and drainers agree on (``bridge.core.layout``)."""
    return _tag(entity) + "layout"


def drain_wake(member: str) -> str:
    """The stream that ends the blocking wait of one process's shard watcher early."""
    return f"bridge:{{bridge}}:wake:{member}"
