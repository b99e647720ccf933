"""How the bridge signs in to a namespace and reaches it: every Service Bus client is built here.

Settings (``NamespaceSettings``)::

    connection_string = "Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=..."     # SAS, or:
    fully_qualified_namespace = "ns1.servicebus.windows.net"
    credential = "managed_identity"   # default | managed_identity | workload_identity | client_secret |
                                      # certificate | azure_cli
    client_id = "..."                 # user-assigned identity / app registration (else AZURE_CLIENT_ID)
    tenant_id = "..."                 # client_secret, certificate, workload_identity (else AZURE_TENANT_ID)
    client_secret = "..."             # client_secret (a secret)
    client_certificate = "/path/app.pem"   # certificate: PEM with the private key and the certificate
    token_file = "/var/run/secrets/azure/tokens/azure-identity-token"   # workload_identity
    authority = "https://login.microsoftonline.com"   # optional; any other host: no instance discovery
    transport = "amqp"                # amqp (TLS, 5671) | amqp_websocket (WSS, 443)
    proxy = "http://user:pass@host:3128"   # optional HTTP CONNECT proxy (a secret; implies WebSockets)
    custom_endpoint_address = "sb://10.0.0.4:5671"   # optional: dial here (private endpoint)
    certificate = "/path/ca.pem"      # optional: CA file for AMQPS and the management endpoint

One credential object per namespace and process (``credential_for``), so its token cache is shared by the
senders, receivers and administration client of that namespace. Building a credential or a client does no
I/O: a token is fetched when a link opens, and a failure there surfaces as the SDK's authentication error,
which ``translate`` makes a configuration error (the namespace counts as unavailable, alerted loudly).
Secrets (client secret, proxy password) are handed to azure-identity and the SDK only, never logged.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from urllib.parse import unquote, urlsplit

from azure.core.credentials import TokenCredential
from azure.identity import (
    AzureCliCredential,
    CertificateCredential,
    ClientSecretCredential,
    DefaultAzureCredential,
    ManagedIdentityCredential,
    WorkloadIdentityCredential,
)
from azure.servicebus import ServiceBusClient, TransportType
from azure.servicebus.management import ServiceBusAdministrationClient

from bridge.errors import NamespaceConfigurationError
from bridge.settings import NamespaceSettings

AZURE_CLI_TIMEOUT = 60
"""Seconds ``az account get-access-token`` may take. azure-identity's default is 10 s, and the CLI (a Python
program importing hundreds of modules) took 12.5 s and more on a loaded 2-CPU host, which made the
credential fail as "Failed to invoke the Azure CLI"; a token is fetched about once an hour, so waiting
longer for it costs little."""

_credentials: dict[NamespaceSettings, TokenCredential] = {}
_lock = threading.Lock()


def credential_for(namespace: NamespaceSettings) -> TokenCredential:
    """The process's credential for ``namespace`` (built once; the settings must name a credential)."""
    with _lock:
        credential = _credentials.get(namespace)
        if credential is None:
            credential = _build_credential(namespace)
            _credentials[namespace] = credential
        return credential


def _identity_options(namespace: NamespaceSettings) -> dict[str, Any]:
    """Options every azure-identity credential that talks to an authority takes."""
    options: dict[str, Any] = {}
    if namespace.authority:
        options["authority"] = namespace.authority
        # A private authority is not known to login.microsoftonline.com's instance discovery.
        options["disable_instance_discovery"] = "login.microsoftonline.com" not in namespace.authority
    if namespace.certificate is not None:
        options["connection_verify"] = str(namespace.certificate)
    return options


