"""``bridge up --entra``: the env file names the namespace, the managed identity, a registered client and the
certificates, so an unchanged application built on ``DefaultAzureCredential`` or ``EnvironmentCredential``
works in a shell that sources it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench import samples
from bridge.embedded import up
from bridge.embedded.stack import wait_until
from tests.integration.worker_support import entity_status

# The application part needs localhost:5671 (skipped when busy): one worker runs every test that needs it.
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("standard-ports")]

# What the SDK's own samples do (send_queue.py, receive_queue.py): no key, no certificate, no port.
APPLICATION = """
import os
from azure.identity import DefaultAzureCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage
client = ServiceBusClient(os.environ["SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"], DefaultAzureCredential())
with client, client.get_queue_sender("app-queue") as sender:
    sender.send_messages(ServiceBusMessage("from an unchanged application"))
with client, client.get_queue_receiver("app-queue", max_wait_time=5) as receiver:
    got = receiver.receive_messages(max_wait_time=5)
    for message in got:
        receiver.complete_message(message)
print([str(m) for m in got])
"""


def sourced(env_file: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a shell that did ``set -a; . <env_file>`` (no BRIDGE_*/Azure variables before)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("BRIDGE_", "AZURE_", "IDENTITY_"))}
    script = f'set -a; . "{env_file}"; set +a; exec "$@"'
    return subprocess.run(
        ["bash", "-c", script, "sourced", *command],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bridge_up_entra_runs_on_entra_id_only_and_its_env_file_serves_applications(tmp_path: Path) -> None:
    stacks: list[up.Stack] = []
    try:
        stack = up.start(tmp_path, concurrency=1, receivers=False, on_start=stacks.append, entra=True)
        text = stack.env_file.read_text()
        # The env file: the namespace by name, the loopback managed-identity endpoint, the certificates
        for name in ("IDENTITY_ENDPOINT='http://127.0.0.1:", "IDENTITY_HEADER=", "SSL_CERT_FILE=",
                     "REQUESTS_CA_BUNDLE=", "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE=",
                     "BRIDGE_PRIMARY__CREDENTIAL='managed_identity'"):  # fmt: skip
            assert name in text
        assert "CONNECTION_STRING" not in text and "SharedAccessKey" not in text
        # The bridge itself works: a message posted to the ingress reaches the primary
        answer = httpx.post(
            f"{stack.ingress_url}/v1/entities/orders/messages", json={"body": "x"}, timeout=10
        )
        assert answer.status_code == 202
        status = sourced(stack.env_file, sys.executable, "-m", "bridge.cli.main", "status", "--json")
        assert status.returncode == 0, status.stderr
        wait_until(
            lambda: entity_status(stack.local, "orders")["outbox_depth"] == 0, 60, 0.5, "sent from the outbox"
        )
        # A first send that timed out under load (a token fetched from a busy identity endpoint) fails over;
        # the worker's probes, signed in with Entra ID too, restore the primary: either way the bridge ends
        # on its primary with no key
        wait_until(
            lambda: entity_status(stack.local, "orders")["namespaces"]["primary"]["available"] is True,
            90, 1, "the primary available",
        )  # fmt: skip
        # An unchanged application signs in with DefaultAzureCredential (managed identity) over AMQPS:5671
        endpoints = stack.local.primary.endpoints
        if endpoints is None or "5671" not in (endpoints.amqps_ports or "").split(","):
            pytest.skip("port 5671 was busy on this machine: the application part needs it")
        app = sourced(stack.env_file, sys.executable, "-c", APPLICATION)
        assert app.returncode == 0, app.stderr[-3000:]
        assert "from an unchanged application" in app.stdout
        # The env file also names a registered client of the local issuer (tenant adfs: msal asks Entra ID
        # nothing): the SDK's EnvironmentCredential samples, sync and async, run from it alone
        for name in (
            "AZURE_TENANT_ID='adfs'",
            "AZURE_CLIENT_ID=",
            "AZURE_CLIENT_SECRET=",
            "AZURE_AUTHORITY_HOST=",
        ):
            assert name in stack.env_file.read_text()
        for sample in ("sync_samples/client_identity_authentication.py",
                       "async_samples/client_identity_authentication_async.py"):  # fmt: skip
            env = {"SERVICEBUS_QUEUE_NAME": "app-queue"}
            result = samples.run_sample(samples.samples_root(), sample, stack.env_file, env, 120)
            assert result.result == "pass", f"{sample}: {result.detail}"
    finally:
        for started in stacks:
            up.stop(started)
