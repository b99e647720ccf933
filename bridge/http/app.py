"""The ASGI app of ``bridge serve``: routes, start-up checks, health and readiness.

``create_app(settings, require_auth=...)`` builds a Starlette app; its lifespan connects to Redis (URL forms
in ``bridge.redis.connection``), has the outbox's read side check what the settings demand of it
(``AsyncOutboxView.check_start_up``: ``ingress.require_appendfsync``, ``WAIT`` not on a Cluster) and refuses
to start otherwise. Routes reach Redis only through the outbox (``AsyncOutbox``, ``AsyncOutboxView``).
``require_auth`` is decided by the caller from the bind address (``bridge serve`` requires keys on any
non-loopback address); without keys configured, an app that requires authentication refuses to be built.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bridge.errors import ConfigurationError, StateStoreUnavailableError
from bridge.http import api_docs, operations, rest_door, v1
from bridge.http.ingress import Ingress
from bridge.http.openapi import document
from bridge.http.problems import http_error, server_error
from bridge.observability.history import HistorySampler
from bridge.observability.snapshot import StateReader
from bridge.outbox.store import AsyncOutbox
from bridge.outbox.view import AsyncOutboxView
from bridge.redis.connection import async_client
from bridge.redis.types import AsyncRedis
from bridge.settings import Settings

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_auth_settings(settings: Settings, require_auth: bool) -> None:
    """Refuse an app that must authenticate but has no way to."""
    ingress = settings.ingress
    if require_auth and not ingress.api_keys and not (ingress.sas_key and ingress.sas_key_name):
        raise ConfigurationError(
            "authentication is required (non-loopback bind or ingress.require_api_key) but no "
            "ingress.api_keys (or ingress.sas_key) are configured"
        )


async def healthz(request: Request) -> Response:
    """Liveness: the process answers."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Readiness: Redis answers a PING."""
    ingress: Ingress = request.app.state.ingress
    try:
        await ingress.view.ping()
    except StateStoreUnavailableError as exc:
        return JSONResponse(
            {"status": "unavailable", "reason": str(exc)},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return JSONResponse({"status": "ready"})


async def openapi(request: Request) -> Response:
    """The OpenAPI document."""
    return JSONResponse(document())


class SingleMessageFastPath:
    """Sends ``POST /v1/entities/{entity}/messages`` straight to its handler; everything else to Starlette.

    The single-message route is the hot path of the ingress (one request per message); skipping the router
    and middleware stack for it is a large share of the per-request CPU (bench/ingress.py). The handler,
    its errors and its answers are exactly those of the routed path; an unexpected exception still becomes
    a 500, as ``ServerErrorMiddleware`` would make it.
    """

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.state = app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and path.startswith("/v1/entities/")
            and path.endswith("/messages")
            and len(path) > len("/v1/entities//messages")
        ):
            scope["app"] = self.app
            scope["path_params"] = {"entity": path[len("/v1/entities/") : -len("/messages")]}
            try:
                response = await v1.post_message(Request(scope, receive))
            except Exception:
                log.exception("unhandled error in the single-message route")
                response = JSONResponse(
                    {"error": {"code": "internal_error", "message": "internal error"}}, 500
                )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(
    settings: Settings,
    *,
    require_auth: bool = False,
    client: AsyncRedis | None = None,
    sample_history: bool | None = None,
) -> SingleMessageFastPath:
    """The ingress app; ``client`` (an asyncio Redis client) defaults to one built from ``redis_url``.

    ``sample_history`` runs the status page's sampler (``bridge.observability.history``) while the app
    lives; by default when ``status_history.enabled`` and the app makes its own client (an app handed a
    client is embedded, e.g. in a test, and samples only when asked).
    """
    check_auth_settings(settings, require_auth)
    sampling = settings.status_history.enabled and (
        client is None if sample_history is None else sample_history
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        redis_client = client if client is not None else async_client(settings.redis_url.get_secret_value())
        await AsyncOutboxView(redis_client, settings).check_start_up()
        app.state.ingress = Ingress(settings, AsyncOutbox(redis_client, settings), require_auth=require_auth)
        log.info("ingress ready (authentication %s)", "required" if require_auth else "optional")
        sampler = HistorySampler(settings, StateReader(settings, backlog=False)).start() if sampling else None
        try:
            yield
        finally:
            if sampler is not None:
                sampler.stop()
            await app.state.ingress.batcher.close()
            if client is None:
                await redis_client.aclose()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        *v1.routes,
        *operations.routes,
        *api_docs.routes,
        *rest_door.routes,
    ]
    # Every refusal is JSON with a code, also the router's own 404/405 and an unexpected 500.
    handlers = {HTTPException: http_error, Exception: server_error}
    return SingleMessageFastPath(Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers))
