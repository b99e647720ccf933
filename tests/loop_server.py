"""An asyncio event loop on a background thread, for tests that drive async servers with sync clients.

The emulator runs its HTTP handlers in one event loop; tests talk to them with blocking clients (the real
azure-servicebus SDK, httpx, raw sockets), so the loop lives on its own thread and the test thread submits
coroutines to it.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from bridge.emulator.http.server import HttpApp, serve_http

T = TypeVar("T")


class LoopThread:
    """A running event loop on a daemon thread; ``run`` executes a coroutine on it and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run ``coro`` on the loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def serve(self, app: HttpApp, ssl_context: ssl.SSLContext | None = None, **options: Any) -> int:
        """Start ``serve_http`` with ``app`` on a free loopback port (TLS when a context is given)."""

        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: serve_http(r, w, app, **options), "127.0.0.1", 0, ssl=ssl_context
            )

        server = self.run(start())
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    _servers: list[asyncio.Server]

    def __enter__(self) -> LoopThread:
        self._servers = []
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()
