"""Local namespaces that sign in with Microsoft Entra ID: an identities file, the issuer, real credentials.

``entra_namespace`` starts ``bridge emulator`` with the token issuer (``--identities``) and, by default, local
auth disabled. Clients are built as an application on Azure builds them: ``ServiceBusClient(<host name>,
credential)`` over AMQPS, with ``custom_endpoint_address`` naming the namespace's port and
``connection_verify`` its certificate (the SDK verifies AMQPS against certifi's bundle unless told).
Credentials are the real azure-identity classes pointed at the issuer.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from azure.core.credentials import TokenCredential
from azure.identity import ClientSecretCredential, ManagedIdentityCredential
from azure.servicebus import ServiceBusClient, TransportType
from azure.servicebus.management import ServiceBusAdministrationClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from bridge.embedded.namespaces import LocalNamespace

SCOPE = "https://servicebus.azure.net/.default"
SECRETS = {"sender": "sender-secret", "listener": "listener-secret", "owner": "owner-secret"}


def client_id(name: str) -> str:
    """The client id the issuer derives for an identity that declares none."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"bridge-local-identity:{name}"))


def write_client_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed RSA client certificate: (public cert PEM, cert + private key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bridge-test-client")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .sign(key, hashes.SHA256())
    )
    public = folder / "client-cert.pem"
    public.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    both = folder / "client.pem"
    both.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    return public, both


def write_identities(folder: Path, lifetime: int = 3600) -> Path:
    """Identities: ``owner`` (system-assigned Data Owner), ``sender``, ``listener``, ``certified`` (owner)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_client_certificate(folder)
    path = folder / "identities.toml"
    path.write_text(
        f"lifetime_seconds = {lifetime}\n"
        f'[identities.owner]\nroles = ["owner"]\nsystem_assigned = true\nsecret = "{SECRETS["owner"]}"\n'
        f'[identities.sender]\nroles = ["sender"]\nsecret = "{SECRETS["sender"]}"\n'
        f'[identities.listener]\nroles = ["receiver"]\nsecret = "{SECRETS["listener"]}"\n'
        '[identities.certified]\nroles = ["owner"]\ncertificate = "client-cert.pem"\n'
    )
    return path


def entra_namespace(
    folder: Path,
    name: str = "primary",
    *,
    lifetime: int = 3600,
    local_auth: bool = False,
    log_level: str = "WARNING",
) -> LocalNamespace:
    """A started namespace running the issuer (stop it with ``close``)."""
    identities = write_identities(folder / "identities", lifetime)
    args = ("--identities", str(identities), "--identity-dir", str(folder / "issuer"))
    if not local_auth:
        args += ("--disable-local-auth",)
    return LocalNamespace(
        name, data_dir=folder / name, auto_create=True, extra_args=args, log_level=log_level
    ).start()


@contextmanager
def managed_identity_env(ns: LocalNamespace) -> Iterator[None]:
    """IDENTITY_ENDPOINT/IDENTITY_HEADER of the namespace's issuer, for ``ManagedIdentityCredential``."""
    endpoints = ns.endpoints
    assert endpoints is not None and endpoints.identity_endpoint and endpoints.identity_header
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IDENTITY_ENDPOINT", endpoints.identity_endpoint)
        patch.setenv("IDENTITY_HEADER", endpoints.identity_header)
        yield


def port_of(ns: LocalNamespace) -> int:
    """The namespace's AMQP(S)/HTTPS port."""
    return ns.port


def entra_client(ns: LocalNamespace, credential: TokenCredential, **options: object) -> ServiceBusClient:
    """A client built from a host name and a credential, over AMQPS to the namespace's port."""
    options.setdefault("retry_total", 0)
    options.setdefault("transport_type", TransportType.Amqp)
    return ServiceBusClient(
        "localhost",
        credential,
        custom_endpoint_address=f"sb://localhost:{ns.port}",
        connection_verify=ns.certificate,
        **options,  # type: ignore[arg-type]
    )


def entra_admin(ns: LocalNamespace, credential: TokenCredential) -> ServiceBusAdministrationClient:
    """The administration client with a credential, trusting the namespace's certificate."""
    return ServiceBusAdministrationClient(
        f"localhost:{ns.port}", credential, connection_verify=ns.certificate, retry_total=0
    )


def secret_credential(ns: LocalNamespace, identity: str) -> ClientSecretCredential:
    """``ClientSecretCredential`` for ``identity`` with the issuer as authority."""
    endpoints = ns.endpoints
    assert endpoints is not None and endpoints.authority and endpoints.tenant_id
    return ClientSecretCredential(
        endpoints.tenant_id,
        client_id(identity),
        SECRETS[identity],
        authority=endpoints.authority,
        disable_instance_discovery=True,
        connection_verify=ns.certificate,
    )


def system_managed_identity() -> ManagedIdentityCredential:
    """The system-assigned managed identity (reads IDENTITY_ENDPOINT/IDENTITY_HEADER when asked)."""
    assert os.environ.get("IDENTITY_ENDPOINT")
    return ManagedIdentityCredential()
