"""The OpenTelemetry messaging metrics of the send workers, the syphon and the receiver (``docs/tracing.md``).

Off unless the standard environment asks for it, like tracing: ``configure`` (called by every process entry
point) sets up the SDK's ``MeterProvider`` with a periodic OTLP/HTTP exporter only when
``OTEL_METRICS_EXPORTER`` (not ``none``), ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and ``OTEL_SDK_DISABLED`` is not ``true``; the SDK reads the rest
(``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ...). The SDK and the exporter are imported only then, so a process that does
not export metrics loads no more of them than ``import redis`` does (redis-py loads part of the metrics SDK
for its own instrumentation), and every recorder returns after one global read.

The instruments are the messaging conventions' (``docs/references.md``), with ``messaging.system =
"servicebus"``, ``messaging.operation.name``, ``messaging.destination.name``, ``server.address`` and, when
the operation failed, ``error.type`` (the bridge's error class, e.g. ``outage``):

- ``messaging.client.sent.messages`` (counter, ``{message}``): messages each send offered to a namespace,
  the refused ones with their ``error.type``; operation ``send`` for the drainer, ``syphon`` for the syphon;
- ``messaging.client.operation.duration`` (histogram, seconds, the conventions' buckets): one value per
  batched send, the same duration as its ``send``/``syphon`` span;
- ``messaging.client.consumed.messages`` (counter): messages the receiver received (operation ``receive``,
  with ``messaging.destination.subscription.name`` for a subscription).

The bridge's own Prometheus series (``bridge.observability.metrics``) stay as they are; these are for an
OpenTelemetry pipeline that expects the conventions' names.
"""

from __future__ import annotations

import atexit
import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

SCOPE = "servicebus-bridge"
SYSTEM = "servicebus"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""The conventions' explicit bucket boundaries for ``messaging.client.operation.duration``."""

Attributes = dict[str, str]


class _State:
    provider: Any = None
    sent: Any = None
    duration: Any = None
    consumed: Any = None


def enabled() -> bool:
    """This process exports messaging metrics (``configure`` found an exporter, or a test installed one)."""
    return _State.sent is not None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` environment asks for metrics (off by default, unlike the SDK's own default)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Set up the SDK's metrics for this process when the environment asks for it; True when it exports.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins); each process gets its own
    ``service.instance.id`` (unless ``OTEL_RESOURCE_ATTRIBUTES`` names one), so the cumulative counts of two
    processes of one service (a worker's pool processes) are two series, not one that jumps between them.
    Exporters by ``OTEL_METRICS_EXPORTER``: ``otlp`` (the default, OTLP/HTTP) and ``console``.
    """
    env = os.environ if environ is None else environ
    if _State.provider is not None or not wanted(env):
        return _State.provider is not None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricExporter,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = []
    for name in (part.strip() for part in env.get("OTEL_METRICS_EXPORTER", "otlp").lower().split(",")):
        exporter: MetricExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = OTLPMetricExporter()
        elif name == "console":
            exporter = ConsoleMetricExporter()
        else:
            log.warning("OTEL_METRICS_EXPORTER %r is not supported here (otlp, console): ignored", name)
            continue
        readers.append(PeriodicExportingMetricReader(exporter))
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    if "service.instance.id" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.instance.id"] = str(uuid.uuid4())
    provider = MeterProvider(metric_readers=readers, resource=Resource.create(attributes))
    use_provider(provider)
    atexit.register(provider.shutdown)
    return True


def use_provider(provider: Any) -> None:
    """Record into ``provider`` (an SDK ``MeterProvider``; tests pass one with an ``InMemoryMetricReader``),
    or stop recording with None."""
    _State.provider = provider
    if provider is None:
        _State.sent = _State.duration = _State.consumed = None
        return
    meter = provider.get_meter(SCOPE)
    _State.duration = meter.create_histogram(
        "messaging.client.operation.duration",
        unit="s",
        description="Duration of messaging operation initiated by a producer or consumer client.",
        explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
    )
    _State.consumed = meter.create_counter(
        "messaging.client.consumed.messages",
        unit="{message}",
        description="Number of messages that were delivered to the application.",
    )
    _State.sent = meter.create_counter(  # last: ``enabled()`` reads it
        "messaging.client.sent.messages",
        unit="{message}",
        description="Number of messages producer attempted to send to the broker.",
    )


def flush() -> None:
    """Export what this process's instruments hold now (a Celery pool process exits without ``atexit``)."""
    if _State.provider is not None:
        _State.provider.force_flush()


def _common(operation: str, destination: str, server_address: str | None) -> Attributes:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.destination.name": destination,
    }
    if server_address:
        attributes["server.address"] = server_address
    return attributes


def record_send(
    operation: str,
    destination: str,
    server_address: str | None,
    *,
    accepted: int,
    refused: int,
    error_type: str | None,
    seconds: float,
) -> None:
    """One batched send: ``accepted`` messages taken, ``refused`` not (``error_type`` says why), in
    ``seconds``."""
    sent, duration = _State.sent, _State.duration
    if sent is None:
        return
    attributes = _common(operation, destination, server_address)
    if accepted:
        sent.add(accepted, attributes)
    if error_type is not None or refused:
        attributes = {**attributes, "error.type": error_type or "_OTHER"}
        if refused:
            sent.add(refused, attributes)
    # A new dict each time: the SDK may keep the one it was given (exemplars).
    duration.record(seconds, {**attributes, "messaging.operation.type": "send"})


def record_consumed(
    destination: str, subscription: str | None, server_address: str | None, count: int
) -> None:
    """``count`` messages one receive call handed to the receiver."""
    consumed = _State.consumed
    if consumed is None or count <= 0:
        return
    attributes = _common("receive", destination, server_address)
    if subscription:
        attributes["messaging.destination.subscription.name"] = subscription
    consumed.add(count, attributes)
