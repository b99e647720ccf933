"""The bridge signing in with Microsoft Entra ID: both namespaces with local auth disabled, one issuer.

Every client the bridge builds goes through ``bridge/servicebus/credentials.py``: the pool's senders,
``EntityLink`` receivers and the administration client of ``bridge provision``, with the real
azure-identity credentials pointed at the local issuer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import (
    NamespaceConfigurationError,
    NamespaceOutageError,
    NamespaceRoleMissingError,
    TransientNamespaceError,
)
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.provisioning import provision
from bridge.servicebus.receiving import EntityLink
from bridge.settings import RetrySettings, Settings
from tests.integration.entra_support import SECRETS, client_id, entra_namespace, managed_identity_env

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalNamespace, LocalNamespace, Path]]:
    """A primary running the issuer and a secondary trusting it; both refuse SAS."""
    folder = tmp_path_factory.mktemp("entra-pair")
    primary = entra_namespace(folder, "primary")
    secondary = LocalNamespace(
        "secondary",
        data_dir=folder / "secondary",
        auto_create=True,
        extra_args=("--identity-dir", str(folder / "issuer"), "--disable-local-auth"),
    ).start()
    bundle = folder / "ca-bundle.pem"  # each namespace has its own self-signed certificate
    bundle.write_text(Path(primary.certificate).read_text() + Path(secondary.certificate).read_text())
    try:
        yield primary, secondary, bundle
    finally:
        secondary.close()
        primary.close()


def namespace(local: LocalNamespace, bundle: Path, issuer: LocalNamespace, **sign_in: Any) -> dict[str, Any]:
    """Settings for one local namespace signed in with ``sign_in`` (credential kind and its fields)."""
    endpoints = issuer.endpoints
    assert endpoints is not None
    return {
        "fully_qualified_namespace": "localhost",
        "custom_endpoint_address": f"sb://localhost:{local.port}",
        "management_endpoint": f"https://localhost:{local.port}",
        "certificate": str(bundle),
        "name": local.name,
        "authority": endpoints.authority,
        "tenant_id": endpoints.tenant_id,
        **sign_in,
    }


def settings(pair: tuple[LocalNamespace, LocalNamespace, Path], **sign_in: Any) -> Settings:
    primary, secondary, bundle = pair
    return Settings(
        primary=namespace(primary, bundle, primary, **sign_in),
        secondary=namespace(secondary, bundle, primary, **sign_in),
        paired={"backlog_queue_count": 2},
        retry={"attempt_deadline": 10.0},
    )


def as_identity(name: str) -> dict[str, Any]:
    return {"credential": "client_secret", "client_id": client_id(name), "client_secret": SECRETS[name]}


def test_provision_and_send_with_a_managed_identity(
    pair: tuple[LocalNamespace, LocalNamespace, Path],
) -> None:
    # Given both namespaces on Entra ID only, and the bridge's managed identity (Data Owner)
    config = settings(pair, credential="managed_identity")
    with managed_identity_env(pair[0]):
        # When the backlog queues are provisioned and a message is sent to each namespace
        report = provision(config)
        pool = NamespacePool(config)
        try:
            results = [
                pool.send(role, "entra-orders", [ServiceBusMessage("x")]) for role in ("primary", "secondary")
            ]
        finally:
            pool.close()
    # Then both worked without a SAS key anywhere
    assert report.rows and all(row.action in ("created", "exists") for row in report.rows)
    assert [r.failed for r in results] == [{}, {}]


def test_provision_refused_for_a_sender_identity_names_the_role(
    pair: tuple[LocalNamespace, LocalNamespace, Path],
) -> None:
    with pytest.raises(NamespaceRoleMissingError) as refused:
        provision(settings(pair, **as_identity("sender")))
    assert refused.value.right == "Manage"
    assert "'Azure Service Bus Data Owner'" in str(refused.value)
    assert SECRETS["sender"] not in str(refused.value)


def test_receiver_with_a_listen_only_identity(pair: tuple[LocalNamespace, LocalNamespace, Path]) -> None:
    primary = pair[0]
    config = settings(pair, **as_identity("sender"))
    pool = NamespacePool(config)
    try:
        assert pool.send("primary", "entra-listen", [ServiceBusMessage("for a receiver")]).failed == {}
    finally:
        pool.close()
    # A Data Receiver receives and settles; the same identity cannot send (the error names the role)
    listener = settings(pair, **as_identity("listener"))
    assert listener.primary is not None
    link = EntityLink("primary", listener.primary, RetrySettings(), entity="entra-listen")
    try:
        (delivery,) = link.receive(1, 10.0)
        assert delivery.message.body == b"for a receiver"
        link.complete(delivery)
    finally:
        link.close()
    pool = NamespacePool(listener)
    try:
        failed = pool.send("primary", "entra-listen", [ServiceBusMessage("refused")]).failed
    finally:
        pool.close()
    assert isinstance(failed[0], NamespaceRoleMissingError) and failed[0].right == "Send"
    assert primary.name == "primary"


def test_a_token_that_cannot_be_obtained_is_a_configuration_error(
    pair: tuple[LocalNamespace, LocalNamespace, Path],
) -> None:
    config = settings(pair, **{**as_identity("sender"), "client_secret": "wrong-secret-value"})
    pool = NamespacePool(config)
    try:
        failed = pool.send("primary", "entra-wrong", [ServiceBusMessage("x")]).failed
    finally:
        pool.close()
    assert isinstance(failed[0], NamespaceConfigurationError)
    assert "wrong-secret-value" not in str(failed[0])


def test_check_config_masks_secrets_and_proxy_password(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        BRIDGE_PRIMARY__FULLY_QUALIFIED_NAMESPACE="ns1.servicebus.windows.net",
        BRIDGE_PRIMARY__CREDENTIAL="client_secret",
        BRIDGE_PRIMARY__TENANT_ID="t",
        BRIDGE_PRIMARY__CLIENT_ID="c",
        BRIDGE_PRIMARY__CLIENT_SECRET="very-secret-client-value",
        BRIDGE_PRIMARY__PROXY="http://user:proxy-password-value@proxy:3128",
    )
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli.main", "check-config"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    shown = json.loads(out.stdout)["primary"]
    assert shown["credential"] == "client_secret" and shown["client_secret"] == "**********"
    assert "very-secret-client-value" not in out.stdout + out.stderr
    assert "proxy-password-value" not in out.stdout + out.stderr


def test_a_sender_idle_past_its_token_lifetime_is_not_an_outage(tmp_path: Path) -> None:
    # Given 12 s tokens and a pool without SDK retries: the SDK renews a token only on a link that works
    ns = entra_namespace(tmp_path, "idle", lifetime=12)
    try:
        with managed_identity_env(ns):
            config = Settings(
                primary=namespace(ns, Path(ns.certificate), ns, credential="managed_identity"),
                retry={"attempt_deadline": 10.0, "retry_total": 0},
            )
            pool = NamespacePool(config)
            try:
                assert pool.send("primary", "idle", [ServiceBusMessage("before")]).failed == {}
                # When the sender sits idle past its token's lifetime
                time.sleep(14)
                outcomes = [
                    pool.send("primary", "idle", [ServiceBusMessage(f"after{i}")]).failed for i in range(3)
                ]
            finally:
                pool.close()
    finally:
        ns.close()
    # Then a failed attempt is transient (retried on the same namespace, no failover), and a later one works
    failures = [f[0] for f in outcomes if f]
    assert all(
        isinstance(f, TransientNamespaceError) and not isinstance(f, NamespaceOutageError) for f in failures
    )
    assert outcomes[-1] == {}
