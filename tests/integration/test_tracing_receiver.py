"""The receiver's ``receive`` and settlement spans and the messaging metrics, with the real OpenTelemetry SDK.

Real parts in this process: the ``Producer``, a drain service, the ``Receiver``, the session's private Redis
and the shared local namespace through the unmodified azure-servicebus SDK. The SDK's ``TracerProvider``
(synchronous in-memory exporter) and ``MeterProvider`` (``InMemoryMetricReader``) are installed with
``tracing.use_provider`` and ``messaging_metrics.use_provider``. A failed send, its trace on the status page
and the failing receive are ``test_trace_link.py``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from bridge.core.received import ReceivedMessage
from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.observability import messaging_metrics
from bridge.producer import Producer
from bridge.receiving.receiver import Receiver
from bridge.settings import Settings
from tests.integration.paired_support import namespace_settings
from tests.integration.tracing_support import meters, metric_points, named, spans

__all__ = ["meters", "spans"]

pytestmark = pytest.mark.timeout(120)

INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
"""The creation context the application gives its message (W3C Trace Context's example)."""
CREATION_TRACE, CREATION_SPAN = int(INCOMING[3:35], 16), int(INCOMING[36:52], 16)


def _settings(redis_url: str, ns: LocalNamespace, entity: str, **receiver: Any) -> Settings:
    return Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 10, "retry_total": 0},
            "receiver": {"max_wait": 0.5, **receiver},
        }
    )


def _receive_while(settings: Settings, entity: str, handler: Any, done: Any) -> None:
    """Send what the outbox holds and run a ``Receiver`` with ``handler`` until ``done()``."""
    ctx = DeliveryContext.build(settings)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    receiver = Receiver(entity, handler, settings=settings)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        wait_until(done, 40, what="the receiver's spans")
    finally:
        receiver.stop()
        thread.join(20)
        service.stop()
        ctx.close()


def _is_creation_child(span: ReadableSpan) -> bool:
    """Child of the message's creation context and linked to it, in its trace."""
    return (
        span.context is not None
        and span.context.trace_id == CREATION_TRACE
        and span.parent is not None
        and span.parent.span_id == CREATION_SPAN
        and [link.context.span_id for link in span.links] == [CREATION_SPAN]
    )


def test_a_received_message_has_a_receive_and_a_complete_span_and_is_counted(
    spans: InMemorySpanExporter,
    meters: InMemoryMetricReader,
    redis_url: str,
    shared_namespace: LocalNamespace,
    unique_name: str,
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity)
    handled: list[ReceivedMessage] = []
    # Given a message with the application's creation context, sent by a drainer
    with Producer(settings=settings) as producer:
        (message_id,) = producer.send_batch(entity, [{"body": b"x", "traceparent": INCOMING}])

    # When the receiver receives, hands and completes it
    def completed() -> bool:
        return bool(named(spans, f"complete {entity}"))

    _receive_while(settings, entity, handled.append, completed)
    assert [m.message_id for m in handled] == [message_id]
    # Then its receive call has a CLIENT span, a root, linked to the message's creation context
    # (the empty long polls around it have none; a receive that failed — a link that did not open in time
    # on a loaded machine, then retried — has its own span, marked failed with its error type)
    receives = named(spans, f"receive {entity}")
    failed = [s for s in receives if s.status.status_code is StatusCode.ERROR]
    assert all((s.attributes or {}).get("error.type") for s in failed), failed
    (receive,) = [s for s in receives if s not in failed]
    assert receive.kind is SpanKind.CLIENT and receive.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in receive.links] == [
        (CREATION_TRACE, CREATION_SPAN)
    ]
    assert dict(receive.attributes or {}) == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "receive",
        "messaging.operation.type": "receive",
        "messaging.destination.name": entity,
        "messaging.batch.message_count": 1,
        "server.address": "127.0.0.1",
        "bridge.namespace.role": "primary",
    }
    # And its completion is a settle span in the message's trace, after the process span
    (complete,) = named(spans, f"complete {entity}")
    (process,) = named(spans, f"process {entity}")
    assert complete.kind is SpanKind.CLIENT and _is_creation_child(complete)
    assert dict(complete.attributes or {}) == {
        "messaging.system": "servicebus",
        "messaging.operation.name": "complete",
        "messaging.operation.type": "settle",
        "messaging.destination.name": entity,
        "messaging.servicebus.disposition_status": "complete",
        "messaging.message.id": message_id,
        "server.address": "127.0.0.1",
        "bridge.namespace.role": "primary",
    }
    assert process.end_time is not None and complete.start_time is not None
    assert process.end_time <= complete.start_time
    # And the messaging metrics count the send and the receive, with the conventions' names and buckets
    common = {
        "messaging.system": "servicebus",
        "messaging.destination.name": entity,
        "server.address": "127.0.0.1",
    }
    points = metric_points(meters)
    assert points["messaging.client.sent.messages"] == [({**common, "messaging.operation.name": "send"}, 1)]
    assert points["messaging.client.consumed.messages"] == [
        ({**common, "messaging.operation.name": "receive"}, 1)
    ]
    ((attributes, duration),) = points["messaging.client.operation.duration"]
    assert attributes == {**common, "messaging.operation.name": "send", "messaging.operation.type": "send"}
    assert duration.count == 1 and 0 < duration.sum < 10
    assert tuple(duration.explicit_bounds) == messaging_metrics.DURATION_BUCKETS


def test_a_failing_handler_gets_an_abandon_span_then_a_dead_letter_span(
    spans: InMemorySpanExporter, redis_url: str, shared_namespace: LocalNamespace, unique_name: str
) -> None:
    entity = unique_name
    settings = _settings(redis_url, shared_namespace, entity, max_delivery_count=2)

    def handler(message: ReceivedMessage) -> None:
        raise RuntimeError("the application cannot take it")

    # Given a message whose handler always raises, on an entity that delivers it twice
    with Producer(settings=settings) as producer:
        (message_id,) = producer.send_batch(entity, [{"body": b"x", "traceparent": INCOMING}])

    # When the receiver gives it back after the first failure and dead-letters it after the second
    def dead_lettered() -> bool:
        return bool(named(spans, f"dead_letter {entity}"))

    _receive_while(settings, entity, handler, dead_lettered)
    # Then each settlement is a CLIENT span in the message's trace, named for what was done
    (abandon,) = named(spans, f"abandon {entity}")
    (dead_letter,) = named(spans, f"dead_letter {entity}")
    for span, operation in ((abandon, "abandon"), (dead_letter, "dead_letter")):
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CLIENT and _is_creation_child(span)
        assert attributes["messaging.operation.name"] == operation
        assert attributes["messaging.operation.type"] == "settle"
        assert attributes["messaging.servicebus.disposition_status"] == operation
        assert attributes["messaging.message.id"] == message_id
        assert "error.type" not in attributes  # the settlement itself went through
    assert abandon.end_time is not None and dead_letter.start_time is not None
    assert abandon.end_time <= dead_letter.start_time
    # And both process spans failed with the handler's error
    processes = named(spans, f"process {entity}")
    assert [dict(s.attributes or {}).get("error.type") for s in processes] == ["RuntimeError"] * 2