def _build_credential(namespace: NamespaceSettings) -> TokenCredential:
    kind = namespace.credential_kind
    options = _identity_options(namespace)
    if kind == "managed_identity":
        return ManagedIdentityCredential(client_id=namespace.client_id)
    if kind == "workload_identity":
        workload: dict[str, Any] = dict(options)
        for field, name in (
            ("client_id", "client_id"),
            ("tenant_id", "tenant_id"),
            ("token_file", "token_file_path"),
        ):
            value = getattr(namespace, field)
            if value is not None:
                workload[name] = str(value)
        return WorkloadIdentityCredential(**workload)
    if kind == "client_secret":
        assert namespace.tenant_id and namespace.client_id and namespace.client_secret
        return ClientSecretCredential(
            namespace.tenant_id, namespace.client_id, namespace.client_secret.get_secret_value(), **options
        )
    if kind == "certificate":
        assert namespace.tenant_id and namespace.client_id and namespace.client_certificate
        return CertificateCredential(
            namespace.tenant_id, namespace.client_id, str(namespace.client_certificate), **options
        )
    if kind == "azure_cli":
        return AzureCliCredential(tenant_id=namespace.tenant_id or "", process_timeout=AZURE_CLI_TIMEOUT)
    default: dict[str, Any] = dict(options)
    if namespace.client_id:
        default["managed_identity_client_id"] = namespace.client_id
        default["workload_identity_client_id"] = namespace.client_id
    return DefaultAzureCredential(**default)


def transport_options(namespace: NamespaceSettings) -> dict[str, Any]:
    """``transport_type``, ``http_proxy``, ``custom_endpoint_address`` and ``connection_verify`` for the SDK.

    The transport is always passed: with ``custom_endpoint_address`` alone the SDK would switch to
    WebSockets (``docs/servicebus-sdk.md``).
    """
    websocket = namespace.transport == "amqp_websocket" or namespace.proxy is not None
    options: dict[str, Any] = {
        "transport_type": TransportType.AmqpOverWebsocket if websocket else TransportType.Amqp
    }
    if namespace.proxy is not None:
        options["http_proxy"] = http_proxy(namespace.proxy.get_secret_value())
    if namespace.custom_endpoint_address:
        options["custom_endpoint_address"] = namespace.custom_endpoint_address
    if namespace.certificate is not None:
        options["connection_verify"] = str(namespace.certificate)
    return options


def http_proxy(url: str) -> dict[str, Any]:
    """``http://user:pass@host:port`` as the SDK's ``http_proxy`` mapping."""
    parts = urlsplit(url)
    proxy: dict[str, Any] = {"proxy_hostname": parts.hostname, "proxy_port": parts.port}
    if parts.username is not None:
        proxy["username"] = unquote(parts.username)
        proxy["password"] = unquote(parts.password or "")
    return proxy


def service_bus_client(namespace: NamespaceSettings, **options: Any) -> ServiceBusClient:
    """A ``ServiceBusClient`` for ``namespace`` (SAS or Entra ID), no I/O; ``options`` go to the SDK."""
    options = {**transport_options(namespace), **options}
    if namespace.connection_string is not None:
        return ServiceBusClient.from_connection_string(
            namespace.connection_string.get_secret_value(), **options
        )
    assert namespace.fully_qualified_namespace is not None
    return ServiceBusClient(namespace.fully_qualified_namespace, credential_for(namespace), **options)


def admin_client(
    namespace: NamespaceSettings, management_host: str | None, **options: Any
) -> ServiceBusAdministrationClient:
    """The administration client over HTTPS to ``management_host`` (``host[:port]``) or the namespace."""
    if namespace.proxy is not None:
        options["proxies"] = {"https": namespace.proxy.get_secret_value()}
    if namespace.connection_string is None:
        host = management_host or namespace.endpoint_host
        return ServiceBusAdministrationClient(host, credential_for(namespace), **options)
    return ServiceBusAdministrationClient.from_connection_string(
        management_connection_string(namespace), **options
    )


_ENDPOINT = re.compile(r"(?i)(endpoint\s*=\s*)[^;]*")


def management_host(namespace: NamespaceSettings) -> str | None:
    """``host[:port]`` of ``management_endpoint``, when set."""
    if not namespace.management_endpoint:
        return None
    host = namespace.management_endpoint.split("://", 1)[-1].rstrip("/")
    if not host:
        raise NamespaceConfigurationError("management_endpoint has no host")
    return host


def management_connection_string(namespace: NamespaceSettings) -> str:
    """The connection string for the administration client (Endpoint replaced by ``management_endpoint``)."""
    if namespace.connection_string is None:
        raise NamespaceConfigurationError("the namespace signs in with Entra ID: it has no connection string")
    secret = namespace.connection_string.get_secret_value()
    host = management_host(namespace)
    if host is None:
        return secret
    return _ENDPOINT.sub(lambda match: f"{match.group(1)}sb://{host}/", secret, count=1)
