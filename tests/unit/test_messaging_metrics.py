"""The messaging metrics: when the environment turns them on, what each recorder records (the real SDK with
an ``InMemoryMetricReader``), and that a process with them off loads no more of OpenTelemetry than
``import redis`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from bridge.observability import messaging_metrics
from tests.integration.tracing_support import metric_points, recorded_metrics

ROOT = Path(__file__).resolve().parents[2]
SENT, DURATION, CONSUMED = (
    "messaging.client.sent.messages",
    "messaging.client.operation.duration",
    "messaging.client.consumed.messages",
)


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    with recorded_metrics() as recorded:
        yield recorded


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4318/v1/metrics"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, False),  # traces only
        ({"OTEL_METRICS_EXPORTER": "console"}, True),
        ({"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_METRICS_EXPORTER": "otlp"}, False),
    ],
)
def test_metrics_are_off_unless_the_environment_asks_for_them(environ: dict[str, str], on: bool) -> None:
    assert messaging_metrics.wanted(environ) is on


def test_off_every_recorder_returns_at_once() -> None:
    assert not messaging_metrics.enabled()
    messaging_metrics.record_send("send", "q", "h", accepted=1, refused=0, error_type=None, seconds=0.1)
    messaging_metrics.record_consumed("q", None, "h", 1)
    assert not messaging_metrics.configure("bridge-test", {})


def test_a_send_counts_taken_and_refused_messages_and_its_duration(reader: InMemoryMetricReader) -> None:
    # Given a batch of three, one refused by an outage, then a clean send of two elsewhere
    messaging_metrics.record_send(
        "send", "orders", "ns1.example", accepted=2, refused=1, error_type="outage", seconds=0.2
    )
    messaging_metrics.record_send("syphon", "orders", None, accepted=2, refused=0, error_type=None, seconds=1)
    points = metric_points(reader)
    base = {"messaging.system": "servicebus", "messaging.destination.name": "orders"}
    send = {**base, "messaging.operation.name": "send", "server.address": "ns1.example"}
    syphon = {**base, "messaging.operation.name": "syphon"}
    # Then the counter splits the batch by outcome, and the duration carries the batch's error class
    assert sorted(points[SENT], key=str) == sorted(
        [(send, 2), ({**send, "error.type": "outage"}, 1), (syphon, 2)], key=str
    )
    durations = {json.dumps(a, sort_keys=True): (p.count, p.sum) for a, p in points[DURATION]}
    assert durations == {
        json.dumps({**send, "error.type": "outage", "messaging.operation.type": "send"}, sort_keys=True): (
            1,
            0.2,
        ),
        json.dumps({**syphon, "messaging.operation.type": "send"}, sort_keys=True): (1, 1.0),
    }
    assert CONSUMED not in points


def test_a_receive_counts_what_it_brought_and_names_the_subscription(reader: InMemoryMetricReader) -> None:
    messaging_metrics.record_consumed("topic", "sub", "ns1.example", 3)
    messaging_metrics.record_consumed("topic", "sub", "ns1.example", 0)  # an empty long poll: nothing
    assert metric_points(reader)[CONSUMED] == [
        (
            {
                "messaging.system": "servicebus",
                "messaging.operation.name": "receive",
                "messaging.destination.name": "topic",
                "messaging.destination.subscription.name": "sub",
                "server.address": "ns1.example",
            },
            3,
        )
    ]


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_with_metrics_off_a_process_loads_no_more_of_opentelemetry_than_redis_does() -> None:
    # Given a process that imports redis (redis-py loads part of the metrics SDK itself), then the modules
    # of every process that records messaging metrics, started as they are with the metrics off
    code = (
        "import sys\n"
        "import redis\n"
        "before = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "import bridge.delivery.service, bridge.receiving.engine, bridge.paired.syphon\n"
        "from bridge.observability import messaging_metrics, tracing\n"
        "assert not messaging_metrics.configure('bridge-worker') and not tracing.configure('bridge-worker')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry') and m not in before))\n"
    )
    # Then the bridge added no OpenTelemetry module: no trace SDK, no exporter, no more of the metrics SDK
    assert _python(code).stdout.strip() == "[]"


def test_configured_from_the_environment_each_process_exports_as_its_own_instance() -> None:
    # Given a process whose environment asks for metrics on the console
    code = (
        "from bridge.observability import messaging_metrics\n"
        "assert messaging_metrics.configure('bridge-receiver')\n"
        "messaging_metrics.record_consumed('orders', None, 'ns1.example', 2)\n"
        "messaging_metrics.flush()\n"
    )
    out = _python(code, OTEL_METRICS_EXPORTER="console", OTEL_METRIC_EXPORT_INTERVAL="600000").stdout
    # Then it exported the count with the default service name and an instance id of its own
    exported, _ = json.JSONDecoder().raw_decode(out, out.index("{"))  # the flush's (exit exports again)
    (resource,) = exported["resource_metrics"]
    attributes = resource["resource"]["attributes"]
    assert attributes["service.name"] == "bridge-receiver" and len(attributes["service.instance.id"]) == 36
    (metric,) = [m for s in resource["scope_metrics"] for m in s["metrics"] if m["name"] == CONSUMED]
    assert [p["value"] for p in metric["data"]["data_points"]] == [2]
