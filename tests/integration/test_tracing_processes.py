"""One trace from an HTTP request to the handler across real processes, through a passive failover and
through a paired failover, the backlog and the syphon.

``bridge serve``, a ``bridge worker`` (prefork) and a ``bridge receive`` run as processes of a local stack,
with nothing but the standard ``OTEL_*`` environment turning tracing and the messaging metrics on; they
export OTLP/HTTP (protobuf) to a small receiver this test runs, which decodes the requests with
``opentelemetry-proto``. The primary namespace is down (its fault control) when the request comes in, so the
worker's first attempt fails and the message goes to the secondary, where the receiver finds it.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from bridge.embedded.stack import LocalStack, wait_until
from bridge.observability.messaging_metrics import DURATION_BUCKETS
from tests.integration.operations_support import start_serve
from tests.integration.paired_support import PAIRED_SETTINGS, cost, create_backlog_queues
from tests.integration.receiver_support import FAST_RECEIVER, HANDLERS, counts
from tests.integration.worker_support import make_stack

__all__ = ["make_stack"]

pytestmark = pytest.mark.timeout(150)

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE = "0af7651916cd43dd8448eb211c80319c"
KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


def _attributes(attributes: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in attributes}


MetricKey = tuple[str, str, frozenset[tuple[str, Any]]]
"""(service.name, metric name, the data point's attributes)."""


class Collector:
    """An OTLP/HTTP receiver: every span of every ``POST /v1/traces``, as plain dicts, and the last value of
    every metric data point of every ``POST /v1/metrics`` (cumulative: the last is the total)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[MetricKey, Any] = {}
        self.resources: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path == "/v1/metrics":
                    collector.take_metrics(ExportMetricsServiceRequest.FromString(raw))
                    answer = ExportMetricsServiceResponse().SerializeToString()
                else:
                    collector.take(ExportTraceServiceRequest.FromString(raw))
                    answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it (the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self, request: ExportTraceServiceRequest) -> None:
        """Keep the request's spans with their service name."""
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        {
                            "service": resource.get("service.name"),
                            "name": span.name,
                            "kind": KINDS.get(span.kind, str(span.kind)),
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex() or None,
                            "start_unix_nano": span.start_time_unix_nano,
                            "end_unix_nano": span.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "links": [
                                {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                                for link in span.links
                            ],
                            "status": {1: "OK", 2: "ERROR"}.get(span.status.code, "UNSET"),
                        }
                    )
        with self.lock:
            self.spans.extend(found)

    def take_metrics(self, request: ExportMetricsServiceRequest) -> None:
        """Keep each data point's value (a counter's number, a histogram's point) by service and name."""
        with self.lock:
            for resource_metrics in request.resource_metrics:
                resource = _attributes(resource_metrics.resource.attributes)
                self.resources.append(resource)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        for point in _points(metric):
                            service = str(resource.get("service.name"))
                            key = (service, metric.name, _frozen(point.attributes))
                            is_sum = metric.WhichOneof("data") == "sum"
                            self.metrics[key] = point.as_int if is_sum else point

    def metric(self, service: str, name: str) -> list[tuple[dict[str, Any], Any]]:
        """The data points of one metric of one service: (attributes, value)."""
        with self.lock:
            return [(dict(k[2]), v) for k, v in self.metrics.items() if k[:2] == (service, name)]

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans of one trace, in start order."""
        with self.lock:
            return sorted(
                (s for s in self.spans if s["trace_id"] == trace_id), key=lambda s: s["start_unix_nano"]
            )


def _points(metric: Any) -> Any:
    which = metric.WhichOneof("data")
    return getattr(metric, which).data_points if which in ("sum", "histogram") else ()


def _frozen(attributes: list[KeyValue]) -> frozenset[tuple[str, Any]]:
    return frozenset(_attributes(attributes).items())


@pytest.fixture
def collector() -> Iterator[Collector]:
    """A running OTLP receiver, shut down after the test."""
    running = Collector()
    running.thread.start()
    try:
        yield running
    finally:
        running.server.shutdown()
        running.server.server_close()


def _named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def test_one_trace_from_the_http_request_to_the_handler_through_a_passive_failover(
    make_stack: Any, collector: Collector, tmp_path: Path
) -> None:
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }
    stack: LocalStack = make_stack({"pas": {"replication": "passive"}}, settings={**otel, **FAST_RECEIVER})
    base = start_serve(stack)
    stack.start_worker(concurrency=1)
    receiver = stack.start_bridge("receive-pas", "receive", "pas", "--handler", f"{HANDLERS}:record")
    # Given the primary namespace down
    stack.primary.control.outage()
    try:
        # When the application posts a message with its trace context
        answer = httpx.post(
            f"{base}/v1/entities/pas/messages",
            json={"body": "traced"},
            headers={"traceparent": INCOMING, "tracestate": "app=1"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text
        message_id = answer.json()["message_id"]
        # Then the worker fails over to the secondary and the receiver hands it from there
        wait_until(
            lambda: counts(stack.redis.url, "pas").handled >= 1, 60, what=f"handled: {receiver.log_tail()}"
        )
    finally:
        stack.primary.control.restore()

    def complete() -> list[dict[str, Any]] | None:
        spans = collector.trace(TRACE)
        done = _named(spans, "process pas") and _named(spans, "complete pas")
        return spans if done and len(_named(spans, "send pas")) >= 2 else None

    spans = wait_until(complete, 20, what=f"spans exported: {collector.spans}")
    (tmp_path / "trace.json").write_text(json.dumps(spans, indent=2))
    # And every span from the door to the handler is in the application's trace
    (create,) = _named(spans, "create pas")
    sends = _named(spans, "send pas")
    (process,) = _named(spans, "process pas")
    assert create["service"] == "bridge-serve" and create["kind"] == "PRODUCER"
    assert create["parent_span_id"] == INCOMING[36:52]
    assert create["attributes"]["messaging.message.id"] == message_id
    assert {s["service"] for s in sends} == {"bridge-worker"}
    # And the send attempts say where they went: the primary failed, the secondary took it as a failover
    failed = [s for s in sends if s["attributes"]["bridge.namespace.role"] == "primary"]
    took = [s for s in sends if s["attributes"]["bridge.namespace.role"] == "secondary"]
    assert failed and all(s["attributes"].get("error.type") and s["status"] == "ERROR" for s in failed)
    assert len(took) == 1 and "error.type" not in took[0]["attributes"]
    assert took[0]["attributes"]["bridge.failover"] is True
    assert took[0]["attributes"]["bridge.replication.mode"] == "passive"
    for send in sends:
        assert send["kind"] == "CLIENT" and send["parent_span_id"] == create["span_id"]
        assert send["links"] == [{"trace_id": TRACE, "span_id": create["span_id"]}]
        assert send["attributes"]["messaging.system"] == "servicebus"
        assert send["attributes"]["messaging.message.id"] == message_id
        assert send["attributes"]["server.address"] == "127.0.0.1"
    # And the handler ran in the receiver's process span, child of the creation context, on the secondary
    assert process["service"] == "bridge-receiver" and process["kind"] == "CONSUMER"
    assert process["parent_span_id"] == create["span_id"]
    assert process["attributes"]["bridge.namespace.role"] == "secondary"
    assert process["attributes"]["messaging.message.id"] == message_id
    # And the receiver's receive call (a trace of its own) links to the message, and its completion ends it
    (receive,) = [s for s in collector.spans if s["name"] == "receive pas" and s["links"]]
    assert receive["service"] == "bridge-receiver" and receive["kind"] == "CLIENT"
    assert receive["links"] == [{"trace_id": TRACE, "span_id": create["span_id"]}]
    (complete_span,) = _named(spans, "complete pas")
    assert complete_span["kind"] == "CLIENT" and complete_span["parent_span_id"] == create["span_id"]
    assert complete_span["attributes"]["messaging.servicebus.disposition_status"] == "complete"
    _assert_messaging_metrics(collector)


def _assert_messaging_metrics(collector: Collector) -> None:
    """The worker's pool process and the receiver exported the conventions' metrics of what they did."""

    def exported() -> bool:
        consumed = collector.metric("bridge-receiver", "messaging.client.consumed.messages")
        sent = collector.metric("bridge-worker", "messaging.client.sent.messages")
        return bool(consumed) and any("error.type" not in a for a, _ in sent)

    wait_until(exported, 20, what=f"metrics exported: {list(collector.metrics)}")
    sent = collector.metric("bridge-worker", "messaging.client.sent.messages")
    refused = [v for a, v in sent if a.get("error.type") and a["messaging.destination.name"] == "pas"]
    taken = [v for a, v in sent if "error.type" not in a and a["messaging.destination.name"] == "pas"]
    assert refused and sum(refused) >= 1 and taken == [1], sent
    durations = collector.metric("bridge-worker", "messaging.client.operation.duration")
    assert {a.get("error.type") is None for a, _ in durations} == {True, False}
    assert all(tuple(p.explicit_bounds) == DURATION_BUCKETS for _, p in durations)
    ((attributes, count),) = collector.metric("bridge-receiver", "messaging.client.consumed.messages")
    assert count == 1 and attributes["messaging.operation.name"] == "receive"
    workers = [r for r in collector.resources if r.get("service.name") == "bridge-worker"]
    assert workers and all(r.get("service.instance.id") for r in workers)


def test_one_trace_through_a_paired_failover_the_backlog_and_the_syphon(
    make_stack: Any, collector: Collector
) -> None:
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    settings = {**otel, **FAST_RECEIVER, **PAIRED_SETTINGS, "BRIDGE_PAIRED__FAILOVER_INTERVAL": "1"}
    stack: LocalStack = make_stack({"par": {"replication": "paired"}}, settings=settings)
    backlog_queues = create_backlog_queues(stack)
    base = start_serve(stack)
    stack.start_worker(concurrency=1)
    stack.start_beat()
    receiver = stack.start_bridge("receive-par", "receive", "par", "--handler", f"{HANDLERS}:record")
    # Given the primary down: the message goes to a backlog queue on the secondary
    stack.primary.control.outage()
    try:
        answer = httpx.post(
            f"{base}/v1/entities/par/messages", json={"body": "paired"}, headers={"traceparent": INCOMING}
        )
        assert answer.status_code == 202, answer.text
        message_id = answer.json()["message_id"]
        wait_until(lambda: cost(stack, "par").backlog_sends >= 1, 60, what="a backlog send")
    finally:
        stack.primary.control.restore()
    # When the primary is back, the syphon moves it and the receiver hands it from the primary
    wait_until(
        lambda: counts(stack.redis.url, "par").handled >= 1, 90, what=f"handled: {receiver.log_tail()}"
    )

    def complete() -> list[dict[str, Any]] | None:
        spans = collector.trace(TRACE)
        return spans if _named(spans, "process par") and _named(spans, "syphon par") else None

    spans = wait_until(complete, 20, what=f"spans exported: {[s['name'] for s in collector.spans]}")
    # Then the backlog send, the syphon's move and the handler are all in the application's trace
    (create,) = _named(spans, "create par")
    backlog = [s for s in spans if s["name"] in {f"send {queue}" for queue in backlog_queues}]
    (syphon,) = _named(spans, "syphon par")
    (process,) = _named(spans, "process par")
    assert backlog and all(s["attributes"]["bridge.operation"] == "backlog_sends" for s in backlog)
    assert any("error.type" not in s["attributes"] for s in backlog)
    assert syphon["attributes"]["messaging.message.id"] == message_id
    assert syphon["attributes"]["bridge.backlog_queue"] in backlog_queues
    for span in (*backlog, syphon, process):
        assert span["parent_span_id"] == create["span_id"], span
    assert process["attributes"]["bridge.namespace.role"] == "primary"
