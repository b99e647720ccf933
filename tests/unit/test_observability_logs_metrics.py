"""Log lines (JSON, secrets filtered) and the rules the metric definitions must keep."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import Counter, Histogram

from bridge.observability import metrics
from bridge.observability.logs import configure_logging
from bridge.settings import Settings
from bridge.status.exposition import remove_orphaned_dirs

NAMESPACE_KEY = "bmFtZXNwYWNlLWtleS1mb3ItbG9ncw=="
API_KEY = "an-api-key-that-clients-send-123"


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    settings = Settings(
        redis_url="redis://:redis-password-xyz@127.0.0.1:6390/0",
        primary={
            "connection_string": f"Endpoint=sb://a.example/;SharedAccessKeyName=k;SharedAccessKey={NAMESPACE_KEY}"
        },
        ingress={"api_keys": [{"name": "app", "sha256": hashlib.sha256(API_KEY.encode()).hexdigest()}]},
        log_json=True,
    )
    configure_logging(settings, "test", stream=stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def test_json_lines_carry_the_fields_and_never_a_secret(log_stream: io.StringIO) -> None:
    log = logging.getLogger("bridge.test")
    log.warning("failover of %s: %s", "orders", f"SharedAccessKey={NAMESPACE_KEY} refused")
    log.info("client sent %s with redis://:redis-password-xyz@127.0.0.1:6390/0", API_KEY)
    try:
        raise RuntimeError(f"key {NAMESPACE_KEY}")
    except RuntimeError:
        log.exception("failed")
    lines = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert [line["level"] for line in lines] == ["WARNING", "INFO", "ERROR"]
    assert lines[0]["message"].startswith("failover of orders: SharedAccessKey=")
    assert lines[0]["component"] == "test" and lines[0]["logger"] == "bridge.test"
    assert "RuntimeError" in lines[2]["exc"]
    text = log_stream.getvalue()
    for secret in (NAMESPACE_KEY, API_KEY, "redis-password-xyz"):
        assert secret not in text


def test_every_per_process_series_has_labels_and_a_conventional_name() -> None:
    # Labels: importing the module creates no value, so the prefork worker can still choose file storage.
    for metric in metrics.PROCESS_METRICS:
        assert metric._labelnames, metric._name
        assert metric._name.startswith("bridge_")
        assert "message_id" not in metric._labelnames
        if isinstance(metric, Histogram):
            assert metric._name.endswith("_seconds")
        else:
            assert isinstance(metric, Counter)
    for spec in metrics.STATE_METRICS:
        assert re.fullmatch(r"bridge_[a-z_]+", spec.name)
        assert not spec.name.endswith("_total")  # counters get it on exposition
    names = [m._name for m in metrics.PROCESS_METRICS] + [s.name for s in metrics.STATE_METRICS]
    assert len(names) == len(set(names))


def test_metrics_folders_of_dead_processes_are_swept(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = tmp_path / f"bridge-metrics-{gone.pid}-abc123"
    mine = tmp_path / f"bridge-metrics-{os.getpid()}-def456"
    unrelated = tmp_path / "bridge-metrics-notapid-x"
    for path in (orphan, mine, unrelated):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"x")
    assert remove_orphaned_dirs(tmp_path) == [orphan]
    assert not orphan.exists() and mine.exists() and unrelated.exists()
