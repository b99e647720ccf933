"""Operator routes of the ingress: ``/metrics`` (Prometheus), ``/status`` (page), ``/status.json``,
``/status/history.json`` (the page's charts) and ``/status/assets`` (the charting library, served here so
the page works offline).

``/metrics`` serves this process's series and the shared state read from Redis at scrape time
(``bridge.observability``); ``/status.json`` is ``bridge status --json`` with the extras of
``bridge.observability.snapshot`` (oldest outbox age, backlog depths, syphon, receiver counters), and
``/status`` the page that polls it; ``status.json`` also carries the page's one-line ``summary`` and its
``errors`` (``bridge.observability.health_view``), and ``history.json`` the charts' series of the samples
in Redis (``bridge.core.history_series``, ``bridge.state.history``). The Redis reads are blocking and
run in a worker thread, on a client of their own (``StateReader``), so a slow scrape never stalls the
event loop that answers producers.

When the ingress requires authentication, ``/metrics``, ``/status.json`` and ``history.json`` require a
valid API key too (any key: they show every entity's state, never a message or a secret); the page and
its assets hold no data.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from bridge.core.history_series import build_series
from bridge.http.status_page import PAGE
from bridge.http.v1 import answers_errors, ingress_of
from bridge.observability.exposition import CONTENT_TYPE, process_registry, render
from bridge.observability.health_view import with_health
from bridge.observability.snapshot import StateReader
from bridge.settings import Settings
from bridge.state.history import HistoryStore

ASSETS = Path(__file__).resolve().parent / "static"
"""The page's vendored assets: uPlot (MIT, its licence beside it), ``docs/operations.md``."""


class Operations:
    """The state reader and registry of the operator routes (one per app)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.reader = StateReader(settings)
        self.registry = process_registry(self.reader)

    def history(self) -> HistoryStore:
        """The history store on the reader's client."""
        history = self.settings.status_history
        return HistoryStore(self.reader.client(), history.window, history.samples)

    def status(self) -> dict[str, Any]:
        """The snapshot with the page's summary and error list."""
        return with_health(self.settings, self.reader.client(), self.reader.snapshot())

    def series(self) -> dict[str, Any]:
        """The charts' data: every sample in the window, as series and bands."""
        history = self.settings.status_history
        names = {
            role: ns.namespace_name
            for role, ns in (("primary", self.settings.primary), ("secondary", self.settings.secondary))
            if ns is not None
        }
        store = self.history()
        out = build_series(store.samples(), history.interval, names)
        out.update(window=history.window, enabled=history.enabled, memory_bytes=store.memory())
        return out


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
    return JSONResponse(await run_in_threadpool(ops.status), headers={"Cache-Control": "no-store"})


@answers_errors()
async def history_json(request: Request) -> Response:
    """The history the page charts (``Operations.series``)."""
    _authorize(request)
    ops = operations_of(request)
    return JSONResponse(await run_in_threadpool(ops.series), headers={"Cache-Control": "no-store"})


async def status_page(request: Request) -> Response:
    """The status page (static; its script polls ``status.json``)."""
    return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})


routes = [
    Route("/metrics", metrics, methods=["GET"]),
    Route("/status", status_page, methods=["GET"]),
    Route("/status.json", status_json, methods=["GET"]),
    Route("/status/history.json", history_json, methods=["GET"]),
    Mount("/status/assets", app=StaticFiles(directory=ASSETS), name="status-assets"),
]
