"""AMQP over WebSockets on the local Service Bus, and the bridge reaching it through a real HTTP proxy.

The namespace serves ``GET /$servicebus/websocket`` (subprotocol ``AMQPWSB10``) inside TLS on its port; the
SDK's WebSocket transport is ``websocket-client``. The proxy is Debian's ``tinyproxy`` with Basic auth: the
bridge's ``proxy`` setting carries the password, which must appear in no log line and no error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, TransportType

from bridge.embedded.namespaces import LocalNamespace
from bridge.errors import NamespaceError
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.receiving import EntityLink
from bridge.settings import RetrySettings, Settings
from tests.integration.entra_support import (
    entra_client,
    entra_namespace,
    managed_identity_env,
    system_managed_identity,
)
from tests.integration.proxy_support import Tinyproxy
from tests.integration.sdk_conformance import receive

pytestmark = pytest.mark.timeout(120)
PROXY_PASSWORD = "proxy-pass-0d9f"


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNamespace]:
    namespace = entra_namespace(tmp_path_factory.mktemp("entra-ws"))
    try:
        yield namespace
    finally:
        namespace.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tinyproxy]:
    server = Tinyproxy(tmp_path_factory.mktemp("tinyproxy"), "bridge", PROXY_PASSWORD).start()
    try:
        yield server
    finally:
        server.stop()


def test_sdk_sends_and_receives_over_websockets(ns: LocalNamespace) -> None:
    with managed_identity_env(ns):
        client = entra_client(ns, system_managed_identity(), transport_type=TransportType.AmqpOverWebsocket)
        with client:
            with client.get_queue_sender("ws-direct") as sender:
                sender.send_messages([ServiceBusMessage("a" * 200_000), ServiceBusMessage("small")])
            with client.get_queue_receiver("ws-direct") as receiver:
                got = receive(receiver, 2)
                for message in got:
                    receiver.complete_message(message)
    assert [len(str(m)) for m in got] == [200_000, 5]


def proxied(ns: LocalNamespace, proxy_url: str) -> Settings:
    namespace: dict[str, Any] = {
        "fully_qualified_namespace": "localhost",
        "credential": "managed_identity",
        "custom_endpoint_address": f"sb://localhost:{ns.port}",
        "management_endpoint": f"https://localhost:{ns.port}",
        "certificate": ns.certificate,
        "transport": "amqp_websocket",
        "proxy": proxy_url,
        "name": "primary",
    }
    return Settings(primary=namespace, retry={"attempt_deadline": 15.0})


def test_bridge_sends_and_receives_through_an_http_connect_proxy(
    ns: LocalNamespace, proxy: Tinyproxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = proxied(ns, proxy.url)
    assert config.primary is not None
    with managed_identity_env(ns):
        pool = NamespacePool(config)
        try:
            result = pool.send("primary", "ws-proxied", [ServiceBusMessage("through the proxy")])
        finally:
            pool.close()
        link = EntityLink("primary", config.primary, RetrySettings(), entity="ws-proxied")
        try:
            (delivery,) = link.receive(1, 10.0)
            link.complete(delivery)
        finally:
            link.close()
    assert result.failed == {} and delivery.message.body == b"through the proxy"
    assert f"localhost:{ns.port}" in proxy.connects()  # the tunnel went through the proxy
    assert PROXY_PASSWORD not in caplog.text


def test_wrong_proxy_password_fails_without_showing_it(
    ns: LocalNamespace, proxy: Tinyproxy, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-proxy-secret-77"
    with managed_identity_env(ns):
        pool = NamespacePool(proxied(ns, f"http://bridge:{wrong}@127.0.0.1:{proxy.port}"))
        try:
            failed = pool.send("primary", "ws-refused", [ServiceBusMessage("x")]).failed
        finally:
            pool.close()
    assert isinstance(failed[0], NamespaceError)
    assert wrong not in str(failed[0]) and wrong not in caplog.text
