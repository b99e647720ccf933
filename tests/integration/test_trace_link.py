"""A failed send leaves its trace on the status page, linked to a trace viewer; a failed receive is a span.

Real parts in this process: the ``Producer``, a drain service, a ``Receiver``, the HTTP app under uvicorn
(its ``/status`` page loaded in headless Chromium), the session's private Redis and a private local
namespace with an outage, through the unmodified azure-servicebus SDK; the OpenTelemetry SDK records into
memory (``tests/integration/tracing_support.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bridge.delivery.context import DeliveryContext
from bridge.delivery.service import DrainService
from bridge.embedded.namespaces import LocalNamespace
from bridge.embedded.stack import wait_until
from bridge.producer import Producer
from bridge.receiving.receiver import Receiver
from bridge.settings import Settings
from bridge.state.roles import RoleStore
from bridge.status.snapshot import collect_snapshot
from tests.integration.ingress_support import running_ingress
from tests.integration.operations_support import chromium, chromium_binary
from tests.integration.paired_support import namespace_settings
from tests.integration.tracing_support import meters, metric_points, named, spans

__all__ = ["meters", "spans"]

pytestmark = pytest.mark.timeout(120)

VIEWER = "http://jaeger.example:16686/trace/{trace_id}"


@pytest.mark.skipif(
    chromium_binary() is None, reason="chromium not installed (scripts/bootstrap installs it)"
)
def test_the_status_page_links_the_failed_send_to_its_trace(
    spans: InMemorySpanExporter,
    meters: InMemoryMetricReader,
    redis_url: str,
    namespace_factory: Callable[..., LocalNamespace],
    unique_name: str,
    tmp_path: Path,
) -> None:
    entity = unique_name
    ns = namespace_factory("primary")
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 3, "retry_total": 0},
            "trace_url": VIEWER,
        }
    )
    client = redis.Redis.from_url(redis_url)
    roles = RoleStore(client)
    # Given the namespace down and a message in the outbox
    ns.control.outage()
    with Producer(settings=settings) as producer:
        producer.send_batch(entity, [b"x"])
    # When a drainer's send of it fails
    ctx = DeliveryContext.build(settings)
    service = DrainService(ctx, tick=0.1, block_ms=200).start()
    try:
        health = wait_until(
            lambda: (h := roles.health(entity, "primary")).last_error_trace_id and h, 30, what="a failed send"
        )
    finally:
        service.stop()
        ctx.close()
    # Then the namespace's last error keeps the trace of the failed send span, in the message's trace
    (create,) = named(spans, f"create {entity}")
    failed = [s for s in named(spans, f"send {entity}") if (s.attributes or {}).get("error.type") == "outage"]
    assert failed and create.context is not None
    trace_id = f"{create.context.trace_id:032x}"
    assert {f"{s.context.trace_id:032x}" for s in failed if s.context} == {trace_id}
    assert health.last_error_trace_id == trace_id and not health.available
    # And the messaging metrics count the refused message and the send's duration with its error class
    points = metric_points(meters)
    refused = [(a, v) for a, v in points["messaging.client.sent.messages"] if a.get("error.type") == "outage"]
    assert refused and all(a["messaging.destination.name"] == entity for a, _ in refused)
    assert any(a.get("error.type") == "outage" for a, _ in points["messaging.client.operation.duration"])
    # And the status snapshot carries the trace id and its page in the configured viewer
    (status,) = [e for e in collect_snapshot(settings, client)["entities"] if e["name"] == entity]
    link = VIEWER.replace("{trace_id}", trace_id)
    assert status["namespaces"]["primary"]["last_error_trace_id"] == trace_id
    assert status["last_error"]["trace_id"] == trace_id and status["last_error"]["trace_url"] == link
    # And the status page shows it as a link to that page
    screenshot = tmp_path / "status-trace-link.png"
    with running_ingress(settings) as base:
        dom = chromium(f"{base}/status", screenshot=screenshot)
    row = re.search(rf'<tr data-entity="{re.escape(entity)}">(.*?)</tr>', dom, re.S)
    assert row is not None, dom[-2000:]
    anchor = re.search(
        r'<td data-field="last_error">[^<]*<br><a ([^>]*)>trace ([0-9a-f]{32})</a>', row.group(1)
    )
    assert anchor is not None, row.group(1)
    assert anchor.group(2) == trace_id
    assert f'href="{link}"' in anchor.group(1) and f'data-trace-id="{trace_id}"' in anchor.group(1)
    assert screenshot.stat().st_size > 10_000
    client.close()


def test_a_failed_receive_is_a_receive_span_with_its_error_class(
    spans: InMemorySpanExporter,
    redis_url: str,
    namespace_factory: Callable[..., LocalNamespace],
    unique_name: str,
) -> None:
    entity = unique_name
    ns = namespace_factory("primary")
    settings = Settings.model_validate(
        {
            "redis_url": redis_url,
            "primary": namespace_settings(ns),
            "entities": {entity: {"replication": "none"}},
            "retry": {"attempt_deadline": 3, "retry_total": 0},
            "receiver": {"max_wait": 0.5, "max_delivery_count": 10},
        }
    )
    # Given a receiver whose namespace goes down
    receiver = Receiver(entity, lambda message: None, settings=settings)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        ns.control.outage()

        # When its receive calls fail
        def failed() -> bool:
            received = named(spans, f"receive {entity}")
            return any((s.attributes or {}).get("error.type") == "outage" for s in received)

        wait_until(failed, 40, what="a failed receive span")
    finally:
        receiver.stop()
        thread.join(20)
    # Then each failure is a receive span with the error class and no message, and nothing else was traced
    received = named(spans, f"receive {entity}")
    assert received and all(dict(s.attributes or {})["messaging.batch.message_count"] == 0 for s in received)
    classes = [dict(s.attributes or {}).get("error.type") for s in received]
    assert None not in classes and "outage" in classes, classes
    assert all(s.status.status_code.name == "ERROR" for s in received)
