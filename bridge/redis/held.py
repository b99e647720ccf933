"""One pooled connection kept for several round trips: a write, then its ``WAIT``/``WAITAOF``.

``WAIT`` and ``WAITAOF`` count only the writes of the connection they run on, and the outbox sends its
confirmation one round trip after the writes (``bridge.outbox.store.Confirm`` says why); a pipeline gives
its connection back to the pool after each ``execute``, so the two could land on different connections.
``HeldConnection`` takes one connection from the client's pool and keeps it until ``release``.

Replies are read one by one; an error reply is returned as its ``ResponseError`` (a pipeline's
``raise_on_error=False``). A broken connection is closed before it goes back to the pool, and the driver's
error propagates (``bridge.redis.errors`` translates it). A Cluster client has no single pool: there the
connection is held on one node (``bridge.outbox.node_held``), the blocking client's pool of that node, or
the asyncio node itself (``NodePool`` gives it the pool's two methods).
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
        # ``client``: a ``redis.Redis`` (single server, Sentinel-managed primary, or one Cluster node's).
        self.pool: Any = client.connection_pool
        self.conn: Any = None

    def run(self, calls: Sequence[tuple[Any, ...]], *, errors_as_values: bool = True) -> list[Any]:
        """Send ``calls`` in one round trip on the held connection; their replies in order."""
        self.send(calls)
        return self.read(len(calls), errors_as_values=errors_as_values)

    def send(self, calls: Sequence[tuple[Any, ...]]) -> None:
        """Send ``calls`` without reading their replies (``read`` does): several nodes wait at once."""
        if self.conn is None:
            self.conn = self.pool.get_connection()
        conn = self.conn
        try:
            conn.send_packed_command(conn.pack_commands(calls))
        except _BROKEN:
            conn.disconnect()
            raise

    def read(self, count: int, *, errors_as_values: bool = True) -> list[Any]:
        """The replies of the ``count`` calls last sent, in order."""
        conn = self.conn
        try:
            replies = []
            for _ in range(count):
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


class NodePool:
    """An asyncio Cluster node (``redis.asyncio.cluster.ClusterNode``) seen as a connection pool."""

    def __init__(self, node: Any) -> None:
        self.node = node

    async def get_connection(self) -> Any:
        """A free connection of the node (it connects on first use)."""
        return self.node.acquire_connection()

    async def release(self, conn: Any) -> None:
        """Back to the node's free list."""
        self.node.release(conn)


class AsyncHeldConnection:
    """The asyncio counterpart of ``HeldConnection``."""

    def __init__(self, client: Any, pool: Any = None) -> None:
        # ``client``: a ``redis.asyncio.Redis``; on a Cluster, ``pool`` is a ``NodePool`` instead.
        self.pool: Any = client.connection_pool if pool is None else pool
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
