"""Start-up of a bridge process's operations side: logs, Sentry, OpenTelemetry, and its metrics endpoint.

``bridge serve`` serves ``/metrics`` on its own port; ``bridge worker``, ``bridge beat`` (and the receiver)
call ``start_process`` before their real work, which serves this process's series and the shared state on
``metrics_host:metrics_port`` when ``metrics_port`` is set (see ``bridge.status.exposition``).
"""

from __future__ import annotations

from bridge.observability import messaging_metrics, tracing
from bridge.observability.logs import configure_logging
from bridge.observability.sentry import init_sentry
from bridge.settings import Settings
from bridge.status.exposition import prepare_multiprocess, process_registry, serve_process_metrics
from bridge.status.snapshot import StateReader


def start_process(settings: Settings, component: str, *, prefork: bool = False) -> int | None:
    """Logs, Sentry, tracing and messaging metrics (``OTEL_*``) and Prometheus metrics for ``component``;
    ``prefork`` for Celery's pool, whose processes set up their messaging metrics themselves after the fork
    (``workers.app``: each is one ``service.instance.id``). The metrics port or None."""
    if prefork:
        prepare_multiprocess(settings.metrics_dir)
    configure_logging(settings, component)
    init_sentry(settings, component=component)
    tracing.configure(f"bridge-{component}")
    if not prefork:
        messaging_metrics.configure(f"bridge-{component}")
    return serve_process_metrics(settings, process_registry(StateReader(settings)))
