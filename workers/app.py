"""The Celery application of the send workers and the beat scheduler.

``bridge worker`` and ``bridge beat`` start it (``celery -A workers.app worker`` works too). Settings are
the bridge's one settings model, read once when this module is imported; the broker is
``celery_broker_url`` when set (a Redis Cluster cannot be a Celery broker), else ``redis_url``, a Sentinel
URL translated for kombu (``workers.broker``).

Every pool process (prefork child, or the worker itself with ``--pool solo``) runs a ``DrainService``
(``bridge.delivery.service``) from ``worker_process_init`` until ``worker_process_shutdown``: it owns a fair
share of the outbox shards by lease and reads each as soon as an entry is written. The settings loaded
here are the ones every task and drainer of the process uses (``get_context(settings)``).

Delivery guarantees do not rest on Celery: tasks only say "look at this shard now". The outbox in Redis
is the source of truth, a drain acknowledges an entry only after Service Bus accepted it, and the sweeper
queues a drain task for any shard with work and no drainer, so a lost, duplicated or crashed task delays a
message but never loses it.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import setup_logging, worker_process_init, worker_process_shutdown, worker_shutdown

from bridge.delivery.context import get_context, reset_after_fork
from bridge.delivery.service import DrainService
from bridge.observability import messaging_metrics, tracing
from bridge.observability.logs import configure_logging
from bridge.settings import Settings, load_settings
from bridge.status.exposition import child_exited
from workers.broker import celery_broker


def paired_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Ping and syphon schedules when some entity is paired; a firing not run within its interval expires."""
    if not any(entity.replication == "paired" for entity in settings.entities.values()):
        return {}
    paired = settings.paired
    schedule = {
        "ping": {
            "task": "bridge.ping",
            "schedule": paired.ping_primary_interval,
            "options": {"expires": paired.ping_primary_interval},
        },
    }
    if paired.enable_syphon:
        schedule["syphon"] = {
            "task": "bridge.syphon",
            "schedule": paired.syphon_retry_interval,
            "options": {"expires": paired.syphon_retry_interval},
        }
    return schedule


def probe_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The probe of namespaces without traffic (``bridge.delivery.probe``), unless switched off."""
    interval = settings.workers.probe_interval
    if interval is None:
        return {}
    return {"probe": {"task": "bridge.probe", "schedule": interval, "options": {"expires": interval}}}


def journal_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """The journal roll when ``journal.directory`` is set (else the journal stays in Redis, bounded)."""
    journal = settings.journal
    if not journal.enabled or journal.directory is None:
        return {}
    return {
        "journal-roll": {
            "task": "bridge.journal_roll",
            "schedule": journal.roll_interval,
            "options": {"expires": journal.roll_interval},
        }
    }


def create_app(settings: Settings) -> Celery:
    """A configured Celery app (tasks are registered by ``tasks.*`` modules listed in ``include``)."""
    broker, transport_options = celery_broker(settings)
    app = Celery(
        "bridge",
        broker=broker,
        include=[
            "tasks.drain",
            "tasks.sweeper",
            "tasks.ping",
            "tasks.syphon",
            "tasks.journal",
            "tasks.probe",
        ],
    )
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options,
        worker_hijack_root_logger=False,
        timezone="UTC",
        beat_schedule={
            "sweep": {"task": "bridge.sweep", "schedule": settings.workers.sweep_interval},
            **paired_schedule(settings),
            **probe_schedule(settings),
            **journal_schedule(settings),
        },
        # Two beats may run: each schedule is claimed in Redis before it is sent (workers.beat_scheduler).
        beat_scheduler="workers.beat_scheduler:OncePerIntervalScheduler",
        task_routes={"bridge.*": {"queue": settings.workers.queue}},
        task_default_queue=settings.workers.queue,
    )
    return app


class _ProcessDrainers:
    """The drain service of this process (None in the prefork parent, which runs no tasks)."""

    service: DrainService | None = None
    pid: int | None = None


@worker_process_init.connect
def _fresh_context(**_: Any) -> None:
    # A prefork child must not use the parent's Redis sockets or SDK clients.
    reset_after_fork()
    # Its own messaging metrics (OTEL_*), set up here rather than inherited: one series per process.
    messaging_metrics.configure("bridge-worker")
    _ProcessDrainers.service = DrainService(get_context(settings)).start()
    _ProcessDrainers.pid = os.getpid()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_drainers(**_: Any) -> None:
    # Hand the shards over now instead of leaving them to expire with their leases (workers.lease_ttl).
    service, _ProcessDrainers.service = _ProcessDrainers.service, None
    if service is not None and _ProcessDrainers.pid == os.getpid():
        service.stop()
    tracing.flush()  # a pool process leaves with os._exit: atexit would not export its last spans
    messaging_metrics.flush()


@worker_process_shutdown.connect
def _child_metrics(pid: int | None = None, **_: Any) -> None:
    # The child's live-gauge metric files go; its counters stay summed (bridge.status.exposition).
    child_exited(pid or os.getpid())


@setup_logging.connect
def _logging(loglevel: Any = None, **_: Any) -> None:
    # Connected, so Celery leaves logging alone: one format (JSON or text, secrets filtered) everywhere.
    configure_logging(settings, level=loglevel or None)


settings = load_settings()
app = create_app(settings)
