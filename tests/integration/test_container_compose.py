"""docker/compose.yaml run for real: the three images built, the stack up, a namespace container stopped.

``pytest -m container`` (slow: it builds three images and runs ten containers; ``./scripts/bootstrap
containers`` installs the engine and runs it). The compose file is taken with
``tests/integration/compose.host-network.yaml`` on top, resolved by ``docker-compose config``: every service
on the host network with free loopback ports, images FROM the Debian stand-ins. The receiver service starts
last: the check reads the namespaces with the plain azure-servicebus SDK first, and a receiver would take the
messages before it.

The story: messages posted to the ingress reach the primary namespace; the primary's container is stopped,
and what is posted then reaches the secondary (passive replication fails over); the primary's container is
started again (its data volume kept), more messages are posted, and in the end every accepted MessageId is
found in one namespace or the other. Then the receiver service starts and hands one more message to its
handler, logging no warning.

With ``--profile monitoring`` the compose file's Prometheus runs too, on an image built from Debian's
prometheus binary (``PROMETHEUS_IMAGE``) and with ``docker/prometheus/prometheus.yml`` whose targets'
addresses are rewritten to the test's ports: its targets API lists every bridge process of the compose file,
each scraped and up (the ingress's ``/metrics`` with the API key as bearer credentials). With ``--profile
ledger`` the live ledger runs in its image (Java and PySpark on top of the bridge's): it rolls the stack's
journal, and its verdict reaches the ingress's status JSON through Redis.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode

from bridge.embedded.ports import free_port
from tests.integration.container_support import (
    BRIDGE_IMAGE,
    ROOT,
    Engine,
    build_images,
    build_prometheus_image,
    engine,
    require,
    run,
)

# Building the images takes minutes on a busy 2-core machine (docs/containers.md has the times).
pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.xdist_group("containers"),
    pytest.mark.timeout(1800),
]

COMPOSE = ROOT / "docker" / "compose.yaml"
OVERRIDE = Path(__file__).with_name("compose.host-network.yaml")
PORTS = ("REDIS", "PRIMARY", "SECONDARY", "INGRESS", "WORKER_METRICS", "BEAT_METRICS", "BEAT2_METRICS",
         "RECEIVER_METRICS", "PROMETHEUS")  # fmt: skip
# Each bridge process's metrics port in the override, by compose service (the base file's ``svc:port``)
METRICS_PORTS = {"ingress": "INGRESS", "worker": "WORKER_METRICS", "beat": "BEAT_METRICS",
                 "beat-2": "BEAT2_METRICS", "receiver": "RECEIVER_METRICS"}  # fmt: skip
PROMETHEUS_CONFIG = ROOT / "docker" / "prometheus" / "prometheus.yml"
SCRAPE_DEADLINE = 120.0
# The receiver starts last, after the plain SDK has read the queues (it would take the messages first).
SERVICES = ("redis", "primary", "secondary", "ingress", "worker", "beat", "beat-2")
BATCH = 20
ARRIVAL_DEADLINE = 120.0
LEDGER_DEADLINE = 300.0


@dataclass
class Stack:
    """The compose project: how to reach it and drive it."""

    engine: Engine
    project: str
    file: Path
    env: dict[str, str]
    api_key: str

    def compose(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return run(
            ["docker-compose", "-p", self.project, "-f", str(self.file), *args], self.env, timeout=timeout
        )

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def connection_string(self, namespace: str) -> str:
        return (
            f"Endpoint=sb://127.0.0.1:{self.env[f'TEST_{namespace.upper()}_PORT']};"
            "SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={self.env['BRIDGE_DEMO_KEY']};UseDevelopmentEmulator=true"
        )

    def post(self, count: int, tag: str) -> list[str]:
        """POST ``count`` messages to ``orders``; the MessageIds the ingress accepted (all must be)."""
        url = f"http://127.0.0.1:{self.env['TEST_INGRESS_PORT']}"
        accepted: list[str] = []
        with httpx.Client(base_url=url, headers={"x-api-key": self.api_key}, timeout=30) as http:
            for n in range(count):
                answer = http.post("/v1/entities/orders/messages", json={"body": f"{tag}-{n}"})
                assert answer.status_code == 202, answer.text
                accepted.append(answer.json()["message_id"])
        return accepted


def prometheus_config(env: dict[str, str], directory: Path) -> Path:
    """``docker/prometheus/prometheus.yml`` with every ``service:port`` target at ``127.0.0.1`` and that
    service's port in the override (with host networking there are no service names to resolve)."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    for job in config["scrape_configs"]:
        for static in job["static_configs"]:
            services = [target.split(":")[0] for target in static["targets"]]
            assert set(services) <= set(METRICS_PORTS), f"{job['job_name']} scrapes {services}"
            static["targets"] = [f"127.0.0.1:{env[f'TEST_{METRICS_PORTS[s]}_PORT']}" for s in services]
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def resolved_compose_file(env: dict[str, str], directory: Path) -> Path:
    """The base file with the override on top, as ``docker-compose config`` resolves them, less the
    published ports: the engine refuses a port binding on the host network, which needs none."""
    files = ["-f", str(COMPOSE), "-f", str(OVERRIDE)]
    profiles = ["--profile", "monitoring", "--profile", "ledger"]
    config = run(["docker-compose", *files, *profiles, "config"], env).stdout
    data = yaml.safe_load(config)
    for service in data["services"].values():
        assert service["network_mode"] == "host", service
        service.pop("ports", None)
    path = directory / "compose.resolved.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require("docker-compose")
    with engine() as running:
        build_images(running, "emulator", "runtime", "ledger")
        api_key = secrets.token_urlsafe(24)
        env = {
            **running.env,
            **{f"TEST_{name}_PORT": str(free_port()) for name in PORTS},
            "BRIDGE_DEMO_KEY": secrets.token_urlsafe(32),
            "BRIDGE_API_KEY": api_key,  # the monitoring profile's Prometheus scrapes the ingress with it
            "BRIDGE_API_KEY_SHA256": hashlib.sha256(api_key.encode()).hexdigest(),
        }
        directory = tmp_path_factory.mktemp("compose")
        env["PROMETHEUS_IMAGE"] = build_prometheus_image(running, directory / "prometheus-image")
        env["TEST_PROMETHEUS_CONFIG"] = str(prometheus_config(env, directory))
        file = resolved_compose_file(env, directory)
        up = Stack(running, f"sbbtest{os.getpid()}", file, env, api_key)
        try:
            # The live ledger starts with the rest: its Spark is up by the time its test runs.
            up.compose("--profile", "ledger", "up", "-d", "--no-build", *SERVICES, "ledger")
            running.wait_healthy([up.container(s) for s in SERVICES], deadline=180)
            yield up
        finally:
            subprocess.run(
                ["docker-compose", "-p", up.project, "-f", str(file), "down", "-v", "--timeout", "5"],
                env={**os.environ, **env},
                capture_output=True,
                timeout=300,
                check=False,
            )


