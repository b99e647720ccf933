"""One syphon run: take the free backlog-queue leases, syphon those queues in parallel, hand them back.

How the syphon is scheduled (and why). A beat task fires every ``syphon_retry_interval``; each firing is
one bounded run (``syphon_run_budget``, default 60 s):

1. If every paired entity is failed over (or its FailoverInterval timer runs), nothing can be delivered:
   the run returns without polling (an idle poll is a billed operation).
2. It tries the lease ``syphon:<backlog queue path>`` of every backlog queue, in random order (so two
   concurrent runs share the queues rather than race for the same one first). A queue whose lease another
   syphon holds is skipped: at most one syphon per backlog queue across every worker and beat process.
3. It syphons the queues it got on one thread each (``BacklogSyphon``), long-polling each with
   ``syphon_receive_wait``, until the budget is spent; a keeper thread renews the leases every third of
   ``syphon_lease_ttl`` (owner-checked: a run whose lease was taken over stops at its next poll).
4. It releases the leases. The next firing, at most one interval later, takes them again.

Why bounded runs rather than one endless loop task: a Celery task that never returns would pin a worker
slot forever, block warm shutdown and survive a configuration change; a bounded run occupies one slot
(whatever the number of queues) for at most the budget plus one attempt deadline, and a run that dies
(``kill -9`` of its worker) only leaves leases that expire after ``syphon_lease_ttl``, after which the next
firing (within one interval) takes over. Threads rather than one task per queue: ten backlog queues would
otherwise take ten worker slots away from the drains.

Idle cost: one receive call per queue per long poll, ``3600 / min(syphon_receive_wait,
syphon_run_budget)`` per hour per queue (600 an hour for 10 queues at the defaults; raise both to 900 s for
the original's 40 an hour).
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from bridge.core.paired import backlog_queue_index, backlog_queue_path
from bridge.core.syphon import syphon_lease_name
from bridge.core.syphon_timing import lease_renew_interval, lease_ttl_ms, may_poll
from bridge.delivery.context import DeliveryContext
from bridge.errors import StateStoreUnavailableError
from bridge.observability import metrics
from bridge.paired.entities import paired_entities
from bridge.paired.syphon import BacklogSyphon, QueueReport
from bridge.redis.lease import Lease
from bridge.state.aside import AsideStore

log = logging.getLogger(__name__)


@dataclass
class SyphonReport:
    """What one run did: the queues it held (with what it did to each) and those another syphon held."""

    owner: str
    idle: str | None = None
    busy: list[str] = field(default_factory=list)
    queues: list[QueueReport] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """A JSON-able summary (the task's return value)."""
        return {
            "owner": self.owner,
            "idle": self.idle,
            "busy": self.busy,
            "held": [q.queue for q in self.queues],
            "receives": sum(q.receives for q in self.queues),
            "sent": sum(q.sent for q in self.queues),
            "dead_lettered": sum(q.dead_lettered for q in self.queues),
            "set_aside": sum(q.set_aside for q in self.queues),
            "recovered": sum(q.recovered for q in self.queues),
            "peeks": sum(q.peeks for q in self.queues),
            "stopped": {q.queue: q.stopped for q in self.queues if q.stopped},
        }


class LeaseKeeper:
    """Renews a set of held leases on a daemon thread; remembers the ones it lost."""

    def __init__(self, leases: dict[str, Lease], owner: str, lease_ttl: float) -> None:
        self.leases = leases
        self.owner = owner
        self.ttl_ms = lease_ttl_ms(lease_ttl)
        self.every = lease_renew_interval(lease_ttl)
        self.lost: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="syphon-leases", daemon=True)

    def holds(self, queue: str) -> bool:
        """The lease of ``queue`` was renewed in time so far."""
        return queue not in self.lost

    def start(self) -> None:
        """Start renewing."""
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            for queue, lease in self.leases.items():
                if queue in self.lost:
                    continue
                try:
                    if not lease.renew(self.owner, self.ttl_ms):
                        self.lost.add(queue)
                        log.warning("syphon lease of %s was taken over; stopping that queue", queue)
                except StateStoreUnavailableError as error:
                    # Redis is unreachable: the lease may expire and another syphon may start, so stop.
                    self.lost.add(queue)
                    log.warning("cannot renew the syphon lease of %s: %s", queue, error)

    def stop_and_release(self) -> None:
        """Stop renewing and give every still-held lease up (owner-checked)."""
        self._stop.set()
        self._thread.join()
        for queue, lease in self.leases.items():
            if queue not in self.lost:
                try:
                    lease.release(self.owner)
                except StateStoreUnavailableError as error:
                    log.info("could not release the syphon lease of %s (it expires): %s", queue, error)


