"""The outbox writer bound to a Redis connection: ``SyncOutbox`` (blocking) and ``AsyncOutbox`` (asyncio).

One call sends every group's script in one pipeline (one round trip), then ``WAIT`` when replicas must
confirm, and returns per group either its acks or the error that refused it. Driver errors become
``OutboxUnavailableError`` / ``BackpressureError`` here and never leave the package.

Scripts run by ``EVALSHA``; when a server does not know the script yet (fresh start, failover, a cluster
node added), it is loaded and only the refused calls are sent again: ``NOSCRIPT`` means nothing ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

from bridge.errors import BackpressureError, BridgeError, OutboxUnavailableError
from bridge.outbox import keys
from bridge.outbox.connection import driver_errors, is_cluster, translate
from bridge.outbox.scripts import WRITE
from bridge.outbox.writer import Ack, Command, Group, OutboxWriter
from bridge.settings import Settings

GroupResult = list[Ack] | BridgeError


def _sort(writer: OutboxWriter, groups: Sequence[Group]) -> tuple[dict[int, GroupResult], list[Group]]:
    """Cluster only: refuse up front the groups that would pass the total bound as last seen."""
    early: dict[int, GroupResult] = {}
    send: list[Group] = []
    for index, group in enumerate(groups):
        if writer.cluster and writer.over_seen_totals(group):
            early[index] = _total_full(writer)
        else:
            send.append(group)
    return early, send


def _total_full(writer: OutboxWriter) -> BridgeError:
    return BackpressureError("the outbox of the bridge is full; retry later", retry_after=writer.retry_after)


def _collect(
    writer: OutboxWriter,
    groups: Sequence[Group],
    early: dict[int, GroupResult],
    commands: list[Command],
    replies: list[Any],
) -> list[GroupResult]:
    wait_reply = replies[len(commands)] if _waits(writer) else None
    by_group: dict[int, GroupResult] = {}
    for command, reply in zip(commands, replies[: len(commands)], strict=True):
        if isinstance(reply, Exception):
            error = translate(reply)
            results: list[GroupResult] = [
                error if isinstance(error, BridgeError) else OutboxUnavailableError("outbox write failed")
            ] * len(command.groups)
        else:
            results = writer.results(command, reply)
        if wait_reply is not None and int(wait_reply) < writer.wait_replicas:
            failed = OutboxUnavailableError(
                f"written, but only {int(wait_reply)} of {writer.wait_replicas} replicas confirmed in time; "
                "retry with the same message_id"
            )
            results = [failed if isinstance(r, list) else r for r in results]
        for group, result in zip(command.groups, results, strict=True):
            by_group[id(group)] = result
    out: list[GroupResult] = []
    for index, group in enumerate(groups):
        out.append(early[index] if index in early else by_group[id(group)])
    return out


def _new_entities(writer: OutboxWriter, groups: Sequence[Group], results: list[GroupResult]) -> list[str]:
    """Entities this process has not yet listed in ``keys.ENTITIES`` that just got an entry."""
    found = {g.entity for g, r in zip(groups, results, strict=True) if isinstance(r, list)}
    return sorted(found - writer.known_entities)


def _is_noscript(reply: object) -> bool:
    return isinstance(reply, redis.exceptions.NoScriptError)


class SyncOutbox:
    """Blocking outbox writes (used by ``bridge.Producer`` and the Redis door)."""

    def __init__(self, client: Any, settings: Settings) -> None:
        # ``client``: any blocking client from ``bridge.outbox.connection.sync_client``.
        self.client = client
        self.writer = OutboxWriter(settings, cluster=is_cluster(client))

    def write(self, groups: Sequence[Group]) -> list[GroupResult]:
        """Store every group atomically; per group, its acks or the error that refused it."""
        writer = self.writer
        with driver_errors():
            if writer.cluster and any(writer.over_seen_totals(g) for g in groups):
                seen = self.client.hmget(keys.TOTALS, ["messages", "bytes"])
                writer.seen_totals = (int(seen[0] or 0), int(seen[1] or 0))
            early, send = _sort(writer, groups)
            if not send:
                return [early[i] for i in range(len(groups))]
            commands = writer.commands(send)
            replies = self._send(commands)
            results = _collect(writer, groups, early, commands, replies)
            new_entities = _new_entities(writer, groups, results)
            if new_entities:
                self.client.sadd(keys.ENTITIES, *new_entities)
                writer.known_entities.update(new_entities)
            if writer.cluster:
                messages, size = _accepted(writer, results, early, send)
                pipe = self.client.pipeline(transaction=False)
                pipe.hincrby(keys.TOTALS, "messages", messages)
                pipe.hincrby(keys.TOTALS, "bytes", size)
                totals = pipe.execute()
                writer.seen_totals = (int(totals[0]), int(totals[1]))
        return results

    def _send(self, commands: list[Command]) -> list[Any]:
        """Script replies (or their errors) in command order, then the ``WAIT`` reply if any."""
        # A cluster pipeline refuses EVALSHA: one call per entity. A lone call needs no pipeline either.
        if self.writer.cluster or (len(commands) == 1 and not _waits(self.writer)):
            return [self._call(command) for command in commands]
        pipe = self.client.pipeline(transaction=False)
        _queue(pipe, self.writer, commands)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        retry = [i for i in range(len(commands)) if _is_noscript(replies[i])]
        if retry:
            self.client.script_load(WRITE.text)
            pipe = self.client.pipeline(transaction=False)
            _queue(pipe, self.writer, [commands[i] for i in retry])
            _merge(self.writer, replies, retry, pipe.execute(raise_on_error=False))
        return replies

    def _call(self, command: Command) -> Any:
        for attempt in (1, 2):
            try:
                return self.client.evalsha(WRITE.sha, len(command.keys), *command.keys, *command.args)
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                self.client.script_load(WRITE.text)
            except redis.exceptions.ResponseError as exc:
                return exc
        raise AssertionError("unreachable")


class AsyncOutbox:
    """asyncio outbox writes (used by the HTTP ingress through the batcher, and ``AsyncProducer``)."""

    def __init__(self, client: Any, settings: Settings) -> None:
        # ``client``: any asyncio client from ``bridge.outbox.connection.async_client``.
        self.client = client
        self.writer = OutboxWriter(settings, cluster=is_cluster(client))

    async def write(self, groups: Sequence[Group]) -> list[GroupResult]:
        """Store every group atomically; per group, its acks or the error that refused it."""
        try:
            return await self._write(groups)
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from None

    async def _write(self, groups: Sequence[Group]) -> list[GroupResult]:
        writer = self.writer
        if writer.cluster and any(writer.over_seen_totals(g) for g in groups):
            seen = await self.client.hmget(keys.TOTALS, ["messages", "bytes"])
            writer.seen_totals = (int(seen[0] or 0), int(seen[1] or 0))
        early, send = _sort(writer, groups)
        if not send:
            return [early[i] for i in range(len(groups))]
        commands = writer.commands(send)
        replies = await self._send(commands)
        results = _collect(writer, groups, early, commands, replies)
        new_entities = _new_entities(writer, groups, results)
        if new_entities:
            await self.client.sadd(keys.ENTITIES, *new_entities)
            writer.known_entities.update(new_entities)
        if writer.cluster:
            messages, size = _accepted(writer, results, early, send)
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(keys.TOTALS, "messages", messages)
            pipe.hincrby(keys.TOTALS, "bytes", size)
            totals = await pipe.execute()
            writer.seen_totals = (int(totals[0]), int(totals[1]))
        return results

    async def _send(self, commands: list[Command]) -> list[Any]:
        """Script replies (or their errors) in command order, then the ``WAIT`` reply if any."""
        if self.writer.cluster:  # a cluster pipeline refuses EVALSHA: one call per entity
            return [await self._call(command) for command in commands]
        pipe = self.client.pipeline(transaction=False)
        _queue(pipe, self.writer, commands)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        retry = [i for i in range(len(commands)) if _is_noscript(replies[i])]
        if retry:
            await self.client.script_load(WRITE.text)
            pipe = self.client.pipeline(transaction=False)
            _queue(pipe, self.writer, [commands[i] for i in retry])
            _merge(self.writer, replies, retry, await pipe.execute(raise_on_error=False))
        return replies

    async def _call(self, command: Command) -> Any:
        for attempt in (1, 2):
            try:
                return await self.client.evalsha(WRITE.sha, len(command.keys), *command.keys, *command.args)
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                await self.client.script_load(WRITE.text)
            except redis.exceptions.ResponseError as exc:
                return exc
        raise AssertionError("unreachable")


def _merge(writer: OutboxWriter, replies: list[Any], retry: list[int], again: list[Any]) -> None:
    """Put the replies of re-sent script calls in place; ``WAIT`` counts the weaker of its two answers."""
    for slot, index in enumerate(retry):
        replies[index] = again[slot]
    if _waits(writer):
        replies[-1] = min(int(replies[-1]), int(again[-1]))


def _waits(writer: OutboxWriter) -> bool:
    return writer.wait_replicas > 0 and not writer.cluster


def _queue(pipe: Any, writer: OutboxWriter, commands: Sequence[Command]) -> None:
    """The script calls, then ``WAIT`` when replicas must confirm (it covers every write before it)."""
    for command in commands:
        pipe.evalsha(WRITE.sha, len(command.keys), *command.keys, *command.args)
    if _waits(writer):
        pipe.execute_command("WAIT", writer.wait_replicas, writer.wait_timeout_ms)


def _accepted(
    writer: OutboxWriter, results: list[GroupResult], early: dict[int, GroupResult], send: list[Group]
) -> tuple[int, int]:
    sent = [result for index, result in enumerate(results) if index not in early]
    return writer.accepted(sent, send)
