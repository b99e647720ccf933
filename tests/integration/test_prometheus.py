"""The sample alert rules and a real Prometheus scraping a real stack.

``promtool`` (Debian's prometheus package, installed by ``scripts/bootstrap test``) checks
``docker/prometheus/alerts.yml`` and runs its unit tests (``alerts.test.yml``: each rule fires on made-up
series). Then a Prometheus server scrapes the ingress (with the API key as bearer credentials, as the compose
file's Prometheus does), a worker, a beat and a receiver of a live stack, evaluates the same rule file, and
during a primary outage the failover alert fires on the real series; its classic UI is loaded in Chromium.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.embedded.ports import free_port, wait_listening
from bridge.embedded.stack import LocalStack, wait_until
from tests.integration.operations_support import chromium, chromium_binary, start_serve

RULES = Path(__file__).resolve().parents[2] / "docker" / "prometheus"
PROMTOOL, PROMETHEUS = shutil.which("promtool"), shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None or PROMETHEUS is None,
    reason="Debian's prometheus package is not installed (scripts/bootstrap test installs it)",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], cwd=RULES, capture_output=True, text=True, check=False)


def test_promtool_accepts_the_rules_and_each_fires_in_its_unit_tests() -> None:
    checked = _promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout
    tested = _promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _config(base: Path, targets: dict[str, list[str]], api_key: str) -> Path:
    """The compose file's scrape jobs with this stack's loopback ports, every second."""
    key_file = base / "bridge-api-key"
    key_file.write_text(api_key)
    jobs: list[dict[str, Any]] = []
    for job, addresses in targets.items():
        entry: dict[str, Any] = {"job_name": job, "static_configs": [{"targets": addresses}]}
        if job == "bridge-ingress":
            entry["authorization"] = {"type": "Bearer", "credentials_file": str(key_file)}
        jobs.append(entry)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES / "alerts.yml")],
        "scrape_configs": jobs,
    }
    path = base / "prometheus.yml"
    path.write_text(json.dumps(config))  # YAML is a superset of JSON
    return path


@pytest.fixture
def prometheus_of(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(config: Path) -> str:
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        started.append(
            subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        assert wait_listening("127.0.0.1", port, 30), (tmp_path / "prometheus.log").read_text()
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


def _alerts(prometheus: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"][
        "alerts"
    ]
    return alerts


def test_prometheus_scrapes_every_process_and_the_failover_alert_fires(
    tmp_path: Path, prometheus_of: Any
) -> None:
    api_key = secrets.token_urlsafe(24)
    stack = LocalStack(
        tmp_path / "stack",
        entities={"orders": {"replication": "passive"}},
        settings={
            "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
            "BRIDGE_WORKERS__SWEEP_INTERVAL": "0.5",
            "BRIDGE_INGRESS__REQUIRE_API_KEY": "true",
            "BRIDGE_INGRESS__API_KEYS": json.dumps(
                [{"name": "prometheus", "sha256": hashlib.sha256(api_key.encode()).hexdigest()}]
            ),
        },
    ).start()
    ports = {"worker": free_port(), "beat": free_port(), "receiver": free_port()}
    try:
        # Given every kind of bridge process, each with its metrics endpoint
        stack.start_worker(BRIDGE_METRICS_PORT=str(ports["worker"]))
        stack.start_beat(BRIDGE_METRICS_PORT=str(ports["beat"]))
        handler = "bridge.embedded.handlers:log_message"
        receiver = ["receive", "orders", "--handler", handler]
        stack.start_bridge("receiver", *receiver, BRIDGE_METRICS_PORT=str(ports["receiver"]))
        ingress = start_serve(stack)
        targets = {
            "bridge-ingress": [ingress.removeprefix("http://")],
            "bridge-worker": [f"127.0.0.1:{ports['worker']}"],
            "bridge-beat": [f"127.0.0.1:{ports['beat']}"],
            "bridge-receiver": [f"127.0.0.1:{ports['receiver']}"],
        }
        prometheus = prometheus_of(_config(tmp_path, targets, api_key))

        # When Prometheus scrapes them all: every target is up, the ingress with its bearer key
        seen: dict[str, str] = {}

        def health() -> dict[str, str]:
            # Prometheus answers 503 "Service Unavailable" until it is ready: no targets seen yet
            answer = httpx.get(f"{prometheus}/api/v1/targets", timeout=10)
            active = answer.json()["data"]["activeTargets"] if answer.status_code == 200 else []
            seen.clear()
            seen.update({t["labels"]["job"]: t["health"] for t in active})
            return dict(seen)

        up = {job: "up" for job in targets}
        try:
            wait_until(lambda: health() == up, 60, 0.5, "every target up")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} (last: {seen})") from None
        assert _alerts(prometheus) == []  # a healthy stack, AOF on: nothing fires

        # And the primary goes down while messages arrive
        headers = {"x-api-key": api_key}
        for i in range(3):
            httpx.post(f"{ingress}/v1/entities/orders/messages", json={"body": f"m{i}"}, headers=headers)
        stack.primary.control.outage()
        for i in range(3):
            httpx.post(f"{ingress}/v1/entities/orders/messages", json={"body": f"o{i}"}, headers=headers)

        # Then the failover alert fires on the real series, and the primary's is pending (for: 1m)
        def states() -> dict[str, str]:
            return {a["labels"]["alertname"]: a["state"] for a in _alerts(prometheus)}

        wait_until(lambda: states().get("BridgeEntityFailedOver") == "firing", 90, 0.5, "the failover alert")
        wait_until(lambda: states().get("BridgeNamespaceDown") == "pending", 30, 0.5, "the namespace alert")
        fired = next(a for a in _alerts(prometheus) if a["labels"]["alertname"] == "BridgeEntityFailedOver")
        assert fired["labels"]["entity"] == "orders"
        assert "BridgeRedisDurabilityDegraded" not in states()
        # As a person sees it: Prometheus's own alerts page names the firing rule
        if chromium_binary() is not None:
            shot = tmp_path / "prometheus-alerts.png"
            dom = chromium(f"{prometheus}/classic/alerts", screenshot=shot)
            assert "BridgeEntityFailedOver" in dom and "firing" in dom.lower()
            assert shot.stat().st_size > 10_000
    finally:
        stack.stop()
