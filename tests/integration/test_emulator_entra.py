"""Microsoft Entra ID on the local Service Bus, through the real azure-identity credentials and the SDK.

One namespace runs the token issuer with local auth disabled; clients are built from a host name and a
credential over AMQPS, as on Azure. Refusals are checked both ways tokens arrive: CBS put-token (through the
SDK, a ready-made token handed over as ``AzureSasCredential`` — the namespace decides by the token, not by the
declared type) and ``Authorization: Bearer`` on the management endpoint (plain ``requests``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import requests
from azure.core.credentials import AzureSasCredential
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import CertificateCredential, EnvironmentCredential, WorkloadIdentityCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError
from azure.servicebus.management import ServiceBusAdministrationClient
from cryptography.hazmat.primitives.asymmetric import rsa

from bridge.embedded.namespaces import LocalNamespace
from bridge.emulator.identity import tokens
from bridge.emulator.identity.directory import Identity
from bridge.emulator.identity.keys import ensure_issuer_key
from tests.integration.entra_support import (
    SECRETS,
    client_id,
    entra_admin,
    entra_client,
    entra_namespace,
    managed_identity_env,
    secret_credential,
    system_managed_identity,
)
from tests.integration.sdk_conformance import receive

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("entra")


@pytest.fixture(scope="module")
def ns(folder: Path) -> Iterator[LocalNamespace]:
    namespace = entra_namespace(folder)
    try:
        yield namespace
    finally:
        namespace.close()


def sas_token_client(ns: LocalNamespace, token: str) -> ServiceBusClient:
    """A client that presents ``token`` as it is on CBS put-token."""
    return ServiceBusClient(
        "localhost",
        AzureSasCredential(token),
        custom_endpoint_address=f"sb://localhost:{ns.port}",
        transport_type=TransportType.Amqp,
        connection_verify=ns.certificate,
        retry_total=0,
    )


def test_managed_identity_sends_receives_and_manages_over_amqps(ns: LocalNamespace) -> None:
    # Given the system-assigned identity (Data Owner) through IDENTITY_ENDPOINT/IDENTITY_HEADER
    with managed_identity_env(ns):
        credential = system_managed_identity()
        # When it creates a queue, sends and receives over AMQPS
        with entra_admin(ns, credential) as admin:
            admin.create_queue("mi-orders")
            with entra_client(ns, credential) as client:
                with client.get_queue_sender("mi-orders") as sender:
                    sender.send_messages(ServiceBusMessage("hello"))
                assert admin.get_queue_runtime_properties("mi-orders").active_message_count == 1
                with client.get_queue_receiver("mi-orders") as receiver:
                    (message,) = receive(receiver, 1)
                    receiver.complete_message(message)
        # Then the message went through with no SAS anywhere
        assert str(message) == "hello"


def test_sender_identity_cannot_listen_and_the_error_names_the_claim(ns: LocalNamespace) -> None:
    credential = secret_credential(ns, "sender")
    with entra_client(ns, credential) as client:
        with client.get_queue_sender("role-checks") as sender:
            sender.send_messages(ServiceBusMessage("sent by a Data Sender"))
        with pytest.raises(ServiceBusError) as refused, client.get_queue_receiver("role-checks") as receiver:
            receiver.receive_messages(max_wait_time=1)
    assert "'Listen' claim(s) are required" in str(refused.value)
    with entra_admin(ns, credential) as admin, pytest.raises(ClientAuthenticationError) as manage:
        admin.create_queue("not-for-senders")
    assert "'Manage' claim(s) are required" in str(manage.value)


def test_listener_identity_receives_but_cannot_send(ns: LocalNamespace) -> None:
    with (
        managed_identity_env(ns),
        entra_client(ns, system_managed_identity()) as owner,
        owner.get_queue_sender("listen-only") as sender,
    ):
        sender.send_messages(ServiceBusMessage("for the listener"))
    with entra_client(ns, secret_credential(ns, "listener")) as client:
        with client.get_queue_receiver("listen-only") as receiver:
            (message,) = receive(receiver, 1)
            receiver.complete_message(message)
        with pytest.raises(ServiceBusError) as refused, client.get_queue_sender("listen-only") as sender:
            sender.send_messages(ServiceBusMessage("refused"))
    assert "'Send' claim(s) are required" in str(refused.value)


def test_certificate_and_workload_identity_credentials_sign_in(ns: LocalNamespace, folder: Path) -> None:
    endpoints = ns.endpoints
    assert endpoints is not None and endpoints.authority and endpoints.tenant_id
    assert endpoints.federated_tokens
    certificate = CertificateCredential(
        endpoints.tenant_id,
        client_id("certified"),
        str(folder / "identities" / "client.pem"),
        authority=endpoints.authority,
        disable_instance_discovery=True,
        connection_verify=ns.certificate,
    )
    workload = WorkloadIdentityCredential(
        tenant_id=endpoints.tenant_id,
        client_id=client_id("sender"),
        token_file_path=str(Path(endpoints.federated_tokens) / "sender.jwt"),
        authority=endpoints.authority,
        disable_instance_discovery=True,
        connection_verify=ns.certificate,
    )
    for credential in (certificate, workload):
        with entra_client(ns, credential) as client, client.get_queue_sender("federated") as sender:
            sender.send_messages(ServiceBusMessage("signed in"))


def test_environment_credential_signs_in_with_the_adfs_tenant(
    ns: LocalNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AZURE_TENANT_ID=adfs``: msal skips instance discovery (no call to Entra ID itself) and reads the
    issuer's AD FS metadata, so ``EnvironmentCredential`` needs nothing it cannot be given by environment."""
    endpoints = ns.endpoints
    assert endpoints is not None and endpoints.authority
    monkeypatch.setenv("AZURE_TENANT_ID", "adfs")
    monkeypatch.setenv("AZURE_CLIENT_ID", client_id("sender"))
    monkeypatch.setenv("AZURE_CLIENT_SECRET", SECRETS["sender"])
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", endpoints.authority)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ns.certificate)
    with (
        entra_client(ns, EnvironmentCredential()) as client,
        client.get_queue_sender("adfs-tenant") as sender,
    ):
        sender.send_messages(ServiceBusMessage("signed in as an AD FS client"))


