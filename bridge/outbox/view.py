"""The asyncio read side of the outbox: depth, problem entries, readiness and the start-up durability check.

The HTTP app reaches Redis only through here (and ``AsyncOutbox`` for writes), so it never imports a driver
or names a key. ``queue_depth`` / ``depth_record`` are shared with the blocking ``OutboxReader.depth``
(``bridge status``): the commands and the record are built once for both clients. ``oldest_written`` is the
status snapshot's read of the oldest entry (``bridge.redis.pipelined``: on the snapshot's shared pipeline).

Driver errors leave as ``OutboxUnavailableError``; the start-up check raises ``ConfigurationError`` for a
Redis that cannot give the durability the settings ask for.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis

from bridge.errors import ConfigurationError, OutboxUnavailableError
from bridge.outbox import keys
from bridge.outbox.problems import list_problems_async
from bridge.outbox.scripts import WRITE
from bridge.redis.connection import is_cluster
from bridge.redis.errors import DRIVER_ERRORS, driver_errors
from bridge.redis.pipelined import PipelinedRead
from bridge.redis.scripts import load_async
from bridge.redis.types import AsyncRedis
from bridge.settings import Settings

log = logging.getLogger(__name__)

_FSYNC_STRICTNESS = {"always": 2, "everysec": 1, "no": 0}


def queue_depth(pipe: Any, entity: str) -> None:
    """Queue the depth reads of ``entity`` on a pipeline (blocking or asyncio: queueing does no I/O)."""
    pipe.hmget(keys.stats(entity), ["messages", "bytes"])
    pipe.xlen(keys.quarantine(entity))
    pipe.xlen(keys.deadletter(entity))
    pipe.xlen(keys.ingress(entity))


def depth_record(replies: Sequence[Any]) -> dict[str, int]:
    """The replies of ``queue_depth``'s commands as the depth record."""
    stats, quarantined, dead, ingress = replies
    return {
        "pending_messages": int(stats[0] or 0),
        "pending_bytes": int(stats[1] or 0),
        "quarantine": int(quarantined),
        "deadletter": int(dead),
        "ingress": int(ingress),
    }


def _entry_seconds(entry_id: Any) -> float | None:
    # A stream entry id starts with the milliseconds (Redis's clock) of the write that added it.
    millis = str(_text(entry_id)).partition("-")[0]
    return int(millis) / 1000.0 if millis.isdigit() else None


def oldest_written(entity: str, shards: int) -> PipelinedRead[float | None]:
    """When (epoch seconds, Redis's clock) the oldest entry still in the entity's ``shards`` shard streams
    was written; None when they hold nothing. One ``XRANGE ... COUNT 1`` per shard."""

    def queue(pipe: Any) -> None:
        for shard in range(shards):
            pipe.xrange(keys.outbox(entity, shard), count=1)

    def parse(replies: Sequence[Any]) -> float | None:
        written = [_entry_seconds(entry_id) for reply in replies for entry_id, _ in reply or []]
        return min((at for at in written if at is not None), default=None)

    return PipelinedRead(queue, parse)


async def _check_waitaof(client: AsyncRedis) -> None:
    """``ConfigurationError`` unless the server answers ``WAITAOF`` with its own AOF on (Redis >= 7.2).

    ``WAITAOF 1 0`` returns at once when the connection wrote nothing; Redis 7.0 does not know the command
    and a server without ``appendonly`` refuses it, and the refusal's text is the server's own.
    """
    try:
        if is_cluster(client):
            await client.execute_command("WAITAOF", 1, 0, 1000, target_nodes="primaries")
        else:
            await client.execute_command("WAITAOF", 1, 0, 1000)
    except redis.exceptions.ResponseError as exc:
        raise ConfigurationError(
            "ingress.durability = 'replicated' needs WAITAOF with appendonly yes on the primary"
            f" (Redis >= 7.2 or Valkey >= 7.2); the server said: {str(exc)[:120]}"
        ) from None
    except DRIVER_ERRORS as exc:
        raise ConfigurationError(f"cannot check WAITAOF at start-up ({type(exc).__name__})") from None


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


class AsyncOutboxView:
    """Reads of the outbox for the HTTP API (one per app, sharing the writer's asyncio client)."""

    def __init__(self, client: AsyncRedis, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    async def depth(self, entity: str) -> dict[str, int]:
        """Pending messages and bytes of the entity's outbox and the lengths of its streams."""
        with driver_errors(OutboxUnavailableError):
            pipe = self.client.pipeline(transaction=False)
            queue_depth(pipe, entity)
            return depth_record(await pipe.execute())

    async def problems(
        self, entity: str, which: str, *, count: int = 50, after: str = "-"
    ) -> list[dict[str, Any]]:
        """Entries of the quarantine or dead-letter stream after ``after``, oldest first."""
        return await list_problems_async(self.client, entity, which, count=count, after=after)

    async def ping(self) -> None:
        """Return when Redis answers; ``OutboxUnavailableError`` when it does not."""
        with driver_errors(OutboxUnavailableError):
            await self.client.ping()

    async def check_start_up(self) -> None:
        """Refuse to start on a Redis that cannot give what the settings demand; load the write script.

        ``ingress.durability = "replicated"`` needs ``WAITAOF`` and the primary's AOF, checked here once
        (on a Cluster, on every master).
        ``ingress.require_appendfsync`` needs the append-only file with an fsync policy at least that strict
        (``CONFIG GET append*``); it cannot be verified while Redis is down, so then start-up fails. Without
        it, an unreachable Redis only logs a warning: readiness and writes answer 503 until it is back.
        """
        ingress = self.settings.ingress
        client = self.client
        try:
            await load_async(client, WRITE)
        except redis.exceptions.ConnectionError as exc:
            if ingress.require_appendfsync:
                raise ConfigurationError(
                    f"cannot verify ingress.require_appendfsync: Redis unreachable ({type(exc).__name__})"
                ) from None
            log.warning(
                "Redis unreachable at start-up (%s); answering 503 until it is back", type(exc).__name__
            )
            return
        except DRIVER_ERRORS as exc:
            raise ConfigurationError(f"cannot load the outbox script ({type(exc).__name__})") from None
        if ingress.durability == "replicated":
            await _check_waitaof(client)
        if not ingress.require_appendfsync:
            return
        try:
            # Typed as text, but the bridge's clients answer bytes (``decode_responses=False``).
            config: dict[Any, Any] = await client.config_get("append*")
        except DRIVER_ERRORS as exc:
            raise ConfigurationError(f"cannot check Redis at start-up ({type(exc).__name__})") from None
        appendonly = _text(config.get(b"appendonly", config.get("appendonly")))
        fsync = _text(config.get(b"appendfsync", config.get("appendfsync")))
        wanted = _FSYNC_STRICTNESS[ingress.require_appendfsync]
        if appendonly != "yes" or _FSYNC_STRICTNESS.get(str(fsync), -1) < wanted:
            raise ConfigurationError(
                f"Redis runs appendonly={appendonly} appendfsync={fsync}; ingress.require_appendfsync "
                f"asks for appendonly=yes and appendfsync={ingress.require_appendfsync} or stricter"
            )
