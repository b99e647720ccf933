"""``Receiver`` and ``AsyncReceiver``: the receiving end's Python API (``docs/receiving.md``).

Both receive an entity (a queue, or a subscription of a topic) from both namespaces and hand each message
to the handler once (``bridge.receiving.engine``). ``Receiver`` takes a plain function and blocks in
``run()``; ``AsyncReceiver`` takes a coroutine function (or a plain one) and is awaited. Underneath both is
the SDK's blocking client on threads: receive and complete with it measured faster than with the SDK's
asyncio client (no settlement pipelining to gain from), and the asyncio face only schedules each handler
call on the caller's event loop.

Settings (``Settings.receiver``): ``window``, ``max_remembered``, ``prefetch``, ``batch_size``,
``concurrency``, ``max_wait``, ``inflight_ttl``, ``busy_wait``, ``max_delivery_count``,
``max_lock_renewal``, ``session_idle``; Redis is ``redis_url``; the namespaces ``primary`` / ``secondary``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from bridge.core.received import ReceivedMessage
from bridge.core.receiving import ReceiverCounts
from bridge.receiving.counters import ReceiverCounterStore
from bridge.receiving.engine import ReceiveEngine
from bridge.receiving.keys import ReceiverKeys
from bridge.redis.connection import sync_client
from bridge.settings import Settings, load_settings

SyncHandler = Callable[[ReceivedMessage], object]
AsyncHandler = Callable[[ReceivedMessage], Awaitable[object]]


def read_counts(settings: Settings, entity: str, subscription: str | None = None) -> ReceiverCounts:
    """The receiver counters of ``entity`` (or its ``subscription``), summed over every receiver process."""
    client = sync_client(settings.redis_url.get_secret_value())
    try:
        return ReceiverCounterStore(client, ReceiverKeys(entity, subscription)).read()
    finally:
        client.close()


class Receiver:
    """Hands each message of ``entity`` to ``handler`` once; ``run()`` blocks until ``stop()``.

    ``handler(message)`` returns when the message is handled and raises when it is not (the copy is then
    abandoned and retried; on its last delivery it is dead-lettered with the error). A ``Receiver`` runs
    once; ``stop()`` may be called from any thread or a signal handler.
    """

    def __init__(
        self,
        entity: str,
        handler: SyncHandler,
        *,
        subscription: str | None = None,
        settings: Settings | None = None,
        sessions: bool | None = None,
    ) -> None:
        self.entity = entity
        self.subscription = subscription
        self.settings = settings or load_settings()
        self._engine = ReceiveEngine(
            self.settings, entity, handler, subscription=subscription, sessions=sessions
        )

    def run(self) -> None:
        """Receive until ``stop()``; the batches in hand are finished and settled before it returns."""
        self._engine.run()

    def stop(self) -> None:
        """Ask ``run()`` to finish the work in hand and return."""
        self._engine.stop()

    def counts(self) -> ReceiverCounts:
        """The entity's receiver counters (every process's)."""
        return read_counts(self.settings, self.entity, self.subscription)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def on_loop(handler: SyncHandler | AsyncHandler, loop: asyncio.AbstractEventLoop) -> SyncHandler:
    """``handler`` as the engine's threads call it: a coroutine it returns runs on ``loop`` (waited for)."""

    def call(message: ReceivedMessage) -> object:
        result: Any = handler(message)
        if inspect.isawaitable(result):
            return asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
        return result

    return call


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable


class AsyncReceiver:
    """The asyncio counterpart of ``Receiver``: ``await receiver.run()``; handlers run on the caller's loop.

    Cancelling ``run()`` stops the receiver the same way as ``stop()`` (the work in hand is finished) and
    then re-raises the cancellation.
    """

    def __init__(
        self,
        entity: str,
        handler: AsyncHandler | SyncHandler,
        *,
        subscription: str | None = None,
        settings: Settings | None = None,
        sessions: bool | None = None,
    ) -> None:
        self.entity = entity
        self.subscription = subscription
        self.handler = handler
        self.sessions = sessions
        self.settings = settings or load_settings()
        self._engine: ReceiveEngine | None = None
        self._stopped = False

    async def run(self) -> None:
        """Receive until ``stop()`` or cancellation."""
        loop = asyncio.get_running_loop()
        engine = ReceiveEngine(
            self.settings,
            self.entity,
            on_loop(self.handler, loop),
            subscription=self.subscription,
            sessions=self.sessions,
        )
        self._engine = engine
        if self._stopped:
            engine.stop()
        running = asyncio.ensure_future(asyncio.to_thread(engine.run))
        try:
            await asyncio.shield(running)
        except asyncio.CancelledError:
            engine.stop()
            await running  # handlers still scheduled on this loop need it running to finish
            raise

    def stop(self) -> None:
        """Ask ``run()`` to finish the work in hand and return (thread-safe)."""
        self._stopped = True
        if self._engine is not None:
            self._engine.stop()

    async def counts(self) -> ReceiverCounts:
        """The entity's receiver counters (every process's)."""
        return await asyncio.to_thread(read_counts, self.settings, self.entity, self.subscription)

    async def __aenter__(self) -> AsyncReceiver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