def test_local_auth_disabled_refuses_sas(ns: LocalNamespace) -> None:
    with (
        ServiceBusClient.from_connection_string(ns.connection_string, retry_total=0) as client,
        pytest.raises(ServiceBusAuthenticationError) as refused,
        client.get_queue_sender("sas-refused") as sender,
    ):
        sender.send_messages(ServiceBusMessage("refused"))
    # The SDK reports a refused put-token without its description; the management endpoint says why.
    assert refused.value is not None
    with (
        ServiceBusAdministrationClient.from_connection_string(
            ns.connection_string, connection_verify=ns.certificate, retry_total=0
        ) as admin,
        pytest.raises(ClientAuthenticationError) as manage,
    ):
        admin.create_queue("sas-refused")
    assert "LocalAuthDisabled" in str(manage.value)


def bad_tokens(ns: LocalNamespace, folder: Path) -> dict[str, str]:
    """Tokens the namespace must refuse, each made the way a real mistake or attack makes it."""
    key = ensure_issuer_key(folder / "issuer")
    owner = Identity("owner", client_id("owner"), ("Azure Service Bus Data Owner",))
    expired, _ = tokens.mint(key, owner, time.time() - 600, 120)
    claims = jwt.decode(tokens.mint(key, owner, time.time(), 600)[0], options={"verify_signature": False})
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    storage = secret_credential(ns, "owner").get_token("https://storage.azure.com/.default").token
    return {
        "wrong audience": storage,
        "expired": expired,
        "unsigned": jwt.encode(claims, None, algorithm="none"),
        "signed by another key": jwt.encode(claims, other, algorithm="RS256", headers={"kid": key.kid}),
    }


def test_wrong_audience_expired_and_unsigned_tokens_are_refused(ns: LocalNamespace, folder: Path) -> None:
    # The SDK cannot present a hand-made token on CBS (its SAS credential parses ``se=`` out of the token),
    # so these go to the management endpoint, which checks them with the same policy as CBS put-token.
    for reason, token in bad_tokens(ns, folder).items():
        answer = requests.get(
            f"https://localhost:{ns.port}/$Resources/queues?api-version=2021-05",
            headers={"Authorization": f"Bearer {token}"},
            verify=ns.certificate,
            timeout=10,
        )
        assert answer.status_code == 401, reason
        assert token not in answer.text
    with managed_identity_env(ns), entra_admin(ns, system_managed_identity()) as admin:
        assert [q.name for q in admin.list_queues()] != []  # the same request with a good token is served


def test_token_refresh_keeps_a_sender_working(tmp_path: Path) -> None:
    # Given tokens that live 20 s (the SDK renews at 10 % of the lifetime left, 2 s ahead: room for a slow
    # send on a loaded machine), and a namespace that closes a connection whose token runs out
    renewals_while_sending(tmp_path, lifetime=20, seconds=25, interval=0.25)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_token_refresh_every_120_s_for_ten_minutes(tmp_path: Path) -> None:
    renewals_while_sending(tmp_path, lifetime=120, seconds=600, interval=1.0)


def renewals_while_sending(tmp_path: Path, *, lifetime: int, seconds: float, interval: float) -> None:
    """Send on one sender for ``seconds``: no send may fail and every token must have been renewed."""
    ns = entra_namespace(tmp_path, "refresh", lifetime=lifetime, log_level="INFO")
    try:
        with managed_identity_env(ns):
            credential = system_managed_identity()
            # When one sender sends for several lifetimes on one connection
            deadline = time.monotonic() + seconds
            sent = 0
            with entra_client(ns, credential) as client, client.get_queue_sender("refresh") as sender:
                while time.monotonic() < deadline:
                    sender.send_messages(ServiceBusMessage(f"m{sent}"))
                    sent += 1
                    time.sleep(interval)
            # Then no send failed and every message is there
            with entra_admin(ns, credential) as admin:
                assert admin.get_queue_runtime_properties("refresh").active_message_count == sent
    finally:
        ns.close()
    issued = (tmp_path / "refresh" / "emulator.log").read_text().count("token issued to owner")
    assert issued >= int(seconds // lifetime) + 1, "the credential did not renew its token"