def peek_ids(connection_string: str) -> set[str]:
    """MessageIds in ``orders`` now, read without taking them (the plain SDK)."""
    with (
        ServiceBusClient.from_connection_string(connection_string, retry_total=1) as client,
        client.get_queue_receiver("orders") as receiver,
    ):
        found: set[str] = set()
        sequence = 0
        while True:
            batch = receiver.peek_messages(max_message_count=100, sequence_number=sequence)
            if not batch:
                return found
            found.update(str(m.message_id) for m in batch)
            sequence = max(m.sequence_number or 0 for m in batch) + 1


def drain_ids(connection_string: str) -> list[str]:
    """Every MessageId in ``orders``, received and deleted (the plain SDK); duplicates kept."""
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    got: list[str] = []
    with (
        ServiceBusClient.from_connection_string(connection_string, retry_total=1) as client,
        client.get_queue_receiver("orders", receive_mode=mode) as receiver,
    ):
        while batch := receiver.receive_messages(max_message_count=100, max_wait_time=3):
            got.extend(str(m.message_id) for m in batch)
    return got


def wait_for(ids: set[str], connection_string: str, what: str) -> None:
    end = time.monotonic() + ARRIVAL_DEADLINE
    while not ids <= (seen := peek_ids(connection_string)):
        if time.monotonic() > end:
            pytest.fail(f"{len(ids - seen)} of {len(ids)} messages never reached {what}")
        time.sleep(2)


