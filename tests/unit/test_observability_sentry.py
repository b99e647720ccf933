"""Sentry: events and breadcrumbs reach the transport with every secret scrubbed, transitions tagged.

sentry-sdk runs for real with its ``transport=`` option set to a transport that keeps the envelopes, so
what is checked is exactly what would be sent to Sentry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.asgi import SentryAsgiMiddleware
from sentry_sdk.transport import Transport
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.observability import transitions
from bridge.observability.sentry import FILTERED, init_sentry, known_secrets
from bridge.settings import Settings

NAMESPACE_KEY = "c2VjcmV0LW5hbWVzcGFjZS1rZXktdmFsdWU="
OTHER_KEY = "b3RoZXItbmFtZXNwYWNlLWtleQ=="
REDIS_PASSWORD = "redis-pass-9f8e7d6c"
INGRESS_SAS_KEY = "ingress-sas-key-0a1b2c3d4e"
API_KEY = "client-api-key-5566778899"
CONNECTION = (
    f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={NAMESPACE_KEY}"
)


class CapturingTransport(Transport):
    """Keeps every envelope instead of sending it."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def payloads(self) -> list[dict[str, Any]]:
        out = []
        for envelope in self.envelopes:
            for item in envelope.items:
                raw = item.payload.get_bytes()
                if item.data_category in ("error", "default", "transaction"):
                    out.append(json.loads(raw))
        return out

    def text(self) -> str:
        return "\n".join(e.serialize().decode("utf-8", "replace") for e in self.envelopes)


def settings() -> Settings:
    return Settings(
        redis_url=f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0",
        primary={"connection_string": CONNECTION},
        secondary={"connection_string": CONNECTION.replace(NAMESPACE_KEY, OTHER_KEY)},
        ingress={
            "sas_key_name": "send",
            "sas_key": INGRESS_SAS_KEY,
            "api_keys": [{"name": "app", "sha256": hashlib.sha256(API_KEY.encode()).hexdigest()}],
        },
        sentry_dsn="http://publickey@127.0.0.1:9/1",
    )


@pytest.fixture
def transport() -> Iterator[CapturingTransport]:
    capture = CapturingTransport()
    assert init_sentry(settings(), component="test", transport=capture)
    try:
        yield capture
    finally:
        _no_client()


def _no_client() -> None:
    """Close the current Sentry client and leave none (``init(dsn=None)`` would leave an active client that
    sends nothing, and a later test of this worker process would see it)."""
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


def test_without_a_dsn_nothing_starts() -> None:
    # Given no Sentry client (another test in this worker process may have left one active)
    _no_client()
    # When the bridge sets up Sentry without a DSN, then nothing starts
    assert init_sentry(Settings(), component="test") is False
    assert not sentry_sdk.get_client().is_active()


def test_known_secrets_are_every_secret_value_of_the_settings() -> None:
    found = known_secrets(settings())
    for secret in (NAMESPACE_KEY, OTHER_KEY, REDIS_PASSWORD, INGRESS_SAS_KEY, CONNECTION):
        assert secret in found


def _fail_with_secrets_in_locals() -> None:
    connection_string = CONNECTION  # noqa: F841  (a frame variable Sentry would report)
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:6390/0"
    note = {"api_key": API_KEY, "harmless": f"key {INGRESS_SAS_KEY} inside a text"}
    raise ConnectionError(f"cannot reach {url} with {CONNECTION} ({note['harmless']})")


def test_exceptions_logs_and_breadcrumbs_are_scrubbed(transport: CapturingTransport) -> None:
    try:
        _fail_with_secrets_in_locals()
    except ConnectionError:
        sentry_sdk.capture_exception()
    logging.getLogger("bridge.test").error("redis at %s refused; key %s", settings().redis_url, NAMESPACE_KEY)
    sentry_sdk.add_breadcrumb(message=f"SharedAccessSignature sr=x&sig=abc123secret&se=1&skn=send {API_KEY}")
    sentry_sdk.capture_message("after the breadcrumb")
    sentry_sdk.flush()
    events = transport.payloads()
    assert len(events) == 3
    text = transport.text()
    for secret in (NAMESPACE_KEY, OTHER_KEY, REDIS_PASSWORD, INGRESS_SAS_KEY, API_KEY, "abc123secret"):
        assert secret not in text, secret
    # The events are still useful: the message and the variables are there, with the secrets replaced.
    assert FILTERED in text
    exception = events[0]["exception"]["values"][-1]
    assert exception["type"] == "ConnectionError"
    assert "cannot reach" in exception["value"]


def test_transitions_are_events_tagged_with_entity_and_namespace(transport: CapturingTransport) -> None:
    transitions.role_swapped("orders", "secondary", f"outage on primary: SharedAccessKey={NAMESPACE_KEY}")
    transitions.failover_engaged("payments", "no successful send for 60s")
    transitions.availability_changed("orders", "primary", False, "refused")
    sentry_sdk.capture_message("later")
    sentry_sdk.flush()
    events = {e.get("message") or e.get("logentry", {}).get("message"): e for e in transport.payloads()}
    swap = next(e for m, e in events.items() if m and m.startswith("bridge swap: orders"))
    assert swap["tags"]["entity"] == "orders"
    assert swap["tags"]["namespace"] == "secondary"
    assert swap["tags"]["transition"] == "swap"
    assert swap["level"] == "warning"
    paired = next(e for m, e in events.items() if m and m.startswith("bridge failover: payments"))
    assert paired["tags"]["namespace"] == "secondary"
    # An availability change is a breadcrumb only, carried by the next event.
    later = events["later"]
    crumbs = [c for c in later["breadcrumbs"]["values"] if c.get("category") == "bridge.transition"]
    assert any(c["data"]["transition"] == "unavailable" and c["data"]["entity"] == "orders" for c in crumbs)
    assert NAMESPACE_KEY not in transport.text()


def test_asgi_requests_keep_no_credential_headers(transport: CapturingTransport) -> None:
    async def boom(request: Request) -> Response:
        secret = request.headers["x-api-key"]  # noqa: F841  (a frame variable)
        raise RuntimeError("handler failed")

    app = SentryAsgiMiddleware(Starlette(routes=[Route("/boom", boom)]))

    async def call() -> httpx.Response:
        asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=asgi, base_url="http://ingress") as client:
            return await client.get(
                "/boom",
                headers={"x-api-key": API_KEY, "authorization": f"Bearer {API_KEY}", "x-test": "visible"},
            )

    assert asyncio.run(call()).status_code == 500
    sentry_sdk.flush()
    events = transport.payloads()
    assert events and events[0]["request"]["url"].endswith("/boom")
    assert API_KEY not in transport.text()
