"""Every Prometheus metric of the bridge, in one place (``docs/operations.md``, "Metrics", lists them).

Two kinds of series:

* **Per-process events** — ingress answers, send results and latencies, failovers, pings, syphon moves —
  are counters and histograms kept in the process that saw the event. Under Celery's prefork pool each
  child writes its own file in ``PROMETHEUS_MULTIPROC_DIR`` and the worker's main process serves their sum
  (``bridge.status.exposition``), so a child's counts survive its exit and nothing is counted
  twice.
* **Shared state** that lives in Redis — outbox depth and oldest age, roles, namespace availability,
  backlog depth, billable operations, receiver counters — is read from Redis at scrape time by
  ``bridge.status.collector.StateCollector`` under the names defined here, so every endpoint that
  serves it reports the same numbers (aggregate those with ``max``, never ``sum``).

Naming follows Prometheus practice: the ``bridge_`` prefix, base units (seconds, bytes), ``_total`` on
counters. No label ever holds a MessageId or another per-message value; entity names are labels, so the
ingress counts accepted messages per entity only after the entity passed validation.

Under a prefork pool, ``exposition.prepare_multiprocess`` must run before the first ``labels(...)`` call:
prometheus_client picks the storage of a value (memory or a per-process file) when the value is created.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter, Histogram

from bridge.core.outcomes import Outcome

# ---- per-process series --------------------------------------------------------------------------------

INGRESS_ACCEPTED = Counter(
    "bridge_ingress_accepted_messages_total",
    "Messages the ingress stored in the outbox (duplicates of a remembered MessageId not included).",
    ["door", "entity"],
)
INGRESS_DUPLICATES = Counter(
    "bridge_ingress_duplicate_messages_total",
    "Messages whose MessageId was already in the idempotency window: answered, not stored again.",
    ["door", "entity"],
)
INGRESS_REJECTED = Counter(
    "bridge_ingress_rejected_total",
    "Refused HTTP requests and quarantined Redis-door entries, by error code.",
    ["door", "reason"],
)
SEND_MESSAGES = Counter(
    "bridge_send_messages_total",
    "Messages handed to a namespace, by namespace (primary/secondary), role (direct/backlog) and result "
    "(accepted, or the error class).",
    ["entity", "namespace", "role", "result"],
)
SEND_DURATION = Histogram(
    "bridge_send_duration_seconds",
    "Duration of one batched send call to a namespace (including the SDK's own retries).",
    ["namespace", "role"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
DELIVERY_LATENCY = Histogram(
    "bridge_delivery_latency_seconds",
    "From the outbox write to the namespace's acceptance, per acknowledged message.",
    ["entity"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
)
FAILOVERS = Counter(
    "bridge_failovers_total",
    "Failovers this process applied: a passive role swap or a paired failover engaging.",
    ["entity", "kind"],
)
RESTORES = Counter(
    "bridge_restores_total",
    "Paired entities this process saw become available again (failover ended).",
    ["entity"],
)
NAMESPACE_TRANSITIONS = Counter(
    "bridge_namespace_transitions_total",
    "Changes of a namespace's availability for an entity, as recorded by this process.",
    ["entity", "namespace", "available"],
)
ROTATION_REMOVALS = Counter(
    "bridge_backlog_rotation_removals_total",
    "Backlog queues this process took out of the rotation after a failed send.",
    ["queue"],
)
QUARANTINED = Counter(
    "bridge_quarantined_messages_total",
    "Outbox or Redis-door entries moved to the quarantine stream, by source.",
    ["entity", "source"],
)
DEAD_LETTERED = Counter(
    "bridge_dead_lettered_messages_total",
    "Messages moved to the local dead-letter stream (Service Bus will never take them).",
    ["entity"],
)
PROBLEM_STREAM_FULL = Counter(
    "bridge_problem_stream_full_total",
    "Entries held back (left in the outbox or the ingress stream) because their quarantine or dead-letter "
    "stream was at entities.<name>.max_problem_entries.",
    ["entity", "stream"],
)
PINGS = Counter(
    "bridge_pings_total",
    "Pings of failed-over paired entities, by result (accepted, or the error class).",
    ["entity", "result"],
)
SYPHON_MESSAGES = Counter(
    "bridge_syphon_messages_total",
    "Backlog messages the syphon handled, by backlog queue and result (sent, dead_lettered, set_aside; "
    "recovered: deferred messages whose set-aside record Redis had lost, found by the scan).",
    ["queue", "result"],
)

# ---- shared state, read from Redis at scrape time (StateCollector) -----------------------------------


@dataclass(frozen=True)
class StateMetric:
    """Name, help and labels of one series the state collector builds at scrape time."""

    name: str
    help: str
    labels: tuple[str, ...]
    kind: str = "gauge"


STATE_UP = StateMetric("bridge_state_up", "1 when the last scrape could read the shared state.", ())
OUTBOX_MESSAGES = StateMetric(
    "bridge_outbox_messages", "Messages in the outbox, not yet accepted.", ("entity",)
)
OUTBOX_BYTES = StateMetric("bridge_outbox_bytes", "Bytes of the messages in the outbox.", ("entity",))
OUTBOX_OLDEST_AGE = StateMetric(
    "bridge_outbox_oldest_age_seconds",
    "Age of the oldest message still in the outbox (0: empty).",
    ("entity",),
)
DEADLETTER_MESSAGES = StateMetric(
    "bridge_deadletter_messages", "Entries in the local dead-letter stream.", ("entity",)
)
QUARANTINE_MESSAGES = StateMetric(
    "bridge_quarantine_messages", "Entries in the quarantine stream.", ("entity",)
)
INGRESS_STREAM_MESSAGES = StateMetric(
    "bridge_ingress_stream_messages", "Redis-door entries not yet validated.", ("entity",)
)
ROLE_ACTIVE = StateMetric(
    "bridge_role_active",
    "1 for the namespace the entity's messages go to now (paired: secondary while failed over).",
    ("entity", "namespace"),
)
ROLE_EPOCH = StateMetric("bridge_role_epoch", "Role swaps of the entity so far (passive mode).", ("entity",))
NAMESPACE_AVAILABLE = StateMetric(
    "bridge_namespace_available",
    "1 while the namespace is available for the entity.",
    ("entity", "namespace"),
)
PAIRED_FAILED_OVER = StateMetric(
    "bridge_paired_failed_over", "1 while paired failover is engaged for the entity.", ("entity",)
)
RESTORE_BARRIERS = StateMetric(
    "bridge_restore_barriers",
    "Restore barriers a paired entity's shards wait for, by state (lost: not passed within "
    "paired.barrier_timeout and sent again; the shard sends nothing to the primary until one passes).",
    ("entity", "state"),
)
BACKLOG_MESSAGES = StateMetric(
    "bridge_backlog_messages",
    "Active messages in a backlog queue of the secondary namespace (cached a few seconds).",
    ("queue",),
)
BACKLOG_IN_ROTATION = StateMetric(
    "bridge_backlog_in_rotation", "1 while the backlog queue is in the send rotation.", ("queue",)
)
BILLABLE_OPERATIONS = StateMetric(
    "bridge_billable_operations",
    "Billable Service Bus operations the bridge performed, by kind (counter kept in Redis).",
    ("entity", "operation"),
    kind="counter",
)
RECEIVER_MESSAGES = StateMetric(
    "bridge_receiver_messages",
    "The receiver's counters in Redis: received_primary, handled, duplicates_suppressed, pings_dropped...",
    ("entity", "counter"),
    kind="counter",
)
REDIS_AOF_ENABLED = StateMetric(
    "bridge_redis_aof_enabled", "1 while the Redis server writes its append-only file (AOF).", ()
)
REDIS_AOF_WRITE_OK = StateMetric(
    "bridge_redis_aof_last_write_ok", "1 when the Redis server's last AOF write succeeded.", ()
)
REDIS_USED_MEMORY = StateMetric("bridge_redis_used_memory_bytes", "Memory the Redis server uses.", ())
REDIS_MAXMEMORY = StateMetric(
    "bridge_redis_maxmemory_bytes", "The Redis server's maxmemory (0: no limit).", ()
)
REDIS_REPLICAS = StateMetric("bridge_redis_connected_replicas", "Replicas connected to the Redis server.", ())
REDIS_REPLICA_LAG_BYTES = StateMetric(
    "bridge_redis_replica_lag_bytes",
    "Bytes of its primary's replication stream the replica has not acknowledged (every Cluster master's).",
    ("replica",),
)
REDIS_REPLICA_LAG_SECONDS = StateMetric(
    "bridge_redis_replica_lag_seconds",
    "Seconds since the replica last acknowledged its primary (it does so every second when healthy).",
    ("replica",),
)

LEDGER_OVERDUE = StateMetric(
    "bridge_ledger_overdue_messages",
    "Accepted messages with no end after journal.live_ledger.overdue_after seconds, per the live ledger's "
    "last publication (absent when no live ledger publishes).",
    ("entity",),
)
LEDGER_PUBLISHED_AGE = StateMetric(
    "bridge_ledger_publication_age_seconds",
    "Seconds since the live ledger last published its verdict (absent when none is in Redis).",
    (),
)
LEDGER_COMPLETE = StateMetric(
    "bridge_ledger_complete",
    "1 when the live ledger read every journal file and event it was given and has read some (its verdict "
    "is ok or overdue), 0 when it is incomplete or has no data.",
    (),
)

STATE_METRICS: tuple[StateMetric, ...] = (
    STATE_UP,
    LEDGER_OVERDUE,
    LEDGER_PUBLISHED_AGE,
    LEDGER_COMPLETE,
    OUTBOX_MESSAGES,
    OUTBOX_BYTES,
    OUTBOX_OLDEST_AGE,
    DEADLETTER_MESSAGES,
    QUARANTINE_MESSAGES,
    INGRESS_STREAM_MESSAGES,
    ROLE_ACTIVE,
    ROLE_EPOCH,
    NAMESPACE_AVAILABLE,
    PAIRED_FAILED_OVER,
    RESTORE_BARRIERS,
    BACKLOG_MESSAGES,
    BACKLOG_IN_ROTATION,
    BILLABLE_OPERATIONS,
    RECEIVER_MESSAGES,
    REDIS_AOF_ENABLED,
    REDIS_AOF_WRITE_OK,
    REDIS_USED_MEMORY,
    REDIS_MAXMEMORY,
    REDIS_REPLICAS,
    REDIS_REPLICA_LAG_BYTES,
    REDIS_REPLICA_LAG_SECONDS,
)


PROCESS_METRICS: tuple[Counter | Histogram, ...] = (
    INGRESS_ACCEPTED,
    INGRESS_DUPLICATES,
    INGRESS_REJECTED,
    SEND_MESSAGES,
    SEND_DURATION,
    DELIVERY_LATENCY,
    FAILOVERS,
    RESTORES,
    NAMESPACE_TRANSITIONS,
    ROTATION_REMOVALS,
    QUARANTINED,
    DEAD_LETTERED,
    PROBLEM_STREAM_FULL,
    PINGS,
    SYPHON_MESSAGES,
)
"""Every per-process series. Each has labels, so importing this module creates no value yet: a value (in
memory or in a multiprocess file) is created by the first ``labels(...)`` call, after start-up chose the
storage (``exposition.prepare_multiprocess``)."""


def forget_entity(entity: str) -> int:
    """Remove ``entity``'s label sets from every per-process series (it retired); how many went.

    In multiprocess mode (a prefork worker's pool process) the values live in the process's metrics file,
    which keeps every value it was given, so nothing is removed here: the serving process leaves out the
    series of entities no longer listed (``bridge.status.exposition``), and a returning entity goes
    on from its earlier count.
    """
    if multiprocess():
        return 0
    removed = 0
    for metric in PROCESS_METRICS:
        names = list(metric._labelnames)
        if "entity" not in names:
            continue
        at = names.index("entity")
        for labels in [labels for labels in list(metric._metrics) if labels[at] == entity]:
            metric.remove(*labels)
            removed += 1
    return removed


def multiprocess() -> bool:
    """True when this process keeps its metric values in files (``exposition.prepare_multiprocess``)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def values_created() -> bool:
    """True once any per-process series has a labelled child (its value storage is then fixed)."""
    return any(metric._metrics for metric in PROCESS_METRICS)


# ---- one-call recorders for the hot paths --------------------------------------------------------------


def result_label(outcome: Outcome) -> str:
    """``accepted``, or the failure's error class (``outage``, ``transient``, ...)."""
    if outcome.ok:
        return "accepted"
    return outcome.error_class.value if outcome.error_class is not None else "failed"


def record_send(
    entity: str, namespace: str, backlog: bool, outcomes: Sequence[Outcome], seconds: float
) -> None:
    """One batched send: per-message results and the call's duration."""
    role = "backlog" if backlog else "direct"
    SEND_DURATION.labels(namespace, role).observe(seconds)
    counts: dict[str, int] = {}
    for outcome in outcomes:
        label = result_label(outcome)
        counts[label] = counts.get(label, 0) + 1
    for label, count in counts.items():
        SEND_MESSAGES.labels(entity, namespace, role, label).inc(count)


def record_delivered(entity: str, entry_ids: Iterable[str], now: float) -> None:
    """Acknowledged outbox entries: their age (the stream entry id starts with the write's milliseconds)."""
    histogram = DELIVERY_LATENCY.labels(entity)
    for entry_id in entry_ids:
        millis, _, _ = entry_id.partition("-")
        if millis.isdigit():
            histogram.observe(max(0.0, now - int(millis) / 1000.0))


def record_ingress(door: str, entity: str, accepted: int, duplicates: int) -> None:
    """Messages a door stored (and duplicates it answered without storing)."""
    if accepted:
        INGRESS_ACCEPTED.labels(door, entity).inc(accepted)
    if duplicates:
        INGRESS_DUPLICATES.labels(door, entity).inc(duplicates)


def record_rejected(door: str, reason: str, count: int = 1) -> None:
    """A refused request (HTTP) or quarantined entries (Redis door), by error code."""
    INGRESS_REJECTED.labels(door, reason).inc(count)


def record_redis_door(entity: str, moved: int, duplicates: int, codes: Sequence[str]) -> None:
    """What one Redis-door move did: stored, duplicates, and the codes of the quarantined entries."""
    record_ingress("redis", entity, moved, duplicates)
    for code in codes:
        record_rejected("redis", code)


def record_ping(entity: str, outcome: Outcome) -> None:
    """One ping of a failed-over paired entity."""
    PINGS.labels(entity, result_label(outcome)).inc()


class SyphonQueueReport(Protocol):
    """What a syphon run reports per backlog queue (``bridge.paired.syphon.QueueReport``)."""

    queue: str
    sent: int
    dead_lettered: int
    set_aside: int
    recovered: int


def record_syphon(queues: Iterable[SyphonQueueReport]) -> None:
    """What one syphon run did to each backlog queue it held."""
    for q in queues:
        for result, count in (
            ("sent", q.sent),
            ("dead_lettered", q.dead_lettered),
            ("set_aside", q.set_aside),
            ("recovered", q.recovered),
        ):
            if count:
                SYPHON_MESSAGES.labels(q.queue, result).inc(count)
