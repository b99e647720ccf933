"""docker/compose.yaml run for real: both images built, the stack up, a namespace container stopped.

``pytest -m container`` (slow: it builds both images and runs eight containers; ``./scripts/bootstrap
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
from tests.integration.container_support import ROOT, Engine, build_images, engine, require, run

# Building both images takes minutes on a busy 2-core machine (docs/containers.md has the times).
pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.xdist_group("containers"),
    pytest.mark.timeout(1800),
]

COMPOSE = ROOT / "docker" / "compose.yaml"
OVERRIDE = Path(__file__).with_name("compose.host-network.yaml")
PORTS = ("REDIS", "PRIMARY", "SECONDARY", "INGRESS", "WORKER_METRICS", "BEAT_METRICS", "BEAT2_METRICS",
         "RECEIVER_METRICS")  # fmt: skip
# The receiver starts last, after the plain SDK has read the queues (it would take the messages first).
SERVICES = ("redis", "primary", "secondary", "ingress", "worker", "beat", "beat-2")
BATCH = 20
ARRIVAL_DEADLINE = 120.0


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


def resolved_compose_file(env: dict[str, str], directory: Path) -> Path:
    """The base file with the override on top, as ``docker-compose config`` resolves them, less the
    published ports: the engine refuses a port binding on the host network, which needs none."""
    config = run(["docker-compose", "-f", str(COMPOSE), "-f", str(OVERRIDE), "config"], env).stdout
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
        build_images(running)
        api_key = secrets.token_urlsafe(24)
        env = {
            **running.env,
            **{f"TEST_{name}_PORT": str(free_port()) for name in PORTS},
            "BRIDGE_DEMO_KEY": secrets.token_urlsafe(32),
            "BRIDGE_API_KEY_SHA256": hashlib.sha256(api_key.encode()).hexdigest(),
        }
        file = resolved_compose_file(env, tmp_path_factory.mktemp("compose"))
        up = Stack(running, f"sbbtest{os.getpid()}", file, env, api_key)
        try:
            up.compose("up", "-d", "--no-build", *SERVICES)
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
