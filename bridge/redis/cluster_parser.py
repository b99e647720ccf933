"""The asyncio Cluster client's command table, read from any live master rather than from a dead one.

redis-py's asyncio ``RedisCluster`` reads the command table (``COMMAND``) from its *default node* every
time it re-reads the topology, which it does after any connection error, and it makes the default node
the first master of the new slot table: often the master that just died, which the table still lists
until its replica is promoted. Every command then failed, on every master, for the whole promotion (5-10 s
in production): one dead master stalled every entity of the HTTP door. The blocking client reads the
table once and is not affected.

``TolerantCommandsParser`` tries the default node, then every other master it knows; the command table
does not change with the topology, so when none answers it keeps the table it has (the commands that
need a node for ``COMMAND GETKEYS`` then fail on their own, not the others).
"""

from __future__ import annotations

from typing import Any

from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class TolerantCommandsParser(AsyncCommandsParser):
    """``AsyncCommandsParser`` whose ``initialize`` moves on from a master that does not answer."""

    __slots__ = ("client",)

    def __init__(self, client: RedisCluster) -> None:
        super().__init__()
        self.client = client

    async def initialize(self, node: ClusterNode | None = None) -> None:
        """Read the command table from ``node`` or the first other master that answers."""
        candidates = [node] if node is not None else []
        candidates += [n for n in self.client.get_primaries() if n is not node]
        failure: Exception | None = None
        for candidate in candidates:
            try:
                commands: dict[str, Any] = await candidate.execute_command("COMMAND")
            except (RedisConnectionError, RedisTimeoutError) as exc:
                failure = exc
                continue
            self.node = candidate
            self.commands = {name.lower(): command for name, command in commands.items()}
            return
        if not self.commands and failure is not None:
            raise failure


def tolerate_dead_masters(client: Any) -> Any:
    """``client`` with a ``TolerantCommandsParser`` when it is an asyncio cluster client."""
    if isinstance(client, RedisCluster):
        client.commands_parser = TolerantCommandsParser(client)
    return client
