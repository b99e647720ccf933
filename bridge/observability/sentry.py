"""Sentry for every bridge process: errors, and failovers as events, with every secret scrubbed.

``init_sentry(settings, component=...)`` does nothing unless ``sentry_dsn`` (``BRIDGE_SENTRY_DSN``) is set.
Then it starts ``sentry-sdk`` with the Celery integration (task failures of ``bridge worker``), the
Starlette/ASGI integration (``bridge serve`` wraps its app in ``SentryAsgiMiddleware``), and logging:
ERROR lines become events, WARNING lines (every state transition) breadcrumbs. Auto-enabled integrations
are off: the Redis one would record commands and their keys for every outbox write.

Secrets never leave the process, by three layers:

1. ``EventScrubber`` with sentry's denylist plus the bridge's names (``connection_string``, ``sas_key``,
   ``redis_url``, ``x-api-key``, ...): any such key anywhere in an event (request headers, local
   variables, extra data) is replaced;
2. ``before_send`` / ``before_breadcrumb`` replace every occurrence of a known secret *value* — the
   connection strings and their keys, the Redis and broker passwords, the ingress SAS key — wherever it
   appears (a message, a frame variable, an exception text), and any token whose SHA-256 is a configured
   API key's digest (``Scrubber``);
3. the same hooks apply ``scrub_secrets``, the patterns that also clean errors stored in Redis
   (``SharedAccessKey=...``, SAS tokens, ``sig=``, URL passwords), for secrets the settings do not know
   (an API key a client sent inside a body, another process's key).

``transport`` is sentry-sdk's own option, used by the tests to capture envelopes instead of sending them.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any
from urllib.parse import unquote

import sentry_sdk
from sentry_sdk.scrubber import DEFAULT_DENYLIST, EventScrubber

from bridge.core.outcomes import scrub_secrets
from bridge.settings import Settings, parse_connection_string

FILTERED = "[Filtered]"
MIN_SECRET_LENGTH = 6
MIN_API_KEY_LENGTH = 16
"""Shorter values are not replaced by value (a 3-character password would mangle every message); the
denylist and the patterns still apply."""

BRIDGE_DENYLIST = [
    *DEFAULT_DENYLIST,
    "connection_string",
    "conn_str",
    "sas_key",
    "shared_access_key",
    "sharedaccesskey",
    "sharedaccesssignature",
    "redis_url",
    "celery_broker_url",
    "broker_url",
    "sentry_dsn",
    "dsn",
    "x-api-key",
    "api_key_value",
    "requirepass",
]


def known_secrets(settings: Settings) -> list[str]:
    """Every secret value the settings hold (and parts of them that could appear alone), longest first."""
    found: list[str] = []
    for namespace in (settings.primary, settings.secondary):
        if namespace is None:
            continue
        for secret in (namespace.client_secret, namespace.proxy):
            if secret is not None:
                found += [secret.get_secret_value(), *_url_passwords(secret.get_secret_value())]
        if namespace.connection_string is None:
            continue
        text = namespace.connection_string.get_secret_value()
        found.append(text)
        parts = parse_connection_string(text)
        found += [parts.get("sharedaccesskey", ""), parts.get("sharedaccesssignature", "")]
    for url in (settings.redis_url, settings.celery_broker_url):
        if url is not None:
            found += [url.get_secret_value(), *_url_passwords(url.get_secret_value())]
    if settings.ingress.sas_key is not None:
        found.append(settings.ingress.sas_key.get_secret_value())
    if settings.sentry_dsn is not None:
        found.append(settings.sentry_dsn.get_secret_value())
    for variable in ("BRIDGE_EMULATOR_KEY", "IDENTITY_HEADER", "AZURE_CLIENT_SECRET"):
        value = os.environ.get(variable)
        if value:
            found.append(value)
    unique = {s for s in found if len(s) >= MIN_SECRET_LENGTH}
    return sorted(unique, key=len, reverse=True)


def _url_passwords(url: str) -> list[str]:
    """The password of a ``scheme://[user]:password@host...`` URL (any of the redis_url forms), as written
    and percent-decoded."""
    rest = url.partition("://")[2]
    userinfo, at, _ = rest.partition("/")[0].rpartition("@")
    _, colon, password = userinfo.partition(":")
    if not at or not colon or not password:
        return []
    return [password, unquote(password)]


_TOKEN = re.compile(rf"[A-Za-z0-9_\-+/=.~]{{{MIN_API_KEY_LENGTH},}}")


class Scrubber:
    """Replaces secrets in text and in nested event data (see the module docstring).

    API keys are configured only as SHA-256 digests, so their values are unknown here: any token long
    enough to be a key whose digest is a configured one is replaced too.
    """

    def __init__(self, settings: Settings) -> None:
        self.secrets = tuple(known_secrets(settings))
        self.digests = frozenset(k.sha256 for k in settings.ingress.api_keys)

    def _api_key(self, match: re.Match[str]) -> str:
        token = match.group(0)
        return FILTERED if hashlib.sha256(token.encode()).hexdigest() in self.digests else token

    def text(self, value: str) -> str:
        """``value`` with known secrets, API keys and credential patterns replaced."""
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, FILTERED)
        if self.digests:
            value = _TOKEN.sub(self._api_key, value)
        return scrub_secrets(value)

    def __call__(self, value: Any) -> Any:
        """``value`` (an event or any part of it) scrubbed, strings at any depth."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self(item) for item in value)
        return value


def init_sentry(settings: Settings, *, component: str, transport: Any = None) -> bool:
    """Start Sentry when ``sentry_dsn`` is set; True when it was started."""
    if settings.sentry_dsn is None:
        return False
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.logging import LoggingIntegration
    from sentry_sdk.integrations.starlette import StarletteIntegration

    scrub = Scrubber(settings)

    def before_send(event: Any, hint: Any) -> Any:
        return scrub(event)

    def before_breadcrumb(crumb: Any, hint: Any) -> Any:
        return scrub(crumb)

    options: dict[str, Any] = {}
    if transport is not None:
        options["transport"] = transport
    sentry_sdk.init(
        dsn=settings.sentry_dsn.get_secret_value(),
        environment=settings.sentry_environment,
        traces_sample_rate=settings.sentry_traces_sample_rate,
        auto_enabling_integrations=False,
        integrations=[
            CeleryIntegration(),
            StarletteIntegration(),
            LoggingIntegration(level=20, event_level=40),
        ],
        event_scrubber=EventScrubber(denylist=BRIDGE_DENYLIST, recursive=True),
        before_send=before_send,
        before_breadcrumb=before_breadcrumb,
        **options,
    )
    sentry_sdk.set_tag("component", component)
    return True


def transition_event(kind: str, entity: str, namespace: str | None, reason: str, *, event: bool) -> None:
    """A state transition as a breadcrumb, and as a warning event when ``event`` (failovers, swaps)."""
    client = sentry_sdk.get_client()
    if not client.is_active():
        return
    data = {"entity": entity, "namespace": namespace, "transition": kind, "reason": reason}
    sentry_sdk.add_breadcrumb(
        category="bridge.transition", message=f"{kind} {entity}", level="warning", data=data
    )
    if not event:
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("entity", entity)
        scope.set_tag("transition", kind)
        if namespace is not None:
            scope.set_tag("namespace", namespace)
        scope.set_context("transition", data)
        sentry_sdk.capture_message(f"bridge {kind}: {entity} ({reason})", level="warning")
