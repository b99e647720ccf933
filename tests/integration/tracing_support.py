"""Helpers of the tracing tests: the real SDK recording into memory, and reading what it recorded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bridge.observability import messaging_metrics, tracing


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """This process traces into an in-memory exporter (synchronously) inside the block, and stops after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


@contextmanager
def recorded_metrics() -> Iterator[InMemoryMetricReader]:
    """This process records the messaging metrics into an in-memory reader inside the block; stops after."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    messaging_metrics.use_provider(provider)
    try:
        yield reader
    finally:
        messaging_metrics.use_provider(None)
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``, in the order they ended."""
    return [span for span in exporter.get_finished_spans() if span.name == name]


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every data point the reader collects now, by metric name: (attributes, value) for a counter, and
    (attributes, the point) for a histogram (``count``, ``sum``, ``explicit_bounds``)."""
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", point)
                    out.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return out


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """This process traces into an in-memory exporter for the test, and stops tracing after it."""
    with recorded_spans() as exporter:
        yield exporter


@pytest.fixture
def meters() -> Iterator[InMemoryMetricReader]:
    """This process records the messaging metrics into an in-memory reader for the test."""
    with recorded_metrics() as reader:
        yield reader
