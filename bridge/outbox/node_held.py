"""Writes to be confirmed on a Redis Cluster: each on a connection held on the master that takes it.

``WAIT``/``WAITAOF`` confirm the writes of the connection they run on (``bridge.redis.held``), and on a
Cluster each entity's keys live on one master. So a write call that must be confirmed holds one connection
per master it writes to, runs each entity's script on its master's held connection, and then asks each of
those masters, on that same connection and all at once, for its confirmation. A master that confirms too
few refuses only the groups it took; the groups of the other masters keep their acknowledgement.

The fence: on a Cluster ``PUBLISH`` travels over the cluster bus, not the replication stream, so it does
not move the connection's replication offset (``bridge.core.durability.FENCE_CHANNEL`` is the single-server
fence), and a script call that wrote nothing (a re-posted duplicate) would be confirmed at once. Each
script call is followed, in its round trip, by ``SET`` and ``DEL`` of the entity's fence key
(``bridge.outbox.keys.fence``): both are replicated, nothing stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis

from bridge.outbox import keys
from bridge.outbox.scripts import WRITE
from bridge.outbox.writer import Command
from bridge.redis.errors import DRIVER_ERRORS
from bridge.redis.held import AsyncHeldConnection, HeldConnection, NodePool
from bridge.redis.scripts import is_noscript
from bridge.redis.types import AsyncRedis, SyncRedis

NodeReply = tuple[str | None, Any]
"""The node that ran a script call (None: no node serves its slot now) and the call's reply or error."""


def _calls(command: Command) -> list[tuple[Any, ...]]:
    fence = keys.fence(command.entity)
    return [
        ("EVALSHA", WRITE.sha, len(command.keys), *command.keys, *command.args),
        ("SET", fence, "1"),
        ("DEL", fence),
    ]


_LOAD = ("SCRIPT", "LOAD", WRITE.text)
_REDIRECTED = (redis.exceptions.MovedError, redis.exceptions.AskError)


class NodeConnections:
    """The held connections of one blocking write call, one per master (``release`` gives them back)."""

    def __init__(self, client: SyncRedis) -> None:
        self.client: Any = client
        self.held: dict[str, HeldConnection] = {}

    def script(self, command: Command) -> NodeReply:
        """Run the command's script and its fence on the held connection of the master of its slot."""
        try:
            node = self.client.get_node_from_key(command.keys[0])
        except DRIVER_ERRORS as exc:  # a slot nobody serves now (a failover under way)
            return None, exc
        if node.name not in self.held:
            self.held[node.name] = HeldConnection(self.client.get_redis_connection(node))
        held = self.held[node.name]
        try:
            replies = held.run(_calls(command))
            if is_noscript(replies[0]):
                held.run([_LOAD], errors_as_values=False)
                replies = held.run(_calls(command))
        except DRIVER_ERRORS as exc:
            return node.name, exc
        if isinstance(replies[0], _REDIRECTED):
            self.client.nodes_manager.initialize()  # the slot moved: the next write finds its master
        return node.name, replies[0]

    def confirm(self, commands: Sequence[tuple[Any, ...]], names: Sequence[str]) -> dict[str, Any]:
        """``commands`` (``WAIT``, ``WAITAOF``) on each named master's held connection, sent to all first;
        per master, the last command's reply."""
        out: dict[str, Any] = {}
        sent = []
        for name in names:
            try:
                self.held[name].send(commands)
                sent.append(name)
            except DRIVER_ERRORS as exc:
                out[name] = exc
        for name in sent:
            try:
                out[name] = self.held[name].read(len(commands))[-1]
            except DRIVER_ERRORS as exc:
                out[name] = exc
        return out

    def release(self) -> None:
        """Give every held connection back to its node's pool."""
        for held in self.held.values():
            held.release()
        self.held.clear()


class AsyncNodeConnections:
    """The asyncio counterpart of ``NodeConnections``."""

    def __init__(self, client: AsyncRedis) -> None:
        self.client: Any = client
        self.held: dict[str, AsyncHeldConnection] = {}

    async def script(self, command: Command) -> NodeReply:
        """Run the command's script and its fence on the held connection of the master of its slot."""
        try:
            await self.client.initialize()  # a no-op once the client knows the slots
            node = self.client.get_node_from_key(command.keys[0])
        except DRIVER_ERRORS as exc:
            return None, exc
        if node.name not in self.held:
            self.held[node.name] = AsyncHeldConnection(self.client, NodePool(node))
        held = self.held[node.name]
        try:
            replies = await held.run(_calls(command))
            if is_noscript(replies[0]):
                await held.run([_LOAD], errors_as_values=False)
                replies = await held.run(_calls(command))
        except DRIVER_ERRORS as exc:
            return node.name, exc
        if isinstance(replies[0], _REDIRECTED):
            await self.client.nodes_manager.initialize()
        return node.name, replies[0]

    async def confirm(self, commands: Sequence[tuple[Any, ...]], names: Sequence[str]) -> dict[str, Any]:
        """``commands`` on each named master's held connection, all at once; per master, the last reply."""

        async def one(name: str) -> Any:
            try:
                return (await self.held[name].run(commands))[-1]
            except DRIVER_ERRORS as exc:
                return exc

        replies = await asyncio.gather(*(one(name) for name in names))
        return dict(zip(names, replies, strict=True))

    async def release(self) -> None:
        """Give every held connection back to its node."""
        for held in self.held.values():
            await held.release()
        self.held.clear()