def backlog_queues(ctx: DeliveryContext) -> list[str]:
    """The backlog queues of the configured primary namespace (empty without both namespaces): those of
    the current count, and *retired* ones beyond it that were in use before the count was lowered — they
    are read until found empty (``retire_empty``), so no message is left behind in them."""
    settings = ctx.settings
    if settings.primary is None or settings.secondary is None:
        return []
    namespace, count = settings.primary.namespace_name, settings.paired.backlog_queue_count
    known = ctx.paired.backlog_indexes(namespace)
    if not set(range(count)) <= known:
        ctx.paired.register_backlog(namespace, range(count))
    retired = sorted(i for i in known if i >= count)
    return [backlog_queue_path(namespace, i) for i in [*range(count), *retired]]


def retire_empty(ctx: DeliveryContext, reports: list[QueueReport]) -> None:
    """Forget retired backlog queues (beyond the count) that a run found empty, with nothing set aside."""
    settings = ctx.settings
    if settings.primary is None:
        return
    namespace, count = settings.primary.namespace_name, settings.paired.backlog_queue_count
    aside = AsideStore(ctx.redis)
    for report in reports:
        index = backlog_queue_index(report.queue)
        if index is None or index < count or report.received or report.stopped is not None:
            continue
        if report.receives and not aside.destinations(report.queue):
            ctx.paired.retire_backlog(namespace, index)
            log.info("retired backlog queue %s is empty; the syphon stops reading it", report.queue)


def run_syphon(ctx: DeliveryContext, budget: float | None = None) -> SyphonReport:
    """One bounded syphon run (see the module docstring)."""
    options = ctx.settings.paired
    report = SyphonReport(owner=f"{ctx.identity}:{uuid.uuid4().hex[:8]}")
    entities = paired_entities(ctx.settings)
    queues = backlog_queues(ctx)
    if not options.enable_syphon or not entities or not queues:
        report.idle = "syphon disabled or nothing paired"
        return report
    if not may_poll(ctx.paired.get(entity) for entity in entities):
        report.idle = "every paired entity is failed over"
        return report
    random.shuffle(queues)
    ttl_ms = lease_ttl_ms(options.syphon_lease_ttl)
    held: dict[str, Lease] = {}
    for queue in queues:
        lease = Lease.named(ctx.redis, syphon_lease_name(queue))
        if lease.acquire(report.owner, ttl_ms):
            held[queue] = lease
        else:
            report.busy.append(queue)
    if not held:
        return report
    until = ctx.clock() + (options.syphon_run_budget if budget is None else budget)
    keeper = LeaseKeeper(held, report.owner, options.syphon_lease_ttl)
    keeper.start()
    try:
        syphons = [BacklogSyphon(ctx, queue, partial(keeper.holds, queue)) for queue in held]
        with ThreadPoolExecutor(max_workers=len(syphons), thread_name_prefix="syphon") as threads:
            futures = [threads.submit(syphon.run, until) for syphon in syphons]
            report.queues = [future.result() for future in futures]
        retire_empty(ctx, report.queues)
    finally:
        keeper.stop_and_release()
    metrics.record_syphon(report.queues)
    moved = sum(q.sent + q.dead_lettered for q in report.queues)
    if moved:
        log.info("syphon moved %d backlog messages: %s", moved, report.summary())
    return report
