"""Per-process wiring of the delivery side: settings, Redis, the outbox reader, the namespace pool, state.

One ``DeliveryContext`` per worker process, built lazily on first use *after* the fork (Celery prefork
children must not share the parent's sockets or SDK clients; ``reset_after_fork`` drops an inherited one).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bridge.core.backoff import BackoffPolicy
from bridge.core.error_classes import EscalationPolicy
from bridge.core.roles import Role
from bridge.delivery.attempts import Streaks
from bridge.errors import StateStoreUnavailableError
from bridge.journal.store import JournalStore
from bridge.outbox.reader import OutboxReader
from bridge.redis.clock import RedisClock
from bridge.redis.connection import sync_client
from bridge.servicebus.pool import NamespacePool
from bridge.settings import Settings
from bridge.state.cost import CostStore
from bridge.state.history import LatencyStore
from bridge.state.paired import PairedStore
from bridge.state.resume import ResumeSignals
from bridge.state.retry import LeaseStore, RetryStore
from bridge.state.roles import RoleStore

log = logging.getLogger(__name__)


@dataclass
class DeliveryContext:
    """Everything a drain, sweep, ping or syphon needs in this process."""

    settings: Settings
    redis: Any
    reader: OutboxReader
    pool: NamespacePool
    roles: RoleStore
    retry: RetryStore
    leases: LeaseStore
    paired: PairedStore
    cost: CostStore
    streaks: Streaks
    backoff: BackoffPolicy
    journal: JournalStore | None = None
    """The lifecycle journal (``bridge.journal``); None in contexts built without one."""
    latency: LatencyStore | None = None
    """The shared delivery-latency histograms of the status page's history; None: not recorded."""
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    current_backlog: dict[str, int] = field(default_factory=dict)
    clock: Any = time.time
    """What this process reads as "now" (epoch seconds). ``build`` makes it Redis's clock
    (``bridge.redis.clock.RedisClock``): times stored for other processes, on other hosts, to compare with
    their own "now" (failover timer, pings, probes, rotation, role swaps) are then on one clock."""
    monotonic: Any = time.monotonic
    """This process's monotonic clock, for how long ago this process saw something (``ROLES_FRESH``):
    ``clock`` follows Redis's, which may step back or forward when Redis fails over to another server."""

    @classmethod
    def build(cls, settings: Settings) -> DeliveryContext:
        """Connect the adapters (lazily: the pool opens SDK clients on first send)."""
        client = sync_client(settings.redis_url.get_secret_value())
        retry = settings.retry
        return cls(
            settings=settings,
            redis=client,
            reader=OutboxReader(client, settings),
            pool=NamespacePool(settings),
            roles=RoleStore(client),
            retry=RetryStore(client),
            leases=LeaseStore(client),
            paired=PairedStore(client),
            cost=CostStore(client),
            streaks=Streaks(
                EscalationPolicy(retry.transient_failures_to_outage, retry.transient_seconds_to_outage)
            ),
            backoff=BackoffPolicy(retry.outbox_backoff_factor, retry.outbox_backoff_max),
            journal=JournalStore(client, settings.journal),
            latency=LatencyStore(client) if settings.status_history.enabled else None,
            clock=RedisClock(client),
        )

    @property
    def resume(self) -> ResumeSignals:
        """The namespace-back stream and the scout claim (``bridge.state.resume``)."""
        return ResumeSignals(self.redis)

    def seen_back(self, role: Role, entity: str, why: str) -> None:
        """Tell every worker that a namespace took messages again, so their backing-off shards try now.
        Best effort: without it they wait out their backoffs, as before."""
        try:
            self.resume.seen_back(role, entity, why)
        except StateStoreUnavailableError as exc:
            log.info("namespace %s seen back for %s, not announced: %s", role, entity, exc)

    def close(self) -> None:
        """Close SDK clients and the Redis connection pool."""
        self.pool.close()
        self.redis.close()


class _ProcessContext:
    """The one context of this process, rebuilt when the pid changes (a forked child)."""

    lock = threading.Lock()
    context: DeliveryContext | None = None
    pid: int | None = None


def get_context(settings: Settings) -> DeliveryContext:
    """This process's context (built on first call; rebuilt in a forked child).

    ``settings`` are the ones the process loaded once at start-up (``workers.app.settings``); they are
    only used when the context is built.
    """
    with _ProcessContext.lock:
        if _ProcessContext.context is None or _ProcessContext.pid != os.getpid():
            _ProcessContext.context = DeliveryContext.build(settings)
            _ProcessContext.pid = os.getpid()
        return _ProcessContext.context


def reset_after_fork() -> None:
    """Forget a context inherited from the parent process (its sockets belong to the parent)."""
    with _ProcessContext.lock:
        _ProcessContext.context, _ProcessContext.pid = None, None
