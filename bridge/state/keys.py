"""Where the replication state lives in Redis (the outbox's layout is in ``bridge.outbox.keys``).

Same scheme as the outbox (``bridge.redis.keys``): every key of one entity carries the hash tag
``{<entity>}``, so on a Redis Cluster the role hash, both health hashes, the paired state, cost counters,
retry times and shard leases of an entity sit in the outbox's slot and a Lua script may touch any of them
together. Records shared by many
entities live under tags of their own and are never touched in the same script as an entity key.

=========================================  ==============================================================
key                                        holds
=========================================  ==============================================================
``bridge:{E}:role``                        hash ``RoleState`` (active, epoch, swapped_at, reason)
``bridge:{E}:health:<role>``               hash ``NamespaceHealth`` of the primary/secondary for E
``bridge:{E}:paired``                      hash ``PairedState`` (failover timer, failed_over_at, ping)
``bridge:{E}:cost``                        hash ``CostTally`` counters (HINCRBY)
``bridge:{E}:notbefore``                   hash shard -> epoch seconds (Redis's clock) before which not
                                           to retry it
``bridge:{E}:attempts``                    hash shard -> retries in a row of the shard's head entry
``bridge:{E}:delivered:<i>``               hash entry id -> targets that already accepted it (active
                                           mode, policy ``all``: not sent there again on retry)
``bridge:{E}:scheduled:<i>``               string, short PX: a drain of shard i is queued (-1: ingest)
``bridge:{E}:abandoned``                   hash ``<i>|<role>|<path>`` -> epoch seconds (Redis's clock)
                                           until which shard i sends nothing to that path after a
                                           send timed out there
                                           (``bridge.core.abandoned``; PX: gone when the last wait is)
``bridge:{E}:lease:<i>``                   string: owner of the drain lease of outbox shard i (PX ttl)
``bridge:{backlog:<N>}:rotation``          hash index -> removed_at, ``<index>.error`` -> why, for the
                                           backlog queues ``<N>/x-servicebus-transfer/<i>``
``bridge:{backlog:<N>}:queues``            set of backlog queue indexes in use or still holding messages
                                           (a lowered count: the syphon reads the others until empty)
``bridge:{bridge}:failed-over``            set of entities with failover engaged (what the ping visits)
``bridge:{bridge}:cost``                   hash ``CostTally``: totals over all entities
``bridge:{lease:<name>}``                  string: owner of a named lease (syphon per backlog queue, beat)
``bridge:{bridge}:drainers``               sorted set: live drainers (worker processes) -> expiry, ms
                                           (``bridge.state.drainers``: the fair share of shards)
``bridge:{bridge}:namespace-back``         stream (last 16): a namespace was seen back (``role``,
                                           ``entity``, ``why``); every shard watcher reads it and wakes
                                           its backing-off shards (``bridge.state.resume``)
``bridge:{bridge}:scout``                  string, PX: the process whose backing-off shard may try early
                                           this interval (``retry.outbox_scout_interval``)
``bridge:{bridge}:history``, ``...:slot``  the status page's samples and the last sampled slot;
                                           ``bridge:{E}:latency``: delivery latencies
                                           (``bridge.state.history``)
``bridge:{E}:probe:<role>``                hash ``at``, ``ok``, ``error``: the last probe of a namespace
                                           that carries no traffic for E (``bridge.delivery.probe``)
``bridge:{E}:backlog:<i>``                 hash backlog queue index -> ``open`` | ``wait:<t>`` | ``sent:<t>``:
                                           where shard i of E sent to the backlog since its last restore,
                                           and the restore barrier it waits for (``bridge.state.backlog``)
``bridge:{E}:backlog-keys:<i>``            hash key -> backlog queue index: the queue each key of shard i
                                           sticks to while failed over
``bridge:{E}:backlog-maps``                set of the shards i of E whose ``backlog-keys:<i>`` may name
                                           keys (where a shard looks for keys that moved to it)
``bridge:{aside:<Q>}:destinations``        set of destinations with messages the syphon set aside in
                                           backlog queue Q (``bridge.state.aside``)
``bridge:{aside:<Q>}:d:<E>``               sorted set: sequence numbers of E's set-aside messages in Q
``bridge:{aside:<Q>}:locks``               string, PX: a syphon of Q may still hold message locks
``bridge:{aside:<Q>}:scan``                hash: the scan of Q for lost set-aside records: its Redis server,
                                           where it resumes, whether it is complete (``aside_pass``)
``bridge:{bridge}:ledger``                 hash ``summary`` and ``entity:<E>`` (JSON): the live ledger's
                                           last publication (``bridge.state.live_ledger``)
=========================================  ==============================================================
"""

