"""One picture of the bridge's shared state, for the status page (``/status``) and the metrics collector.

It is ``bridge status --json`` (``bridge.status.collect_status``: roles, availability, outbox depths, cost,
backlog rotation) plus what an operator watching a failover wants next to it:

* per entity ``outbox_oldest_age`` (seconds since the oldest message still in the outbox was written:
  the stream entry id starts with the write's milliseconds), ``receiver`` (the entity's
  ``bridge.core.receiving.ReceiverCounts``, summed over every receiver process), ``last_failover`` and
  ``last_error`` (the newest of both namespaces' errors, with the ``trace_id`` of the send that failed
  and, when the ``trace_url`` setting names a trace viewer, ``trace_url``: its page of that trace);
* ``backlog.depths``: active messages per backlog queue, read from the secondary namespace's management
  endpoint by ``BacklogProbe`` (cached, bounded by a timeout) with when it was measured;
* ``syphon``: per backlog queue whether a syphon holds its lease now (and which process);
* ``namespace_names``: each role's namespace name (null when not configured), so every view names a
  namespace by role and name;
* ``redis`` and ``durability`` come with ``collect_status``: the server's role, AOF, memory, replicas and
  their lag, the topology (``bridge.redis.server_info``; null on a Cluster), and ``ingress.durability``.

Everything textual that came from an error has passed ``scrub_secrets``; nothing here reads a setting's
secret. Reads are blocking (callers in asyncio code run ``collect_snapshot`` in a thread).

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``OutboxUnavailableError``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from bridge.core.outcomes import describe_error, scrub_secrets
from bridge.core.paired import backlog_queue_paths
from bridge.core.syphon import syphon_lease_name
from bridge.core.trace_context import viewer_url
from bridge.errors import BridgeError
from bridge.outbox.view import oldest_written
from bridge.receiving.counters import counts_read
from bridge.redis.clock import server_time
from bridge.redis.connection import sync_client
from bridge.redis.lease import named_holders
from bridge.redis.pipelined import ReadBatch
from bridge.settings import Settings
from bridge.status.collect import collect_status

BACKLOG_TIMEOUT = 3.0


def entity_extras(settings: Settings, client: Any, name: str, now: float) -> dict[str, Any]:
    """Oldest outbox age and receiver counters of one entity, read through the outbox's and the receiver's
    readers in one round trip."""
    batch = ReadBatch(client)
    oldest = batch.add(oldest_written(name, settings.entity(name).outbox_shards))
    counters = batch.add(counts_read(name))
    batch.execute()
    written = oldest.value
    return {
        "outbox_oldest_age": 0.0 if written is None else max(0.0, now - written),
        "receiver": counters.value.as_dict(),
    }


def _last_failover(entity: dict[str, Any]) -> dict[str, Any] | None:
    paired = entity.get("paired")
    if paired and paired.get("failed_over_at") is not None:
        return {"at": paired["failed_over_at"], "kind": "paired", "reason": paired.get("last_error")}
    if paired and paired.get("last_failover_at") is not None:  # engaged earlier, restored since
        return {
            "at": paired["last_failover_at"],
            "kind": "paired (restored)",
            "reason": paired.get("last_error"),
        }
    if entity.get("role_swapped_at") is not None:
        return {"at": entity["role_swapped_at"], "kind": "swap", "reason": entity.get("role_reason")}
    return None


def _last_error(entity: dict[str, Any], trace_url: str | None) -> dict[str, Any] | None:
    newest: dict[str, Any] | None = None
    for role, namespace in entity["namespaces"].items():
        if namespace.get("last_error") and (
            newest is None or (namespace["last_error_at"] or 0) > newest["at"]
        ):
            trace = namespace.get("last_error_trace_id")
            newest = {
                "namespace": role,
                "at": namespace["last_error_at"] or 0,
                "error": namespace["last_error"],
                "trace_id": trace,
                "trace_url": viewer_url(trace_url, trace),
            }
    return newest


@dataclass(frozen=True)
class BacklogDepth:
    """Active messages of one backlog queue when last measured (``messages`` None: the read failed)."""

    queue: str
    messages: int | None
    measured_at: float
    error: str | None = None


class BacklogProbe:
    """Active message counts of the backlog queues through the secondary's management endpoint, cached.

    One probe per process; ``depths`` answers from the cache for ``ttl`` seconds (``paired.backlog_depth_ttl``
    unless given), so a busy status page or scraper costs at most one round of management calls per ``ttl``.
    Each call is bounded by ``timeout``; after the first failure the remaining queues are not asked (the
    namespace is probably down).
    """

    def __init__(self, settings: Settings, ttl: float | None = None, timeout: float = BACKLOG_TIMEOUT):
        self.settings = settings
        self.ttl = settings.paired.backlog_depth_ttl if ttl is None else ttl
        self.timeout = timeout
        self._lock = threading.Lock()
        self._cache: dict[str, BacklogDepth] = {}
        self._measured_at = 0.0

    def queues(self) -> list[str]:
        """The backlog queues of the configured primary namespace (empty without both namespaces)."""
        settings = self.settings
        if settings.primary is None or settings.secondary is None:
            return []
        return list(backlog_queue_paths(settings.primary.namespace_name, settings.paired.backlog_queue_count))

    def depths(self, now: float | None = None) -> dict[str, BacklogDepth]:
        """The cached depths, measured again when older than ``ttl``."""
        now = time.time() if now is None else now
        with self._lock:
            if self._cache and now - self._measured_at < self.ttl:
                return dict(self._cache)
            self._cache = self._measure(now)
            self._measured_at = now
            return dict(self._cache)

    def _measure(self, now: float) -> dict[str, BacklogDepth]:
        queues = self.queues()
        if not queues or self.settings.secondary is None:
            return {}
        from bridge.servicebus.admin import NamespaceAdmin  # the azure SDK only where a paired entity exists

        out: dict[str, BacklogDepth] = {}
        failure: str | None = None
        try:
            admin = NamespaceAdmin(
                self.settings.secondary, role="secondary", retry_total=0, timeout=self.timeout
            )
        except BridgeError as exc:
            return {q: BacklogDepth(q, None, now, describe_error(exc)) for q in queues}
        try:
            for queue in queues:
                if failure is not None:
                    out[queue] = BacklogDepth(queue, None, now, failure)
                    continue
                try:
                    props = admin.queue_runtime_properties(queue)
                    out[queue] = BacklogDepth(queue, int(props.active_message_count or 0), time.time())
                except BridgeError as exc:
                    failure = describe_error(exc)
                    out[queue] = BacklogDepth(queue, None, now, failure)
        finally:
            admin.close()
        return out


def syphon_state(settings: Settings, client: Any, queues: list[str]) -> dict[str, Any]:
    """Whether the syphon is enabled and which backlog queues a syphon holds right now (and who): the
    holders of their syphon leases, in one round trip."""
    names = {syphon_lease_name(queue): queue for queue in queues}
    batch = ReadBatch(client)
    holders = batch.add(named_holders(list(names)))
    batch.execute()
    held = {names[name]: owner for name, owner in holders.value.items()}
    return {"enabled": settings.paired.enable_syphon, "running": held}


class StateReader:
    """What a process needs to take snapshots: the settings, a blocking client (made on first use), and a
    ``BacklogProbe``; thread-safe, for the ingress's operator routes and the metrics collector."""

    def __init__(self, settings: Settings, backlog: bool = True) -> None:
        self.settings = settings
        self.backlog = BacklogProbe(settings) if backlog else None
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The blocking client (``bridge.redis.connection.sync_client`` of ``redis_url``)."""
        with self._lock:
            if self._client is None:
                self._client = sync_client(self.settings.redis_url.get_secret_value())
            return self._client

    def snapshot(self) -> dict[str, Any]:
        """``collect_snapshot`` now."""
        return collect_snapshot(self.settings, self.client(), backlog=self.backlog)


def collect_snapshot(
    settings: Settings, client: Any, *, now: float | None = None, backlog: BacklogProbe | None = None
) -> dict[str, Any]:
    """The status object (``collect_status``) with the extras listed in the module docstring."""
    # Redis's clock: outbox entry ids and the times workers store are on it, whatever this host's says.
    now = server_time(client) if now is None else now
    out = collect_status(settings, client, now)
    for entity in out["entities"]:
        entity.update(entity_extras(settings, client, entity["name"], now))
        entity["last_failover"] = _last_failover(entity)
        entity["last_error"] = _last_error(entity, settings.trace_url)
    paired = any(e["replication"] == "paired" for e in out["entities"])
    if paired and "backlog" in out:
        queues = list(backlog_queue_paths(out["backlog"]["namespace"], out["backlog"]["count"]))
        depths = backlog.depths(now) if backlog is not None else {}
        out["backlog"]["queues"] = queues
        out["backlog"]["depths"] = {
            q: {"messages": d.messages, "measured_at": d.measured_at, "error": _scrubbed(d.error)}
            for q, d in depths.items()
        }
        out["syphon"] = syphon_state(settings, client, queues)
    out["namespace_names"] = {
        "primary": settings.primary.namespace_name if settings.primary else None,
        "secondary": settings.secondary.namespace_name if settings.secondary else None,
    }
    out["generated_at"] = now
    return out


def _scrubbed(text: str | None) -> str | None:
    return None if text is None else scrub_secrets(text)
