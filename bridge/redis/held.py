"""One pooled connection kept for several round trips: a write, then its ``WAIT``/``WAITAOF``.

``WAIT`` and ``WAITAOF`` count only the writes of the connection they run on, and the outbox sends its
confirmation one round trip after the writes (``bridge.outbox.store.Confirm`` says why); a pipeline gives
its connection back to the pool after each ``execute``, so the two could land on different connections.
``HeldConnection`` takes one connection from the client's pool and keeps it until ``release``.

Replies are read one by one; an error reply is returned as its ``ResponseError`` (a pipeline's
``raise_on_error=False``). A broken connection is closed before it goes back to the pool, and the driver's
error propagates (``bridge.redis.errors`` translates it). Single servers and Sentinel-managed primaries
only: a Cluster client has no single pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

_BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def _first_error(replies: list[Any], errors_as_values: bool) -> list[Any]:
    if not errors_as_values:
        for reply in replies:
            if isinstance(reply, redis.exceptions.ResponseError):
                raise reply
    return replies


class HeldConnection:
    """A blocking client's connection, held across calls of ``run``."""

    def __init__(self, client: Any) -> None:
        # ``client``: a ``redis.Redis`` (single server or Sentinel-managed primary), never a Cluster.
        self.pool: Any = client.connection_pool
        self.conn: Any = None

    def run(self, calls: Sequence[tuple[Any, ...]], *, errors_as_values: bool = True) -> list[Any]:
        """Send ``calls`` in one round trip on the held connection; their replies in order."""
        if self.conn is None:
            self.conn = self.pool.get_connection()
        conn = self.conn
        try:
            conn.send_packed_command(conn.pack_commands(calls))
            replies = []
            for _ in calls:
                try:
                    replies.append(conn.read_response())
                except redis.exceptions.ResponseError as exc:
                    replies.append(exc)
        except _BROKEN:
            conn.disconnect()
            raise
        return _first_error(replies, errors_as_values)

    def release(self) -> None:
        """Give the connection back to the pool."""
        if self.conn is not None:
            self.pool.release(self.conn)
            self.conn = None


class AsyncHeldConnection:
    """The asyncio counterpart of ``HeldConnection``."""

    def __init__(self, client: Any) -> None:
        # ``client``: a ``redis.asyncio.Redis``, never a Cluster.
        self.pool: Any = client.connection_pool
        self.conn: Any = None

    async def run(self, calls: Sequence[tuple[Any, ...]], *, errors_as_values: bool = True) -> list[Any]:
        """Send ``calls`` in one round trip on the held connection; their replies in order."""
        if self.conn is None:
            self.conn = await self.pool.get_connection()
        conn = self.conn
        try:
            await conn.send_packed_command(conn.pack_commands(calls))
            replies = []
            for _ in calls:
                try:
                    replies.append(await conn.read_response())
                except redis.exceptions.ResponseError as exc:
                    replies.append(exc)
        except _BROKEN:
            await conn.disconnect()
            raise
        return _first_error(replies, errors_as_values)

    async def release(self) -> None:
        """Give the connection back to the pool."""
        if self.conn is not None:
            await self.pool.release(self.conn)
            self.conn = None
