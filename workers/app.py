"""The Celery application of the send workers and the beat scheduler.

``bridge worker`` and ``bridge beat`` start it (``celery -A workers.app worker`` works too). Settings are
the bridge's one settings model, read once when this module is imported; the broker is
``celery_broker_url`` when set (a Redis Cluster cannot be a Celery broker), else ``redis_url``.

Delivery guarantees do not rest on Celery: tasks only say "look at this shard now". The outbox in Redis
is the source of truth, a drain acknowledges an entry only after Service Bus accepted it, and the sweeper
re-schedules any shard with work, so a lost, duplicated or crashed task delays a message but never loses it.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_process_init

from bridge.delivery.context import reset_after_fork
from bridge.settings import Settings, load_settings


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


def create_app(settings: Settings) -> Celery:
    """A configured Celery app (tasks are registered by ``tasks.*`` modules listed in ``include``)."""
    broker = (settings.celery_broker_url or settings.redis_url).get_secret_value()
    app = Celery(
        "bridge", broker=broker, include=["tasks.drain", "tasks.sweeper", "tasks.ping", "tasks.syphon"]
    )
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        timezone="UTC",
        beat_schedule={
            "sweep": {"task": "bridge.sweep", "schedule": settings.workers.sweep_interval},
            **paired_schedule(settings),
        },
        # Two beats may run: each schedule is claimed in Redis before it is sent (workers.beat_scheduler).
        beat_scheduler="workers.beat_scheduler:OncePerIntervalScheduler",
        task_routes={"bridge.*": {"queue": settings.workers.queue}},
        task_default_queue=settings.workers.queue,
    )
    return app


@worker_process_init.connect
def _fresh_context(**_: Any) -> None:
    # A prefork child must not use the parent's Redis sockets or SDK clients.
    reset_after_fork()


settings = load_settings()
app = create_app(settings)
