"""Helpers for the ingress tests: a real uvicorn server in a thread, Redis snapshots, and reading what
the ingress stored as the drainers do (``read_all``, from ``outbox_support``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import uvicorn

from bridge.embedded.ports import free_port
from bridge.http.app import create_app
from bridge.http.server import uvicorn_options
from bridge.settings import Settings
from tests.integration.outbox_support import read_all

__all__ = ["read_all", "running_ingress", "snapshot"]


@contextmanager
def running_ingress(
    settings: Settings, *, require_auth: bool = False, sample_history: bool = False
) -> Iterator[str]:
    """Serve the real app with uvicorn on a free loopback port, as ``bridge serve`` does; yield its base URL
    (``https://`` when the settings name a TLS certificate). The status page's sampler runs only when
    asked: it writes to Redis on its own clock, and the ingress tests compare Redis before and after."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, require_auth=require_auth, sample_history=sample_history),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        **uvicorn_options(settings),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("ingress server did not start")
        time.sleep(0.01)
    try:
        scheme = "https" if settings.ingress.tls_certificate is not None else "http"
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def snapshot(client: redis.Redis) -> dict[Any, Any]:
    """Every key's serialized value (DUMP): equal snapshots mean Redis is unchanged."""
    return {key: client.dump(key) for key in sorted(client.keys("*"))}