from __future__ import annotations

from bridge.core.roles import Role
from bridge.redis.keys import tag as _tag
from bridge.redis.keys import tagged

FAILED_OVER = "bridge:{bridge}:failed-over"
COST_TOTALS = "bridge:{bridge}:cost"
DRAINERS = "bridge:{bridge}:drainers"
NAMESPACE_BACK = "bridge:{bridge}:namespace-back"
SCOUT = "bridge:{bridge}:scout"
LIVE_LEDGER = "bridge:{bridge}:ledger"


def role(entity: str) -> str:
    """The entity's role hash (compare-and-swap target)."""
    return _tag(entity) + "role"


def health(entity: str, which: Role) -> str:
    """Availability of one namespace for the entity."""
    return f"{_tag(entity)}health:{which}"


def paired(entity: str) -> str:
    """Paired-mode failover state of the entity."""
    return _tag(entity) + "paired"


def ping_claim(entity: str) -> str:
    """Who pings the entity in this interval (``SET NX PX``): overlapping ping runs ping once."""
    return _tag(entity) + "ping-claim"


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


def abandoned(entity: str) -> str:
    """Waits of the entity's shards after a send timed out (``bridge.core.abandoned``)."""
    return _tag(entity) + "abandoned"


def shard_lease(entity: str, shard: int) -> str:
    """The drain lease of one outbox shard."""
    return f"{_tag(entity)}lease:{shard}"


def rotation(namespace: str) -> str:
    """The backlog rotation of the queues named after primary namespace ``namespace``."""
    return _tag("backlog:" + namespace) + "rotation"


def lease(name: str) -> str:
    """A named lease (one syphon per backlog queue, one beat scheduler)."""
    return tagged("lease:" + name)


def probe(entity: str, which: Role) -> str:
    """The last probe of one namespace for the entity (when, and what it found)."""
    return f"{_tag(entity)}probe:{which}"


def drainers() -> str:
    """The registry of live drainers (each worker process that owns outbox shards)."""
    return DRAINERS


def aside_destinations(queue: str) -> str:
    """Destinations with set-aside (deferred) messages in backlog queue ``queue``."""
    return _tag("aside:" + queue) + "destinations"


def aside(queue: str, destination: str) -> str:
    """Sequence numbers of ``destination``'s set-aside messages in backlog queue ``queue``."""
    return _tag("aside:" + queue) + "d:" + destination


def aside_locks(queue: str) -> str:
    """Present while a syphon of ``queue`` may hold message locks that outlive its run."""
    return _tag("aside:" + queue) + "locks"


def aside_scan(queue: str) -> str:
    """The scan of backlog queue ``queue`` for lost set-aside records: server, next sequence number, done."""
    return _tag("aside:" + queue) + "scan"


def backlog_queues(namespace: str) -> str:
    """Indexes of the backlog queues of primary namespace ``namespace`` that may hold messages."""
    return _tag("backlog:" + namespace) + "queues"


def backlog_ledger(entity: str, shard: int) -> str:
    """The backlog queues shard ``shard`` of ``entity`` used since its last restore, and their barriers."""
    return f"{_tag(entity)}backlog:{shard}"


def backlog_keys(entity: str, shard: int) -> str:
    """The backlog queue each key of shard ``shard`` of ``entity`` sticks to while failed over."""
    return f"{_tag(entity)}backlog-keys:{shard}"


def backlog_maps(entity: str) -> str:
    """The shards of ``entity`` whose key maps (``backlog_keys``) may name keys."""
    return f"{_tag(entity)}backlog-maps"
