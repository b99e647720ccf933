"""Plain ``bridge up`` (SAS allowed) on the SDK's standard ports: the SDK's SAS samples run unchanged.

The samples that sign in with a key (``AzureNamedKeyCredential``), a token (``AzureSasCredential``) or a
connection string name no port and no certificate: over AMQPS the SDK dials ``localhost:5671`` and checks
the certificate against certifi's bundle. ``bridge up`` serves the primary there too (and HTTPS on 443)
and its env file holds ``SERVICEBUS_FULLY_QUALIFIED_NAMESPACE``, ``SERVICEBUS_SAS_POLICY``,
``SERVICEBUS_SAS_KEY``, ``SERVICEBUS_CONNECTION_STR`` and the trust (``bridge/embedded/trust.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from bench import samples
from bridge.embedded import up
from bridge.embedded.trust import serves_standard_ports
from tests.integration.test_up_entra import sourced

# Needs localhost:5671 and 443: one worker runs every test that needs them, one after another.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("standard-ports")]

CREDENTIAL_SAMPLES = [
    "sync_samples/authenticate_using_azure_named_key_credential.py",
    "async_samples/authenticate_using_azure_named_key_credential_async.py",
    "sync_samples/authenticate_using_azure_sas_credential.py",
    "async_samples/authenticate_using_azure_sas_credential_async.py",
]
"""The default suite's share (about 2 s each); ``-m slow`` runs the rest of ``SAS_SAMPLES`` (the two
``sample_code_servicebus`` take about 80 s each)."""

# An unchanged application: a key, the namespace by name, no port and no certificate.
APPLICATION = """
import os
from azure.core.credentials import AzureNamedKeyCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
namespace = os.environ["SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"]
key = AzureNamedKeyCredential(os.environ["SERVICEBUS_SAS_POLICY"], os.environ["SERVICEBUS_SAS_KEY"])
# The administration client takes SAS only as a connection string; it signs for https://localhost (443).
with ServiceBusAdministrationClient.from_connection_string(os.environ["SERVICEBUS_CONNECTION_STR"]) as admin:
    admin.create_queue("sas-app")
with ServiceBusClient(namespace, key) as client:
    with client.get_queue_sender("sas-app") as sender:
        sender.send_messages(ServiceBusMessage("over AMQPS on 5671"))
    with client.get_queue_receiver("sas-app", max_wait_time=5) as receiver:
        got = receiver.receive_messages(max_wait_time=5)
        for message in got:
            receiver.complete_message(message)
print([str(m) for m in got])
"""


@pytest.fixture(scope="module")
def sas_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[up.Stack]:
    """``bridge up`` on the standard ports (waiting, bounded, for another stack to let go of them)."""
    stacks: list[up.Stack] = []
    samples.wait_ports_free(samples.SDK_PORTS, samples.PORT_WAIT)
    try:
        base = tmp_path_factory.mktemp("up-sas")
        entities = base / "sample-entities.toml"
        entities.write_text(samples.entities_toml(samples.SAS_SAMPLES))
        stack = up.start(
            base,
            concurrency=1,
            receivers=False,
            on_start=stacks.append,
            standard_ports=True,
            namespace_entities=entities,
        )
        if not serves_standard_ports(stack.local.primary):
            pytest.skip("port 5671 was busy on this machine: the SDK's samples dial it")
        yield stack
    finally:
        for started in stacks:
            up.stop(started)


def test_the_env_file_names_the_namespace_its_key_and_the_trust(sas_stack: up.Stack) -> None:
    text = sas_stack.env_file.read_text()
    for name in ("SERVICEBUS_FULLY_QUALIFIED_NAMESPACE='localhost'", "SERVICEBUS_SAS_POLICY=",
                 "SERVICEBUS_SAS_KEY=", "SERVICEBUS_CONNECTION_STR='Endpoint=sb://localhost/;",
                 "SSL_CERT_FILE=",
                 "NODE_EXTRA_CA_CERTS=", "PYTHONPATH="):  # fmt: skip
        assert name in text
    assert "5671" in up.describe(sas_stack)[-2]


def test_an_application_signs_in_with_a_key_over_amqps_and_https(sas_stack: up.Stack) -> None:
    app = sourced(sas_stack.env_file, sys.executable, "-c", APPLICATION)
    assert app.returncode == 0, app.stderr[-3000:]
    assert "over AMQPS on 5671" in app.stdout


def _run(sas_stack: up.Stack, sample: str) -> None:
    root = samples.samples_root()
    bound = samples.timeout_for(root, sample, 180)
    result = samples.run_sample(root, sample, sas_stack.env_file, samples.sample_env(sample), bound)
    assert result.result == "pass", f"{sample}: {result.detail}"


@pytest.mark.parametrize("sample", CREDENTIAL_SAMPLES)
def test_the_sdk_samples_signing_in_with_a_key_or_a_token_pass(sas_stack: up.Stack, sample: str) -> None:
    _run(sas_stack, sample)


@pytest.mark.slow
@pytest.mark.parametrize("sample", [s for s in samples.SAS_SAMPLES if s not in CREDENTIAL_SAMPLES])
def test_the_other_sas_samples_pass(sas_stack: up.Stack, sample: str) -> None:
    _run(sas_stack, sample)
