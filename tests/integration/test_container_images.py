"""The emulator and live ledger images, built and started for real: the short container test of the default
suite.

It builds ``servicebus-bridge-emulator:local`` FROM the Debian stand-in base (``scripts/images``; the first
run on a machine also makes the stand-ins with debootstrap, later runs find them cached), checks what the
image promises (a non-root user, a health check, the OCI labels) and starts one container on the host
network: its health check must pass, and the raw azure-servicebus SDK sends a message through it and
receives it back. ``servicebus-bridge-ledger:local`` (the runtime image plus the stand-in's Java and
PySpark) runs ``bridge ledger --offline`` over a journal with known answers mounted into it, and its
published ``ledger.json`` must hold them. The whole stack, failover included, is
``test_container_compose.py`` (``-m container``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from bridge.embedded.ports import free_port
from tests.integration.container_support import (
    EMULATOR_IMAGE,
    LEDGER_IMAGE,
    STAND_IN_BASE,
    Engine,
    build_images,
    engine,
)
from tests.integration.ledger.live_journal import write_journal

# The first run on a machine also runs debootstrap; docs/containers.md has the times.
pytestmark = [pytest.mark.container, pytest.mark.xdist_group("containers"), pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def images() -> Iterator[Engine]:
    with engine() as running:
        build_images(running, "emulator", "runtime", "ledger")
        yield running


def test_the_emulator_image_runs_as_a_user_with_a_health_check_and_labels(images: Engine) -> None:
    config = images.inspect(EMULATOR_IMAGE)["Config"]

    assert config["User"] == "bridge"
    assert config["Entrypoint"] == ["bridge"]
    assert config["Healthcheck"]["Test"][:2] == ["CMD", "python3"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "servicebus-bridge-emulator"
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.base.name"] == STAND_IN_BASE


def test_a_namespace_container_turns_healthy_and_carries_a_message(images: Engine) -> None:
    # Given a local namespace in a container, listening on a free loopback port
    port, key = free_port(), secrets.token_urlsafe(24)
    name = f"sbb-emulator-{secrets.token_hex(4)}"
    images.docker(
        "run", "-d", "--name", name, "--network", "host",
        "-e", f"BRIDGE_EMULATOR_KEY={key}", "-e", f"HEALTHCHECK_URL=tcp://127.0.0.1:{port}",
        EMULATOR_IMAGE,
        "emulator", "--host", "127.0.0.1", "--port", str(port), "--data-dir", "/data", "--auto-create",
    )  # fmt: skip
    try:
        # When its health check has passed
        images.wait_healthy([name], deadline=90)
        assert images.docker("exec", name, "id", "-u").stdout.strip() == "10001"

        # Then the plain SDK sends to it and receives the message back
        connection = (
            f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=RootManageSharedAccessKey;"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true"
        )
        body = secrets.token_hex(8)
        with ServiceBusClient.from_connection_string(connection, retry_total=1) as client:
            with client.get_queue_sender("smoke") as sender:
                sender.send_messages(ServiceBusMessage(body, message_id="smoke-1"))
            with client.get_queue_receiver("smoke", max_wait_time=10) as receiver:
                got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                for message in got:
                    receiver.complete_message(message)
        assert [(m.message_id, str(m)) for m in got] == [("smoke-1", body)]
    finally:
        images.docker("rm", "-f", name, check=False)


def test_the_ledger_image_reads_a_mounted_journal_and_publishes_its_verdict(
    images: Engine, tmp_path: Path
) -> None:
    # Given a journal with known answers, mounted read-only, and a ledger folder its user may write
    journal, folder = tmp_path / "journal", tmp_path / "ledger"
    events = write_journal(journal, files=1)
    folder.mkdir()
    folder.chmod(0o777)
    name = f"sbb-ledger-{secrets.token_hex(4)}"
    images.docker(
        "run", "-d", "--name", name, "--network", "host",
        "-v", f"{journal}:/var/lib/bridge/journal:ro", "-v", f"{folder}:/var/lib/bridge/ledger",
        LEDGER_IMAGE,
        "ledger", "--offline", "--journal", "/var/lib/bridge/journal", "--dir", "/var/lib/bridge/ledger",
    )  # fmt: skip
    try:
        # When the live ledger in it has read every event, and the container is stopped
        ledger = wait_for_events(images, name, folder / "ledger.json", events, deadline=600)
        images.docker("stop", "-t", "120", name, timeout=150)  # as the compose file's stop_grace_period
        assert images.inspect(name)["State"]["ExitCode"] == 0, images.docker("logs", name).stderr[-2000:]
    finally:
        images.docker("rm", "-f", name, check=False)

    # Then its publication holds the journal's known answers
    orders, payments = ledger["entities"]["orders"], ledger["entities"]["payments"]
    assert (ledger["verdict"], ledger["events"]) == ("overdue", events)
    assert (orders["accepted"], orders["handled"], orders["dead_lettered"]) == (4, 3, 1)
    assert (payments["accepted"], payments["pending_backlog"], payments["failovers"]) == (2, 1, 1)
    assert [m["message_id"] for m in orders["overdue_ids"]] == ["a3"]


def wait_for_events(images: Engine, container: str, published: Path, events: int, deadline: float) -> Any:
    """The ledger's publication once it counts ``events`` events; fails with the logs if the container
    exits or the deadline passes first (starting Spark takes tens of seconds on a loaded machine)."""
    end = time.monotonic() + deadline
    ledger: Any = None
    while time.monotonic() < end and images.inspect(container)["State"]["Running"]:
        ledger = json.loads(published.read_text()) if published.exists() else None
        if ledger is not None and ledger["events"] >= events:
            return ledger
        time.sleep(2.0)
    logs = images.docker("logs", "--tail", "30", container, check=False)
    pytest.fail(f"the ledger never read {events} events (last: {ledger}):\n{logs.stdout}{logs.stderr}")