def test_messages_posted_across_a_stopped_namespace_container_all_arrive(stack: Stack) -> None:
    primary, secondary = stack.connection_string("primary"), stack.connection_string("secondary")

    # Given the stack up, messages posted to the ingress reach the primary namespace
    first = stack.post(BATCH, "before")
    wait_for(set(first), primary, "the primary namespace")

    # When the primary's container stops, what is posted meanwhile reaches the secondary: a failover
    stack.compose("stop", "--timeout", "5", "primary")
    during = stack.post(BATCH, "during")
    wait_for(set(during), secondary, "the secondary namespace while the primary was stopped")

    # and when it starts again (same data volume), messages keep flowing
    stack.compose("start", "primary")
    stack.engine.wait_healthy([stack.container("primary")], deadline=90)
    after = stack.post(BATCH, "after")

    # Then every accepted message is in one namespace or the other, read with the plain SDK
    expected = set(first) | set(during) | set(after)
    end = time.monotonic() + ARRIVAL_DEADLINE
    arrived: list[str] = []
    while not expected <= set(arrived) and time.monotonic() < end:
        arrived += drain_ids(primary) + drain_ids(secondary)
    assert set(first) <= set(arrived), "the primary lost messages it held across the restart of its container"
    assert expected - set(arrived) == set(), (
        f"{len(expected - set(arrived))} of {len(expected)} never arrived"
    )

    # And the receiver service, started last, hands a new message to its handler without complaint
    last = stack.post(1, "for-the-receiver")[0]
    stack.compose("up", "-d", "--no-build", "receiver")
    receiver = stack.container("receiver")
    stack.engine.wait_healthy([receiver], deadline=120)
    end = time.monotonic() + ARRIVAL_DEADLINE
    while f"received {last} on orders" not in (log := stack.engine.docker("logs", receiver).stderr):
        assert time.monotonic() < end, f"the receiver never handled {last}:\n{log[-3000:]}"
        time.sleep(2)
    assert '"level": "WARNING"' not in log and '"level": "ERROR"' not in log, log[-3000:]


def bridge_services() -> set[str]:
    """The compose file's services that run a bridge process (the bridge's runtime image)."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    return {name for name, service in services.items() if service.get("image") == BRIDGE_IMAGE}


def test_prometheus_scrapes_every_bridge_process(stack: Stack) -> None:
    # Given every bridge process up (the receiver is the last) and the monitoring profile's Prometheus
    stack.compose("--profile", "monitoring", "up", "-d", "--no-build", "receiver", "prometheus")
    stack.engine.wait_healthy([stack.container("receiver")], deadline=120)
    expected = {f"127.0.0.1:{stack.env[f'TEST_{METRICS_PORTS[s]}_PORT']}": s for s in bridge_services()}
    assert set(expected.values()) == set(METRICS_PORTS), (
        "a bridge service of the compose file has no port here"
    )
    url = f"http://127.0.0.1:{stack.env['TEST_PROMETHEUS_PORT']}/api/v1/targets"

    # When Prometheus has scraped each of them (every 15 s by its config)
    end = time.monotonic() + SCRAPE_DEADLINE
    targets: list[dict[str, object]] = []
    while time.monotonic() < end:
        try:
            answer = httpx.get(url, params={"state": "active"}, timeout=10)
            targets = answer.json()["data"]["activeTargets"] if answer.status_code == 200 else []
        except httpx.TransportError:
            targets = []
        if targets and all(t["health"] == "up" for t in targets) and len(targets) >= len(expected):
            break
        time.sleep(2)

    # Then its targets API lists every bridge process of the compose file, each up, and nothing else
    seen = {str(t["labels"]["instance"]): t for t in targets}  # type: ignore[index]
    assert set(seen) == set(expected), f"targets {sorted(seen)}, bridge processes {expected}"
    log = stack.engine.docker("logs", stack.container("prometheus"), check=False).stderr[-3000:]
    for instance, target in seen.items():
        assert target["health"] == "up", f"{expected[instance]}: {target['lastError']}\n{log}"
    assert {str(t["labels"]["job"]) for t in targets} == {  # type: ignore[index]
        "bridge-ingress", "bridge-worker", "bridge-beat", "bridge-receiver"
    }  # fmt: skip


def test_the_ledger_profile_publishes_its_verdict_to_the_status(stack: Stack) -> None:
    # Given the ledger profile's service, started with the stack, and messages accepted
    stack.post(3, "for-the-ledger")
    url = f"http://127.0.0.1:{stack.env['TEST_INGRESS_PORT']}/status.json"

    # When it has rolled the journal and published what it read (starting Spark takes tens of seconds)
    end = time.monotonic() + LEDGER_DEADLINE
    ledger = None
    while time.monotonic() < end and not (ledger and ledger["entities"].get("orders", {}).get("accepted")):
        time.sleep(2)
        ledger = httpx.get(url, headers={"x-api-key": stack.api_key}, timeout=10).json()["ledger"]

    # Then the ingress's status JSON carries its verdict: every message accounted for, none overdue
    log = stack.engine.docker("logs", "--tail", "30", stack.container("ledger"), check=False).stderr
    assert ledger is not None and ledger["events"] > 0, f"no publication of orders: {ledger}\n{log}"
    assert (ledger["verdict"], ledger["overdue"]) == ("ok", 0), ledger
    assert ledger["entities"]["orders"]["accepted"] >= 3
