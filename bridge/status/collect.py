"""What ``bridge status --json`` prints: one JSON object, a PUBLIC CONTRACT for scripts and dashboards.

Keys are only ever added, never renamed or retyped (``docs/operations.md``). The contract::

    {"entities": [{"name": str,
                   "replication": "passive" | "active" | "paired" | "none",
                   "active": "primary" | "secondary",
                   "namespaces": {"primary":   {"available": bool, "last_error": str | null},
                                  "secondary": {"available": bool, "last_error": str | null}},
                   "outbox_depth": int,            # messages in the outbox, not yet accepted by Service Bus
                   "dead_letter_depth": int}]}     # entries in the local dead-letter stream

Additive fields: per entity ``configured``, ``epoch``, ``role_swapped_at``, ``role_reason``,
``outbox_bytes``, ``quarantine_depth``, ``ingress_depth``, ``max_problem_entries`` (the bound of each
problem stream) and ``problem_streams_full`` (``"quarantine"`` / ``"deadletter"`` for each stream at that
bound: its entries are held where they are, ``docs/durability.md``; empty when none),
``retry_not_before`` (shard -> epoch seconds
on Redis's clock), ``cost`` (``CostTally`` counters and ``total``), per namespace ``configured``, ``since``,
``last_error_at``, ``last_error_trace_id`` (the trace that shows the failed send, ``docs/tracing.md``; null
when none), ``error_class``, ``checked_at`` / ``check_ok`` / ``check_error`` (the last probe of a
namespace that carries no traffic for the entity, ``bridge.delivery.probe``; null when never probed),
``journal`` (``enabled``, ``length``: entries in the entity's journal stream not yet rolled,
``max_length``, ``overflow``: events per kind that found the stream full since the last roll — non-empty
means the roller is behind or down), and for paired entities ``paired`` (``failed_over``,
``failing_since``, ``failed_over_at``, ``last_failover_at`` (kept after the restore), ``last_ping_at``,
``last_error``, ``last_error_at``, ``barriers``: the restore barriers its shards wait for, each
``{"shard", "queue", "state", "sent_at", "resends"}`` with ``state`` ``open`` / ``sending`` / ``waiting``
/ ``lost`` — not passed within ``paired.barrier_timeout``, or sent again after that; empty when none,
docs/paired.md); at the top ``cost`` (totals), ``durability`` (``mode``, ``wait_replicas``,
``wait_timeout``: ``ingress.durability``, docs/durability.md), ``ledger`` (the live ledger's last publication,
``bridge.state.live_ledger``: ``verdict`` — ``ok``, ``overdue``, ``incomplete`` or ``no data`` —
``reasons``, ``overdue``, ``published_at`` and per entity its counts and ``overdue_ids``; null when no live
ledger runs), ``redis`` (``bridge.redis.server_info``: role,
topology, AOF, memory, replicas with their lag; null on a Cluster or where ``INFO`` is refused) and, when an
entity is paired, ``backlog`` (the rotation of the backlog queues).

For a paired entity, ``active`` is ``"secondary"`` while failover is engaged (its messages go to the
secondary namespace's backlog queues) and the primary then shows as unavailable; the newer of the health
record's and the paired state's errors is its ``last_error``. Entities are those configured plus those in
the outbox's entity set, sorted by name. Every text that came from an error passes ``scrub_secrets`` again
here.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from bridge.core.barriers import read_barrier
from bridge.core.outcomes import scrub_secrets
from bridge.core.paired import PairedState
from bridge.core.roles import ROLES, NamespaceHealth, Role
from bridge.journal.store import JournalStore
from bridge.outbox.reader import OutboxReader
from bridge.redis.clock import server_time
from bridge.redis.server_info import cluster_replicas, redis_section
from bridge.redis.types import SyncRedis
from bridge.settings import Settings
from bridge.state.backlog import BacklogLedger
from bridge.state.cost import CostStore
from bridge.state.live_ledger import LiveLedgerStore
from bridge.state.paired import PairedStore
from bridge.state.probes import ProbeRecord, ProbeStore
from bridge.state.retry import RetryStore
from bridge.state.roles import RoleStore


def _scrubbed(text: str | None) -> str | None:
    return None if text is None else scrub_secrets(text)


def _namespace(health: NamespaceHealth, configured: bool, probe: ProbeRecord | None) -> dict[str, Any]:
    return {
        "available": health.available,
        "last_error": _scrubbed(health.last_error),
        "configured": configured,
        "since": health.since,
        "last_error_at": health.last_error_at,
        "last_error_trace_id": health.last_error_trace_id,
        "error_class": health.error_class.value if health.error_class else None,
        # The last probe of a namespace without traffic (bridge.delivery.probe): when it was measured.
        "checked_at": probe.at if probe else None,
        "check_ok": probe.ok if probe else None,
        "check_error": _scrubbed(probe.error) if probe else None,
    }


def _paired_primary(view: dict[str, Any], state: PairedState) -> None:
    # Failover engaged means no primary sends: the primary is unavailable for this entity whatever the
    # last health record said; its newest error is whichever of the two was recorded last.
    if state.failed_over:
        view["available"] = False
    if state.last_error is not None and (state.last_error_at or 0.0) >= (view["last_error_at"] or 0.0):
        view["last_error"] = _scrubbed(state.last_error)
        view["last_error_at"] = state.last_error_at
        view["last_error_trace_id"] = None


def _paired_view(state: PairedState) -> dict[str, Any]:
    return {
        "failed_over": state.failed_over,
        "failing_since": state.failing_since,
        "failed_over_at": state.failed_over_at,
        "last_failover_at": state.last_failover_at,
        "last_ping_at": state.last_ping_at,
        "last_error": _scrubbed(state.last_error),
        "last_error_at": state.last_error_at,
    }


def entity_status(settings: Settings, client: SyncRedis, name: str) -> dict[str, Any]:
    """The status record of one entity (see the module docstring for its fields)."""
    options = settings.entity(name)
    roles, paired = RoleStore(client), PairedStore(client)
    role = roles.get(name)
    healths = roles.healths(name)
    depth = OutboxReader(client, settings).depth(name)
    cost = CostStore(client).get(name)
    configured: dict[Role, bool] = {
        "primary": settings.primary is not None,
        "secondary": settings.secondary is not None,
    }
    probes = ProbeStore(client).last(name)
    namespaces = {r: _namespace(healths[r], configured[r], probes[r]) for r in ROLES}
    active: Role = role.active
    record: dict[str, Any] = {
        "name": name,
        "replication": options.replication,
        "active": active,
        "namespaces": namespaces,
        "outbox_depth": depth["pending_messages"],
        "dead_letter_depth": depth["deadletter"],
        "configured": name in settings.entities,
        "epoch": role.epoch,
        "role_swapped_at": role.swapped_at,
        "role_reason": _scrubbed(role.reason),
        "outbox_bytes": depth["pending_bytes"],
        "quarantine_depth": depth["quarantine"],
        "ingress_depth": depth["ingress"],
        "max_problem_entries": options.max_problem_entries,
        "problem_streams_full": [
            which for which in ("quarantine", "deadletter") if depth[which] >= options.max_problem_entries
        ],
        "retry_not_before": {str(k): v for k, v in sorted(RetryStore(client).all_not_before(name).items())},
        "cost": {**asdict(cost), "total": cost.total},
        "journal": _journal(settings, client, name),
    }
    if options.replication == "paired":
        state = paired.get(name)
        _paired_primary(namespaces["primary"], state)
        if state.failed_over:
            record["active"] = "secondary"
        record["paired"] = _paired_view(state)
        record["paired"]["barriers"] = _barriers(settings, client, name)
    return record


def _barriers(settings: Settings, client: SyncRedis, name: str) -> list[dict[str, Any]]:
    """Every restore barrier the entity's shards wait for (ordered restore), oldest state first: shard,
    backlog queue index, ``state`` (``bridge.core.barriers.read_barrier``), ``sent_at``, ``resends``."""
    now = server_time(client)
    ledger = BacklogLedger(client)
    timeout = settings.paired.barrier_timeout
    out = []
    for shard in range(settings.entity(name).outbox_shards):
        for index, status in sorted(ledger.queues(name, shard).items()):
            read = read_barrier(status, now, timeout)
            out.append(
                {
                    "shard": shard,
                    "queue": index,
                    "state": read.state,
                    "sent_at": read.sent_at,
                    "resends": read.resends,
                }
            )
    return out


def _journal(settings: Settings, client: SyncRedis, name: str) -> dict[str, Any]:
    store = JournalStore(client, settings.journal)
    return {
        "enabled": settings.journal.enabled,
        "length": store.length(name),
        "max_length": settings.journal.max_length,
        "overflow": store.overflow(name),
    }


def backlog_status(settings: Settings, client: SyncRedis, now: float) -> dict[str, Any] | None:
    """The shared backlog rotation, or None without a primary namespace to name the queues after."""
    if settings.primary is None:
        return None
    namespace = settings.primary.namespace_name
    count = settings.paired.backlog_queue_count
    store = PairedStore(client)
    rotation = store.rotation(namespace, count)
    errors = store.rotation_errors(namespace)
    return {
        "namespace": namespace,
        "count": count,
        "in_rotation": list(rotation.in_rotation(now, settings.paired.backlog_readmit_after)),
        "removed": {
            str(index): {"at": at, "error": _scrubbed(errors.get(index))}
            for index, at in sorted(rotation.removed.items())
        },
    }


def collect_status(settings: Settings, client: SyncRedis, now: float | None = None) -> dict[str, Any]:
    """The whole ``bridge status --json`` object; ``now`` (default: Redis's clock, the one the removal
    times are on) decides readmitted queues."""
    names = sorted(set(settings.entities) | set(OutboxReader(client, settings).entities()))
    entities = [entity_status(settings, client, name) for name in names]
    totals = CostStore(client).totals()
    out: dict[str, Any] = {"entities": entities, "cost": {**asdict(totals), "total": totals.total}}
    ingress = settings.ingress
    out["durability"] = {
        "mode": ingress.durability,
        "wait_replicas": ingress.wait_replicas,
        "wait_timeout": ingress.wait_timeout,
    }
    out["redis"] = redis_section(client)
    on_masters = cluster_replicas(client)
    if on_masters is not None:
        out["cluster_replicas"] = [asdict(replica) for replica in on_masters]
    if any(e["replication"] == "paired" for e in entities):
        backlog = backlog_status(settings, client, server_time(client) if now is None else now)
        if backlog is not None:
            out["backlog"] = backlog
    out["ledger"] = LiveLedgerStore(client).read()
    return out
