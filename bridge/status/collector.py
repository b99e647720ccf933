"""``StateCollector``: the shared state in Redis as Prometheus series, read at scrape time.

Outbox depth and oldest age, roles, availability, backlog depth and rotation, billable operations and the
receiver's counters live in Redis, written by whichever process acted; a per-process gauge would only
know what its own process saw. Reading them when scraped (``bridge.status.snapshot``) gives every
endpoint the same numbers. Series names and help are defined in ``bridge.observability.metrics``.

A scrape during a Redis outage yields ``bridge_state_up 0`` and nothing else from this collector, so the
endpoint still answers and the per-process series stay visible.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from bridge.errors import BridgeError
from bridge.observability import metrics as m
from bridge.status.snapshot import StateReader

log = logging.getLogger(__name__)

Family = GaugeMetricFamily | CounterMetricFamily


def _family(spec: m.StateMetric) -> Family:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))


def families_from_snapshot(snapshot: dict[str, Any]) -> list[Family]:
    """Every state series of one snapshot (see ``metrics.STATE_METRICS``)."""
    fam = {spec.name: _family(spec) for spec in m.STATE_METRICS}

    def add(spec: m.StateMetric, labels: list[str], value: float) -> None:
        fam[spec.name].add_metric(labels, value)

    add(m.STATE_UP, [], 1)
    for entity in snapshot["entities"]:
        name = entity["name"]
        add(m.OUTBOX_MESSAGES, [name], entity["outbox_depth"])
        add(m.OUTBOX_BYTES, [name], entity["outbox_bytes"])
        add(m.OUTBOX_OLDEST_AGE, [name], entity["outbox_oldest_age"])
        add(m.DEADLETTER_MESSAGES, [name], entity["dead_letter_depth"])
        add(m.QUARANTINE_MESSAGES, [name], entity["quarantine_depth"])
        add(m.INGRESS_STREAM_MESSAGES, [name], entity["ingress_depth"])
        add(m.ROLE_EPOCH, [name], entity["epoch"])
        for role, namespace in entity["namespaces"].items():
            add(m.ROLE_ACTIVE, [name, role], 1 if entity["active"] == role else 0)
            add(m.NAMESPACE_AVAILABLE, [name, role], 1 if namespace["available"] else 0)
        if "paired" in entity:
            add(m.PAIRED_FAILED_OVER, [name], 1 if entity["paired"]["failed_over"] else 0)
            states = [b["state"] for b in entity["paired"].get("barriers", [])]
            add(m.RESTORE_BARRIERS, [name, "waiting"], len(states) - states.count("lost"))
            add(m.RESTORE_BARRIERS, [name, "lost"], states.count("lost"))
        for operation, count in entity["cost"].items():
            if operation != "total":
                add(m.BILLABLE_OPERATIONS, [name, operation], count)
        for result, count in entity["receiver"].items():
            add(m.RECEIVER_MESSAGES, [name, result], count)
    server = snapshot.get("redis")
    if server is not None:
        add(m.REDIS_AOF_ENABLED, [], 1 if server["aof_enabled"] else 0)
        add(m.REDIS_AOF_WRITE_OK, [], 1 if server["aof_last_write_ok"] else 0)
        add(m.REDIS_USED_MEMORY, [], server["used_memory"])
        add(m.REDIS_MAXMEMORY, [], server["maxmemory"])
        add(m.REDIS_REPLICAS, [], server["connected_replicas"])
    replicas = (server or {}).get("replicas") or snapshot.get("cluster_replicas") or []
    for replica in replicas:
        add(m.REDIS_REPLICA_LAG_BYTES, [replica["address"]], replica["lag_bytes"])
        add(m.REDIS_REPLICA_LAG_SECONDS, [replica["address"]], replica["lag_seconds"])
    for spec, labels, value in _ledger_series(snapshot):
        add(spec, labels, value)
    backlog = snapshot.get("backlog")
    if backlog is not None:
        in_rotation = set(backlog["in_rotation"])
        for index, queue in enumerate(backlog.get("queues", [])):
            add(m.BACKLOG_IN_ROTATION, [queue], 1 if index in in_rotation else 0)
        for queue, depth in backlog.get("depths", {}).items():
            if depth["messages"] is not None:
                add(m.BACKLOG_MESSAGES, [queue], depth["messages"])
    return list(fam.values())


def _ledger_series(snapshot: dict[str, Any]) -> list[tuple[m.StateMetric, list[str], float]]:
    """The live ledger's series (none when no live ledger published, ``bridge.state.live_ledger``)."""
    ledger = snapshot.get("ledger")
    if ledger is None:
        return []
    out = [(m.LEDGER_OVERDUE, [name], float(e.get("overdue", 0))) for name, e in ledger["entities"].items()]
    published, generated = ledger.get("published_at"), snapshot.get("generated_at")
    if published is not None and generated is not None:
        out.append((m.LEDGER_PUBLISHED_AGE, [], max(0.0, float(generated) - float(published))))
    out.append((m.LEDGER_COMPLETE, [], 1.0 if ledger.get("verdict") in ("ok", "overdue") else 0.0))
    return out


class StateCollector(Collector):
    """Reads the shared state from Redis on every ``collect`` (through the process's ``StateReader``)."""

    def __init__(self, reader: StateReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()

    def describe(self) -> list[Any]:
        # Nothing up front: names are checked against m.STATE_METRICS by the tests instead, and a registry
        # must not call collect() (a Redis round trip) merely to register this collector.
        return []

    def collect(self) -> Iterator[Family]:
        """The state series, or ``bridge_state_up 0`` when Redis cannot be read."""
        with self._lock:
            try:
                snapshot = self.reader.snapshot()
            except BridgeError as exc:
                log.debug("state scrape failed: %s", exc)
                down = _family(m.STATE_UP)
                down.add_metric([], 0)
                yield down
                return
        yield from families_from_snapshot(snapshot)
