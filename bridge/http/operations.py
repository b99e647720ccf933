"""Operator routes of the ingress: ``/metrics`` (Prometheus), ``/status`` (page) and ``/status.json``.

``/metrics`` serves this process's series and the shared state read from Redis at scrape time
(``bridge.observability``); ``/status.json`` is ``bridge status --json`` with the extras of
``bridge.status.snapshot`` (oldest outbox age, backlog depths, syphon, receiver counters), and
``/status`` the page that polls it. The Redis reads are blocking and run in a worker thread, on a client
of their own (``StateReader``), so a slow scrape never stalls the event loop that answers producers.

When the ingress requires authentication, ``/metrics`` and ``/status.json`` require a valid API key too
(any key: they show every entity's state, never a message or a secret); the page itself holds no data.
"""

from __future__ import annotations

import threading

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from bridge.http.status_page import PAGE
from bridge.http.v1 import answers_errors, ingress_of
from bridge.settings import Settings
from bridge.status.exposition import CONTENT_TYPE, process_registry, render
from bridge.status.snapshot import StateReader


class Operations:
    """The state reader and registry of the operator routes (one per app)."""

    def __init__(self, settings: Settings) -> None:
        self.reader = StateReader(settings)
        self.registry = process_registry(self.reader)


_LOCK = threading.Lock()


def operations_of(request: Request) -> Operations:
    """The app's ``Operations``, made on the first operator request."""
    state = request.app.state
    with _LOCK:
        ops: Operations | None = getattr(state, "operations", None)
        if ops is None:
            ops = Operations(ingress_of(request).settings)
            state.operations = ops
    return ops


def _authorize(request: Request) -> None:
    ingress = ingress_of(request)
    if ingress.require_auth:
        ingress.authenticate(request)


@answers_errors()
async def metrics(request: Request) -> Response:
    """Prometheus text exposition."""
    _authorize(request)
    ops = operations_of(request)
    payload = await run_in_threadpool(render, ops.registry)
    return Response(payload, media_type=CONTENT_TYPE)


@answers_errors()
async def status_json(request: Request) -> Response:
    """The snapshot the status page shows."""
    _authorize(request)
    ops = operations_of(request)
    return JSONResponse(await run_in_threadpool(ops.reader.snapshot), headers={"Cache-Control": "no-store"})


async def status_page(request: Request) -> Response:
    """The status page (static; its script polls ``status.json``)."""
    return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/status", status_page, methods=["GET"]),
    Route("/status.json", status_json, methods=["GET"]),
]
