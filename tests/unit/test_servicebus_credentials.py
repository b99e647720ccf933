"""Entra ID settings, the SDK options built from them, and the errors that name a missing role."""

from __future__ import annotations

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import (
    AzureCliCredential,
    ClientSecretCredential,
    DefaultAzureCredential,
    ManagedIdentityCredential,
)
from azure.servicebus import TransportType
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusConnectionError,
    ServiceBusError,
)
from pydantic import ValidationError

from bridge.errors import (
    ConfigurationError,
    NamespaceConfigurationError,
    NamespaceRoleMissingError,
    TransientNamespaceError,
)
from bridge.servicebus.credentials import AZURE_CLI_TIMEOUT, credential_for, http_proxy, transport_options
from bridge.servicebus.translate import translate
from bridge.settings import NamespaceSettings, load_settings

FQNS = "ns1.servicebus.windows.net"


def test_namespace_name_and_credential_kind_come_from_the_fully_qualified_namespace() -> None:
    ns = NamespaceSettings(fully_qualified_namespace=FQNS)
    assert (ns.endpoint_host, ns.namespace_name, ns.credential_kind) == (FQNS, "ns1", "default")
    assert (
        NamespaceSettings(
            connection_string="Endpoint=sb://h/;SharedAccessKeyName=k;SharedAccessKey=v"
        ).credential_kind
        is None
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "set either connection_string or fully_qualified_namespace"),
        (
            {
                "fully_qualified_namespace": FQNS,
                "connection_string": "Endpoint=sb://h/;SharedAccessSignature=x",
            },
            "set either",
        ),
        (
            {"fully_qualified_namespace": FQNS, "credential": "client_secret", "tenant_id": "t"},
            "needs client_id, client_secret",
        ),
        (
            {"fully_qualified_namespace": FQNS, "credential": "certificate"},
            "needs tenant_id, client_id, client_certificate",
        ),
        ({"fully_qualified_namespace": FQNS, "credential": "password"}, "Input should be"),
        ({"fully_qualified_namespace": FQNS, "proxy": "socks5://user:pw@h:1"}, "proxy must be http://"),
        (
            {"connection_string": "Endpoint=sb://h/;SharedAccessSignature=x", "credential": "default"},
            "credential applies",
        ),
    ],
)
def test_bad_entra_settings_are_refused(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        NamespaceSettings(**fields)  # type: ignore[arg-type]


def test_a_bad_proxy_setting_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PRIMARY__FULLY_QUALIFIED_NAMESPACE", FQNS)
    monkeypatch.setenv("BRIDGE_PRIMARY__PROXY", "socks5://user:hidden-pw@h:1")
    with pytest.raises(ConfigurationError, match=r"primary\.proxy") as refused:
        load_settings()
    assert "hidden-pw" not in str(refused.value)


def test_transport_options() -> None:
    plain = transport_options(NamespaceSettings(fully_qualified_namespace=FQNS))
    assert plain == {"transport_type": TransportType.Amqp}
    proxied = transport_options(
        NamespaceSettings(
            fully_qualified_namespace=FQNS,
            proxy="http://me:p%40ss@proxy:3128",
            custom_endpoint_address="sb://10.0.0.4:443",
        )
    )
    assert proxied["transport_type"] is TransportType.AmqpOverWebsocket  # a proxy means WebSockets
    assert proxied["http_proxy"] == {
        "proxy_hostname": "proxy",
        "proxy_port": 3128,
        "username": "me",
        "password": "p@ss",
    }
    assert proxied["custom_endpoint_address"] == "sb://10.0.0.4:443"
    assert http_proxy("http://proxy:8080") == {"proxy_hostname": "proxy", "proxy_port": 8080}


def test_credential_kinds_build_the_azure_identity_classes_once_per_namespace() -> None:
    managed = NamespaceSettings(fully_qualified_namespace=FQNS, credential="managed_identity", client_id="c")
    assert isinstance(credential_for(managed), ManagedIdentityCredential)
    assert credential_for(managed) is credential_for(managed)
    secret = NamespaceSettings(
        fully_qualified_namespace=FQNS,
        credential="client_secret",
        tenant_id="t",
        client_id="c",
        client_secret="s",
    )
    assert isinstance(credential_for(secret), ClientSecretCredential)
    assert isinstance(
        credential_for(NamespaceSettings(fully_qualified_namespace="ns2.x")), DefaultAzureCredential
    )


def test_the_azure_cli_credential_waits_for_a_slow_cli() -> None:
    """The short variant of ``integration/test_entra_azure_cli.py`` (``-m slow``, the real az CLI)."""
    cli = credential_for(
        NamespaceSettings(fully_qualified_namespace=FQNS, credential="azure_cli", tenant_id="t")
    )
    assert isinstance(cli, AzureCliCredential)
    assert (cli.tenant_id, cli._process_timeout) == ("t", AZURE_CLI_TIMEOUT)  # azure-identity's default: 10
    assert AZURE_CLI_TIMEOUT >= 60


def test_a_missing_right_is_one_error_naming_the_role() -> None:
    refused = ServiceBusAuthenticationError(
        message="Unauthorized access. 'Listen' claim(s) are required to perform this operation. Resource: 'sb://h/q'."
    )
    error = translate(refused, "primary", "receive from q")
    assert isinstance(error, NamespaceRoleMissingError) and error.right == "Listen"
    assert str(error) == (
        "primary receive from q: the identity lacks the 'Listen' right: assign it the "
        "'Azure Service Bus Data Receiver' role (or Data Owner)"
    )


def test_a_token_that_cannot_be_obtained_is_a_configuration_error() -> None:
    wrapped = ServiceBusError(
        message="Handler failed: bad secret eyJhbGciOi.eyJzdWIi.c2ln",
        error=ClientAuthenticationError("no token"),
    )
    error = translate(wrapped, "secondary")
    assert isinstance(error, NamespaceConfigurationError)
    assert "eyJ" not in str(error)  # a token in an SDK message is scrubbed


def test_a_token_that_ran_out_on_an_idle_link_is_transient_not_an_outage() -> None:
    expired = ServiceBusConnectionError(
        message="CBS Authentication Expired. Error condition: amqp:internal-error."
    )
    error = translate(expired, "primary", "send to orders")
    assert type(error) is TransientNamespaceError


@pytest.mark.parametrize(("transport", "expected"), [("amqp", 0.02), ("amqp_websocket", 1)])
def test_a_senders_socket_reads_are_short_on_plain_amqp_only(transport: str, expected: float) -> None:
    # The SDK's keep-alive holds the connection's socket lock for one read every 30 s: a send waited
    # behind it for the SDK's 0.2 s read (a 200 ms stall every 30 s in bench.latency). The bridge's
    # senders read for retry.sender_socket_timeout; WebSockets keep the SDK's own 1 s.
    from bridge.servicebus.clients import RoleClient
    from bridge.settings import RetrySettings

    ns = NamespaceSettings(
        connection_string="Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=v",
        transport=transport,
    )
    retry = RetrySettings()
    assert retry.sender_socket_timeout == 0.02
    role = RoleClient.open("primary", 0, ns, retry, 10.0)
    try:
        sender = role.new_sender("orders")
        assert sender._config.socket_timeout == expected  # what the SDK hands its AMQP transport
    finally:
        role.client.close()
