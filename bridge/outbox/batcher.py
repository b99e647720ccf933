"""Coalesce outbox writes of concurrent requests into one Redis round trip.

Each HTTP request hands its group to ``WriteBatcher.submit`` and waits. While one pipeline is on the wire,
new groups queue up; when it returns, everything that queued goes out together as the next pipeline. Under
load a round trip thus carries many requests (one ``EVALSHA`` per entity) and throughput follows Redis, not
the request rate; when idle, a lone request goes out at once, so nothing waits for a timer. When every write
is confirmed by the replicas (``WAIT``/``WAITAOF``), the ingress lets two pipelines be in flight: one waits
for its replicas while the next is written. Requests in flight at the same time were never ordered among
themselves (none was acknowledged), so this changes no order a sender can rely on.

Each group keeps its own outcome: one request's backpressure refusal does not fail the others in the same
pipeline. A driver failure (Redis down) fails every group of that pipeline, none of which was acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bridge.errors import BridgeError, OutboxUnavailableError
from bridge.outbox.store import AsyncOutbox
from bridge.outbox.writer import Ack, Group


class WriteBatcher:
    """Queue of pending groups drained by at most ``max_in_flight`` pipelines at a time."""

    def __init__(self, outbox: AsyncOutbox, *, max_groups: int = 512, max_in_flight: int = 1) -> None:
        self.outbox = outbox
        self.max_groups = max_groups
        self.max_in_flight = max_in_flight
        self._queue: list[tuple[Group, asyncio.Future[list[Ack]]]] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, group: Group) -> list[Ack]:
        """Store ``group``; return its acks once Redis answered, or raise the error that refused it."""
        future: asyncio.Future[list[Ack]] = asyncio.get_running_loop().create_future()
        self._queue.append((group, future))
        if self._in_flight < self.max_in_flight:
            self._in_flight += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self.max_groups]
                del self._queue[: self.max_groups]
                await self._write(batch)
        finally:
            self._in_flight -= 1

    async def _write(self, batch: Sequence[tuple[Group, asyncio.Future[list[Ack]]]]) -> None:
        try:
            results = await self.outbox.write([group for group, _ in batch])
        except BridgeError as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except Exception:  # a bug must not leave requests hanging forever
            for _, future in batch:
                if not future.done():
                    future.set_exception(OutboxUnavailableError("outbox write failed unexpectedly"))
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # the request was cancelled (client went away)
                continue
            if isinstance(result, list):
                future.set_result(result)
            else:
                future.set_exception(result)

    async def close(self) -> None:
        """Wait for the pipelines on the wire (requests already submitted get their answer)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
